//! Webhook signatures, both ways: Standard Webhooks' scheme (`webhook-id`, `webhook-timestamp`,
//! `webhook-signature: v1,BASE64` of HMAC-SHA256 over `ID.TIMESTAMP.BODY`), which binds a
//! delivery to its id and time so that a receiver can refuse a replay, and the older body-only
//! and timestamp-only forms Elfgate and GitHub send (docs/security.md, "Webhooks").

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The prefix of Standard Webhooks' secrets: the key is the base64 that follows.
const STANDARD_SECRET_PREFIX: &str = "whsec_";

/// How far a delivery's timestamp may be from the receiver's clock, either way (Standard
/// Webhooks' libraries use the same five minutes).
pub const TOLERANCE_SECS: i64 = 5 * 60;

/// Why a secret cannot sign.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// Set, but to nothing but blanks: an HMAC under the empty key is one anybody can make.
    #[error("{0} is set but blank: set a real secret or unset it")]
    Blank(String),
    /// `whsec_` and something that is not base64.
    #[error("{variable} starts with whsec_ but the rest is not base64: {why}")]
    NotBase64 {
        /// The variable.
        variable: String,
        /// The decoder's complaint.
        why: base64::DecodeError,
    },
}

/// The HMAC key of the secret in `variable`: for a `whsec_` secret, as Standard Webhooks'
/// libraries take it, the bytes its base64 stands for; for any other, the secret's bytes.
pub fn key_of(variable: &str, secret: &str) -> Result<Vec<u8>, SecretError> {
    if secret.trim().is_empty() {
        return Err(SecretError::Blank(variable.to_string()));
    }
    match secret.strip_prefix(STANDARD_SECRET_PREFIX) {
        Some(encoded) => BASE64
            .decode(encoded)
            .map_err(|why| SecretError::NotBase64 {
                variable: variable.to_string(),
                why,
            }),
        None => Ok(secret.as_bytes().to_vec()),
    }
}

/// The key in variable `variable`: None when it is not set (a node without the secret), an
/// error when it is set but cannot sign.
pub fn key_in(variable: &str) -> Result<Option<Vec<u8>>, SecretError> {
    match std::env::var(variable) {
        Ok(secret) => key_of(variable, &secret).map(Some),
        Err(_) => Ok(None),
    }
}

/// HMAC-SHA256 under `key` over `parts`, as raw bytes; None never happens in practice (HMAC
/// takes a key of any length, and an empty one is refused before anything is signed).
fn mac_over(key: &[u8], parts: &[&[u8]]) -> Option<Hmac<Sha256>> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).ok()?;
    for part in parts {
        mac.update(part);
    }
    Some(mac)
}

fn digest(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    mac_over(key, parts)
        .map(|mac| mac.finalize().into_bytes().to_vec())
        .unwrap_or_default()
}

fn verifies(key: &[u8], parts: &[&[u8]], signature: &[u8]) -> bool {
    mac_over(key, parts).is_some_and(|mac| mac.verify_slice(signature).is_ok())
}

/// `v1,BASE64` of HMAC-SHA256 over `ID.TIMESTAMP.BODY`: Standard Webhooks' `webhook-signature`.
pub fn standard(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    let signed = format!("{id}.{timestamp}.");
    format!(
        "v1,{}",
        BASE64.encode(digest(key, &[signed.as_bytes(), body]))
    )
}

/// `sha256=HEX` of HMAC-SHA256 over `TIMESTAMP.BODY`: Elfgate's own outbound header, kept for
/// receivers written against it.
pub fn elfgate_timestamped(key: &[u8], timestamp: i64, body: &[u8]) -> String {
    let signed = format!("{timestamp}.");
    format!(
        "sha256={}",
        hex::encode(digest(key, &[signed.as_bytes(), body]))
    )
}

/// Whether one of the space-separated signatures of a `webhook-signature` header is `v1,` and
/// the HMAC of `ID.TIMESTAMP.BODY` under `key` (compared in constant time).
pub fn verify_standard(key: &[u8], id: &str, timestamp: i64, body: &[u8], header: &str) -> bool {
    let signed = format!("{id}.{timestamp}.");
    standard_signatures(header).any(|sig| verifies(key, &[signed.as_bytes(), body], &sig))
}

/// The decoded `v1` signatures of a `webhook-signature` header (others, of schemes this daemon
/// does not know, are skipped as the scheme says).
pub fn standard_signatures(header: &str) -> impl Iterator<Item = Vec<u8>> + '_ {
    header
        .split(' ')
        .filter_map(|s| s.strip_prefix("v1,"))
        .filter_map(|b64| BASE64.decode(b64).ok())
}

/// Whether `sha256=HEX` is the HMAC of the body alone under `key` (compared in constant time).
pub fn verify_body_only(key: &[u8], body: &[u8], header: &str) -> bool {
    body_only_signature(header).is_some_and(|sig| verifies(key, &[body], &sig))
}

/// The bytes of a `sha256=HEX` header.
pub fn body_only_signature(header: &str) -> Option<Vec<u8>> {
    hex::decode(header.trim().strip_prefix("sha256=")?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of Standard Webhooks' specification (its reference libraries' test vector).
    #[test]
    fn the_specifications_example_verifies() {
        let key = key_of("S", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = br#"{"test": 2432232314}"#;
        let sig = standard(&key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body);
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        assert!(verify_standard(
            &key,
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            body,
            &format!("v1a,xyz {sig}")
        ));
        assert!(!verify_standard(&key, "msg_other", 1614265330, body, &sig));
    }

    #[test]
    fn blank_and_malformed_secrets_cannot_sign() {
        assert!(matches!(key_of("S", " "), Err(SecretError::Blank(_))));
        assert!(matches!(
            key_of("S", "whsec_not base64!"),
            Err(SecretError::NotBase64 { .. })
        ));
        assert_eq!(key_of("S", "plain").unwrap(), b"plain");
    }
}
