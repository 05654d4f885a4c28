//! Single sign-on (`[auth.jwt]`): a JWT from the operator's identity provider, sent as a bearer
//! beside API keys, checked against the provider's JWKS (signature with the key its `kid`
//! names, in an algorithm that key allows; `exp`, `nbf`, `iss`, `aud`) and mapped to a
//! [`Principal`] by its claims. Every refusal is one 401 to the client, the same as a bad key's;
//! the reason goes to the log only.
//!
//! The JWKS is read at start (a file) or at the first token (a URL, through the outbound guard),
//! again by the first token after `jwks_refresh_secs` (in the background: that token is checked
//! with the keys at hand), and again when a token names a key the set does not hold, at most
//! once in `jwks_min_refetch_secs` (the provider rotated its keys).

mod claims;
pub mod keyset;
mod source;

use crate::config::JwtConfig;
use elfgate_core::Principal;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Validation, decode, decode_header};
use keyset::KeySet;
use serde_json::{Map, Value};
use source::JwksSource;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

/// Why a JWT was refused (for the log; the client sees the same 401 for each).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwtRefused {
    /// Not three base64url parts with a JSON header and payload.
    #[error("malformed")]
    Malformed,
    /// The JWKS holds no key of the token's `kid`.
    #[error("signed by a key the JWKS does not hold")]
    UnknownKey,
    /// The header's `alg` is not one its key allows.
    #[error("an algorithm its key does not allow")]
    WrongAlgorithm,
    /// The signature does not verify.
    #[error("bad signature")]
    BadSignature,
    /// Past its `exp`.
    #[error("expired")]
    Expired,
    /// Before its `nbf`.
    #[error("not valid yet")]
    NotYetValid,
    /// Another `iss`.
    #[error("another issuer")]
    WrongIssuer,
    /// No `aud` of ours.
    #[error("another audience")]
    WrongAudience,
    /// A claim it must carry is missing.
    #[error("no {0} claim")]
    MissingClaim(String),
    /// The role claim names no role.
    #[error("the role claim names no role")]
    UnknownRole,
    /// Neither the team claim nor a mapped group gives a team.
    #[error("no team (team claim or mapped group)")]
    NoTeam,
    /// Neither the role claim nor a mapped group gives a role.
    #[error("no role (role claim or mapped group)")]
    NoRole,
    /// The user claim names the root key's user.
    #[error("the user is the root key's")]
    ReservedUser,
}

impl JwtRefused {
    /// The reason as the access audit records it.
    pub fn code(&self) -> &'static str {
        match self {
            JwtRefused::Malformed => "jwt_malformed",
            JwtRefused::UnknownKey => "jwt_unknown_key",
            JwtRefused::WrongAlgorithm => "jwt_wrong_algorithm",
            JwtRefused::BadSignature => "jwt_bad_signature",
            JwtRefused::Expired => "jwt_expired",
            JwtRefused::NotYetValid => "jwt_not_yet_valid",
            JwtRefused::WrongIssuer => "jwt_wrong_issuer",
            JwtRefused::WrongAudience => "jwt_wrong_audience",
            JwtRefused::MissingClaim(_) => "jwt_missing_claim",
            JwtRefused::UnknownRole => "jwt_unknown_role",
            JwtRefused::NoTeam => "jwt_no_team",
            JwtRefused::NoRole => "jwt_no_role",
            JwtRefused::ReservedUser => "jwt_reserved_user",
        }
    }
}

/// Checks JWT bearers (see the module's comment).
pub struct JwtVerifier {
    config: JwtConfig,
    source: JwksSource,
    /// The keys at hand.
    keys: RwLock<Arc<KeySet>>,
    /// When the keys at hand were read.
    read_at: Mutex<Option<Instant>>,
    /// When a read was last tried, read or not (bounds how often made-up `kid`s send the daemon
    /// to the provider).
    tried_at: Mutex<Option<Instant>>,
    /// One read at a time; the others wait for it and use what it read.
    reading: tokio::sync::Mutex<()>,
    /// Issuer, audience, leeway: the part of every token's check that does not depend on its
    /// key.
    validation: Validation,
}

