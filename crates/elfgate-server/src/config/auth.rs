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
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            default_visibility: Visibility::Team,
        }
    }
}
