//! `[auth]`: principals beyond the daemon's root token (see docs/security.md, "Principals and
//! keys").

use super::ConfigError;
use elfgate_core::Visibility;
use serde::Deserialize;

/// The longest a node may keep an API key it read from the store: a key revoked or changed on
/// another node stops working here within this long even when the fleet's bus is away.
pub const MAX_KEY_CACHE_MS: u64 = 2_000;

/// `[auth]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// The visibility of a session created without a `visibility` field.
    #[serde(default)]
    pub default_visibility: Visibility,
    /// How long (milliseconds) a node keeps an API key it read from the store before reading it
    /// again; at most [`MAX_KEY_CACHE_MS`], 0 reads it for every request.
    #[serde(default = "default_key_cache_ms")]
    pub key_cache_ms: u64,
}

fn default_key_cache_ms() -> u64 {
    1_000
}

impl AuthConfig {
    /// The key cache's lifetime bounds how long a revoked key keeps working on another node.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if self.key_cache_ms > MAX_KEY_CACHE_MS {
            return Err(ConfigError::Invalid(format!(
                "auth.key_cache_ms is {}; at most {MAX_KEY_CACHE_MS} (a revoked key must stop \
                 working on every node within 2 s)",
                self.key_cache_ms
            )));
        }
        Ok(())
    }
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            default_visibility: Visibility::Team,
            key_cache_ms: default_key_cache_ms(),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::tests::try_load;

    #[test]
    fn a_key_cache_longer_than_two_seconds_is_refused_by_name() {
        let loaded = try_load("[auth]\nkey_cache_ms = 500\n").unwrap();
        assert_eq!(loaded.auth.key_cache_ms, 500);
        assert_eq!(try_load("").unwrap().auth.key_cache_ms, 1_000);
        let refused = try_load("[auth]\nkey_cache_ms = 2001\n").unwrap_err();
        assert!(
            refused.to_string().contains("auth.key_cache_ms"),
            "{refused}"
        );
    }
}