impl JwtVerifier {
    /// A verifier for `config` (checked at load). A JWKS file is read now; a URL at the first
    /// token.
    pub fn new(config: JwtConfig) -> Arc<Self> {
        let source = JwksSource::new(&config);
        let mut validation = Validation::new(jsonwebtoken::Algorithm::RS256);
        validation.set_issuer(&[&config.issuer]);
        validation.set_audience(&[&config.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.validate_nbf = true;
        validation.leeway = config.leeway_secs;
        let (keys, read_at) = match source.read_now() {
            Some(Ok(keys)) => (keys, Some(Instant::now())),
            Some(Err(e)) => {
                tracing::warn!(error = %e, "auth.jwt: cannot read the JWKS: JWTs are refused");
                (KeySet::empty(), None)
            }
            None => (KeySet::empty(), None),
        };
        Arc::new(JwtVerifier {
            tried_at: Mutex::new(read_at),
            config,
            source,
            keys: RwLock::new(Arc::new(keys)),
            read_at: Mutex::new(read_at),
            reading: tokio::sync::Mutex::new(()),
            validation,
        })
    }

    /// Whether `token` has a JWT's shape (three dot-separated parts), so that it is one to check
    /// here rather than a key.
    pub fn looks_like_jwt(token: &str) -> bool {
        token.split('.').count() == 3 && !token.contains(char::is_whitespace)
    }

    /// The principal `token` names, or why it is refused.
    pub async fn principal(self: &Arc<Self>, token: &str) -> Result<Principal, JwtRefused> {
        let header = decode_header(token).map_err(|_| JwtRefused::Malformed)?;
        let kid = header.kid.as_deref();
        if self.keys().is_empty() {
            self.read_if_allowed().await;
        } else if self.is_stale() {
            let me = Arc::clone(self);
            tokio::spawn(async move { me.read_if_allowed().await });
        }
        let mut keys = self.keys();
        if keys.find(kid).is_none() {
            self.read_if_allowed().await;
            keys = self.keys();
        }
        let key = keys.find(kid).ok_or(JwtRefused::UnknownKey)?;
        if !key.algorithms.contains(&header.alg) {
            return Err(JwtRefused::WrongAlgorithm);
        }
        let mut validation = self.validation.clone();
        validation.algorithms = vec![header.alg];
        let data = decode::<Map<String, Value>>(token, &key.key, &validation)
            .map_err(|e| refusal(e.kind()))?;
        claims::principal(&self.config, &data.claims)
    }

    fn keys(&self) -> Arc<KeySet> {
        Arc::clone(&self.keys.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Whether the keys at hand are older than `jwks_refresh_secs` and a read may be tried (so
    /// that a provider that stays down does not get a read started by every token).
    fn is_stale(&self) -> bool {
        let since = |at: &Mutex<Option<Instant>>, secs: u64| {
            at.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_none_or(|t| t.elapsed() >= Duration::from_secs(secs))
        };
        since(&self.read_at, self.config.jwks_refresh_secs)
            && since(&self.tried_at, self.config.jwks_min_refetch_secs)
    }

    /// Reads the JWKS again unless a read was tried less than `jwks_min_refetch_secs` ago; a
    /// failed read keeps the keys at hand.
    async fn read_if_allowed(&self) {
        let _one_at_a_time = self.reading.lock().await;
        let min = Duration::from_secs(self.config.jwks_min_refetch_secs);
        {
            let mut tried = self.tried_at.lock().unwrap_or_else(PoisonError::into_inner);
            if tried.is_some_and(|t| t.elapsed() < min) {
                return;
            }
            *tried = Some(Instant::now());
        }
        match self.source.read().await {
            Ok(keys) => {
                tracing::info!(keys = keys.len(), "auth.jwt: JWKS read");
                *self.keys.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(keys);
                *self.read_at.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
            }
            Err(e) => tracing::warn!(error = %e, "auth.jwt: cannot read the JWKS"),
        }
    }
}

/// The decoder's error as a refusal.
fn refusal(kind: &ErrorKind) -> JwtRefused {
    match kind {
        ErrorKind::InvalidSignature => JwtRefused::BadSignature,
        ErrorKind::ExpiredSignature => JwtRefused::Expired,
        ErrorKind::ImmatureSignature => JwtRefused::NotYetValid,
        ErrorKind::InvalidIssuer => JwtRefused::WrongIssuer,
        ErrorKind::InvalidAudience => JwtRefused::WrongAudience,
        ErrorKind::InvalidAlgorithm | ErrorKind::MissingAlgorithm => JwtRefused::WrongAlgorithm,
        ErrorKind::MissingRequiredClaim(c) => JwtRefused::MissingClaim(c.clone()),
        _ => JwtRefused::Malformed,
    }
}
