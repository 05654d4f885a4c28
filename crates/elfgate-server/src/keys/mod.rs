//! API keys: `egk_<public id>_<secret>`. The public id (16 hex digits) names the key in lists,
//! logs and metrics and finds its row; the secret (256 random bits, base64url) is shown once, at
//! creation, and only its SHA-256 is stored. A secret of 256 random bits cannot be guessed or
//! searched for, so a fast hash is as good as a slow one here (docs/security.md, "API keys").

pub mod admin;
mod cache;

pub use cache::{KeyAuth, KeyCheckError, KeyRefusal};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

/// What every API key starts with.
pub const KEY_PREFIX: &str = "egk_";
/// Random bytes of a public id (shown as twice as many hex digits).
const ID_BYTES: usize = 8;
/// Random bytes of a secret: 256 bits.
const SECRET_BYTES: usize = 32;
/// Characters of a secret in base64url without padding.
const SECRET_CHARS: usize = 43;

/// A key just made: its public id, the whole key (shown once) and the hash to store.
pub struct NewKey {
    /// The public id.
    pub id: String,
    /// `egk_<id>_<secret>`: the only place the secret ever is.
    pub key: String,
    /// SHA-256 of the secret, lowercase hex.
    pub secret_hash: String,
}

/// The operating system's generator failed: no key is made without it.
#[derive(Debug, thiserror::Error)]
#[error("no random numbers from the operating system: {0}")]
pub struct NoRandomness(String);

impl NewKey {
    /// A new key from the operating system's generator.
    pub fn generate() -> Result<NewKey, NoRandomness> {
        let mut id = [0u8; ID_BYTES];
        let mut secret = [0u8; SECRET_BYTES];
        getrandom::fill(&mut id).map_err(|e| NoRandomness(e.to_string()))?;
        getrandom::fill(&mut secret).map_err(|e| NoRandomness(e.to_string()))?;
        let id = hex::encode(id);
        let secret = URL_SAFE_NO_PAD.encode(secret);
        Ok(NewKey {
            key: format!("{KEY_PREFIX}{id}_{secret}"),
            secret_hash: secret_hash(&secret),
            id,
        })
    }
}

/// The SHA-256 of a secret, lowercase hex: what the store keeps.
pub fn secret_hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Compares two byte strings in time that depends only on their lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    // black_box keeps the optimizer from turning the loop into an early exit.
    std::hint::black_box(diff) == 0
}

/// A bearer that is an API key, split into its public id and its secret; None when it is not
/// one (wrong prefix, an id or secret of the wrong length or alphabet).
pub fn parse_key(bearer: &str) -> Option<(&str, &str)> {
    let rest = bearer.strip_prefix(KEY_PREFIX)?;
    let (id, secret) = rest.split_at_checked(ID_BYTES * 2)?;
    let secret = secret.strip_prefix('_')?;
    let id_ok = id
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let secret_ok = secret.len() == SECRET_CHARS
        && secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    (id_ok && secret_ok).then_some((id, secret))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_bytes() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn a_new_key_parses_back_to_its_id_and_the_secret_of_its_hash() {
        let made = NewKey::generate().unwrap();
        let (id, secret) = parse_key(&made.key).unwrap();
        assert_eq!(id, made.id);
        assert_eq!(secret_hash(secret), made.secret_hash);
        assert_eq!(made.secret_hash.len(), 64);
        assert_ne!(NewKey::generate().unwrap().key, made.key);
    }

    #[test]
    fn what_is_not_a_key_does_not_parse() {
        let made = NewKey::generate().unwrap();
        for bad in [
            "",
            "egk_",
            "token",
            &made.key[..made.key.len() - 1],
            &format!("{}A", made.key),
            &made.key.replacen("egk_", "egx_", 1),
            &made.key.to_uppercase(),
            &made.key.replacen('_', "-", 2),
        ] {
            assert!(parse_key(bad).is_none(), "{bad}");
        }
    }
}
