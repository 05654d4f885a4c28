//! `[auth.jwt]`: single sign-on. A JWT bearer from the operator's identity provider is accepted
//! beside API keys, checked against the provider's JWKS (see docs/security.md, "Single sign-on").

use super::ConfigError;
use elfgate_core::PrincipalRole;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// `[auth.jwt]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JwtConfig {
    /// The `iss` a token must carry.
    pub issuer: String,
    /// A value the token's `aud` must hold.
    pub audience: String,
    /// The JWKS as a file (one of `jwks_file`, `jwks_url`).
    #[serde(default)]
    pub jwks_file: Option<PathBuf>,
    /// The JWKS at an http(s) URL, fetched through the outbound guard.
    #[serde(default)]
    pub jwks_url: Option<String>,
    /// Whether `jwks_url` may resolve to a loopback, private or link-local address.
    #[serde(default)]
    pub allow_private_addresses: bool,
    /// Seconds after which the JWKS is read again (the provider's key rotation).
    #[serde(default = "default_refresh_secs")]
    pub jwks_refresh_secs: u64,
    /// A token signed by a key the JWKS does not hold makes it read again, at most once in this
    /// many seconds (so that made-up key ids cannot make the daemon hammer the provider).
    #[serde(default = "default_min_refetch_secs")]
    pub jwks_min_refetch_secs: u64,
    /// Seconds of clock difference allowed on `exp` and `nbf`.
    #[serde(default = "default_leeway_secs")]
    pub leeway_secs: u64,
    /// The claim whose string is the user's name.
    #[serde(default = "default_user_claim")]
    pub user_claim: String,
    /// A claim whose string is the user's team (it wins over `groups`).
    #[serde(default)]
    pub team_claim: Option<String>,
    /// A claim whose string is the user's role, `admin`, `member` or `viewer` (it wins over
    /// `groups`).
    #[serde(default)]
    pub role_claim: Option<String>,
    /// The claim holding the user's groups (a list of strings, or one string).
    #[serde(default = "default_groups_claim")]
    pub groups_claim: String,
    /// `[auth.jwt.groups]`: what a group of the token makes its holder. Of the token's groups
    /// named here, the one with the highest role gives the team and role.
    #[serde(default)]
    pub groups: BTreeMap<String, GroupGrant>,
}

/// What a group of the identity provider maps to.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupGrant {
    /// The team.
    pub team: String,
    /// The role.
    pub role: PrincipalRole,
}

fn default_refresh_secs() -> u64 {
    3600
}
fn default_min_refetch_secs() -> u64 {
    60
}
fn default_leeway_secs() -> u64 {
    60
}
fn default_user_claim() -> String {
    "sub".into()
}
fn default_groups_claim() -> String {
    "groups".into()
}

/// The most a JWKS may weigh, read from a file or a URL.
pub const MAX_JWKS_BYTES: usize = 1 << 20;

impl JwtConfig {
    /// The values' checks, each refusal naming its key. A JWKS file is read and must hold a
    /// key a token can be checked with; a URL is only parsed (the provider may be down at start:
    /// tokens are refused until it answers).
    pub fn check(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, why: &str| Err(ConfigError::Invalid(format!("auth.jwt.{key} {why}")));
        for (key, value) in [
            ("issuer", &self.issuer),
            ("audience", &self.audience),
            ("user_claim", &self.user_claim),
            ("groups_claim", &self.groups_claim),
        ] {
            if value.trim().is_empty() {
                return bad(key, "must not be empty");
            }
        }
        for (key, value) in [
            ("team_claim", &self.team_claim),
            ("role_claim", &self.role_claim),
        ] {
            if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
                return bad(key, "must not be empty (leave it out instead)");
            }
        }
        for (group, grant) in &self.groups {
            if grant.team.trim().is_empty() {
                return bad(&format!("groups.{group}.team"), "must not be empty");
            }
        }
        if self.jwks_min_refetch_secs == 0 {
            return bad("jwks_min_refetch_secs", "must be at least 1");
        }
        if self.jwks_refresh_secs < self.jwks_min_refetch_secs {
            return bad(
                "jwks_refresh_secs",
                "must be at least jwks_min_refetch_secs",
            );
        }
        match (&self.jwks_file, &self.jwks_url) {
            (Some(_), Some(_)) => bad("jwks_file", "and auth.jwt.jwks_url: set only one"),
            (None, None) => bad("jwks_file", "or auth.jwt.jwks_url must be set"),
            (Some(path), None) => {
                let text = std::fs::read(path).map_err(|e| {
                    ConfigError::Invalid(format!(
                        "auth.jwt.jwks_file: cannot read {}: {e}",
                        path.display()
                    ))
                })?;
                crate::jwt::keyset::KeySet::parse(&text)
                    .map(drop)
                    .map_err(|e| {
                        ConfigError::Invalid(format!("auth.jwt.jwks_file {}: {e}", path.display()))
                    })
            }
            (None, Some(url)) => match reqwest::Url::parse(url) {
                Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => Ok(()),
                Ok(_) => bad("jwks_url", "must be an http(s) URL with a host"),
                Err(e) => bad("jwks_url", &format!("is not a URL: {e}")),
            },
        }
    }
}
