//! `[auth]`: principals beyond the daemon's root token (see docs/security.md, "Principals and
//! keys").

use elfgate_core::Visibility;
use serde::Deserialize;

/// `[auth]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// The visibility of a session created without a `visibility` field.
    #[serde(default)]
    pub default_visibility: Visibility,
    /// `[auth.jwt]`: single sign-on, off when absent.
    #[serde(default)]
    pub jwt: Option<super::JwtConfig>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            default_visibility: Visibility::Team,
            jwt: None,
        }
    }
}
