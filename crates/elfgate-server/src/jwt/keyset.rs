//! A JWKS's public keys, each with the algorithms a token signed by it may name: the key's own
//! `alg` when it has one, else those of its type (RSA: RS*/PS*; EC: by its curve; OKP: EdDSA).
//! Symmetric keys (`kty: oct`) are never used: with HMAC, whoever can read the public key set
//! could sign; `none` is no algorithm at all to the decoder.

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::Value;

/// A key a token can be checked with.
pub struct VerifyingKey {
    /// The key's `kid`.
    pub kid: Option<String>,
    /// The public key.
    pub key: DecodingKey,
    /// The algorithms a token's header may name for this key.
    pub algorithms: Vec<Algorithm>,
}

/// The usable keys of a JWKS.
pub struct KeySet {
    keys: Vec<VerifyingKey>,
}

/// Why a JWKS cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeySetError {
    /// Not JSON, or no `keys` list.
    #[error("is not a JWKS (a JSON object with a \"keys\" list): {0}")]
    NotJwks(String),
    /// Not one key a token could be checked with.
    #[error("holds no public signing key (RSA, EC P-256/P-384 or Ed25519){0}")]
    NoUsableKey(String),
}

impl std::fmt::Debug for KeySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.keys.iter().map(|k| (&k.kid, &k.algorithms)))
            .finish()
    }
}

impl KeySet {
    /// The usable keys of the JWKS in `bytes`; the others (symmetric, encryption-only, of an
    /// unknown type) are left out. Refused when none is left.
    pub fn parse(bytes: &[u8]) -> Result<KeySet, KeySetError> {
        let doc: Value =
            serde_json::from_slice(bytes).map_err(|e| KeySetError::NotJwks(e.to_string()))?;
        let Some(entries) = doc.get("keys").and_then(Value::as_array) else {
            return Err(KeySetError::NotJwks("no \"keys\" list".into()));
        };
        let mut skipped = Vec::new();
        let mut keys = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            let name = entry
                .get("kid")
                .and_then(Value::as_str)
                .map_or_else(|| format!("#{i}"), str::to_string);
            match usable(entry) {
                Ok(key) => keys.push(key),
                Err(why) => skipped.push(format!("{name}: {why}")),
            }
        }
        if keys.is_empty() {
            let detail = if skipped.is_empty() {
                String::new()
            } else {
                format!(" ({})", skipped.join("; "))
            };
            return Err(KeySetError::NoUsableKey(detail));
        }
        if !skipped.is_empty() {
            tracing::debug!(skipped = %skipped.join("; "), "JWKS keys left out");
        }
        Ok(KeySet { keys })
    }

    /// The key for a token whose header names `kid`; a token without one only when the set has
    /// a single key (there is then no doubt which).
    pub fn find(&self, kid: Option<&str>) -> Option<&VerifyingKey> {
        match kid {
            Some(kid) => self.keys.iter().find(|k| k.kid.as_deref() == Some(kid)),
            None if self.keys.len() == 1 => self.keys.first(),
            None => None,
        }
    }

    /// How many keys the set holds.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether it holds none (the set before the first read of a URL).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// No key: what a verifier holds until its JWKS URL first answers.
    pub fn empty() -> KeySet {
        KeySet { keys: Vec::new() }
    }
}

/// `entry` as a key tokens can be checked with, or why not.
fn usable(entry: &Value) -> Result<VerifyingKey, String> {
    let jwk: Jwk = serde_json::from_value(entry.clone()).map_err(|e| e.to_string())?;
    if matches!(jwk.common.public_key_use, Some(ref u) if *u != PublicKeyUse::Signature) {
        return Err("not a signing key (use is not \"sig\")".into());
    }
    let of_type: &[Algorithm] = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => &[
            Algorithm::RS256,
            Algorithm::RS384,
            Algorithm::RS512,
            Algorithm::PS256,
            Algorithm::PS384,
            Algorithm::PS512,
        ],
        AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
            EllipticCurve::P256 => &[Algorithm::ES256],
            EllipticCurve::P384 => &[Algorithm::ES384],
            _ => return Err("an unsupported curve".into()),
        },
        AlgorithmParameters::OctetKeyPair(okp) if okp.curve == EllipticCurve::Ed25519 => {
            &[Algorithm::EdDSA]
        }
        AlgorithmParameters::OctetKeyPair(_) => return Err("an unsupported curve".into()),
        AlgorithmParameters::OctetKey(_) => {
            return Err("a symmetric key (kty oct) cannot be a public key".into());
        }
        _ => return Err("an unsupported key type".into()),
    };
    let algorithms = match jwk.common.key_algorithm {
        None => of_type.to_vec(),
        Some(alg) => match Algorithm::try_from(alg) {
            Ok(alg) if of_type.contains(&alg) => vec![alg],
            _ => return Err(format!("alg {alg} does not fit the key's type")),
        },
    };
    let key = DecodingKey::from_jwk(&jwk).map_err(|e| e.to_string())?;
    Ok(VerifyingKey {
        kid: jwk.common.key_id,
        key,
        algorithms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const RSA_N: &str = "sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw";

    #[test]
    fn keeps_public_signing_keys_and_leaves_out_the_rest() {
        let jwks = serde_json::json!({"keys": [
            {"kty": "RSA", "kid": "r1", "n": RSA_N, "e": "AQAB"},
            {"kty": "RSA", "kid": "r2", "alg": "RS256", "n": RSA_N, "e": "AQAB"},
            {"kty": "oct", "kid": "h1", "k": "c2VjcmV0"},
            {"kty": "RSA", "kid": "enc", "use": "enc", "n": RSA_N, "e": "AQAB"},
            {"kty": "RSA", "kid": "bad-alg", "alg": "HS256", "n": RSA_N, "e": "AQAB"},
        ]});
        let set = KeySet::parse(jwks.to_string().as_bytes()).unwrap();
        assert_eq!(set.len(), 2);
        assert!(set.find(Some("r1")).unwrap().algorithms.len() == 6);
        assert_eq!(set.find(Some("r2")).unwrap().algorithms, [Algorithm::RS256]);
        for gone in ["h1", "enc", "bad-alg", "nope"] {
            assert!(set.find(Some(gone)).is_none(), "{gone}");
        }
        // Two keys: a token without a kid matches neither.
        assert!(set.find(None).is_none());
    }

    #[test]
    fn refuses_a_set_without_a_usable_key() {
        let only_hmac = r#"{"keys": [{"kty": "oct", "kid": "h1", "k": "c2VjcmV0"}]}"#;
        let e = KeySet::parse(only_hmac.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("h1: a symmetric key"), "{e}");
        for not_jwks in ["", "[]", "{\"keys\": 3}"] {
            assert!(matches!(
                KeySet::parse(not_jwks.as_bytes()),
                Err(KeySetError::NotJwks(_))
            ));
        }
    }

    #[test]
    fn a_single_key_serves_a_token_without_kid() {
        let one = serde_json::json!({"keys": [{"kty": "RSA", "n": RSA_N, "e": "AQAB"}]});
        let set = KeySet::parse(one.to_string().as_bytes()).unwrap();
        assert!(set.find(None).is_some());
        assert!(set.find(Some("x")).is_none());
    }
}
