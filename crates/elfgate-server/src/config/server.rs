//! `[server]`: where the daemon listens, who may call it, and the sizes and times of a request.

use super::ConfigError;
use serde::Deserialize;
use std::net::SocketAddr;

/// `[server]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Listen address.
    pub bind: String,
    /// Largest request body, in bytes.
    pub body_limit_bytes: usize,
    /// Largest attachment of a prompt, in bytes (decoded base64, or inline text).
    #[serde(default = "default_attachment_max_bytes")]
    pub attachment_max_bytes: usize,
    /// Seconds between SSE keep-alive comments.
    pub keepalive_secs: u64,
    /// Seconds to wait for runs and the log on shutdown.
    pub shutdown_grace_secs: u64,
    /// Whether requests need the bearer token.
    #[serde(default)]
    pub auth: AuthMode,
    /// Origins (scheme://host[:port]) whose web pages may call the API, with CORS answers.
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    /// Host header names accepted besides loopback names and the bound address.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Seconds a client has to send a whole request header.
    pub header_read_timeout_secs: u64,
    /// Client connections open at once. Unset: as many as the open-file limit leaves room for.
    #[serde(default)]
    pub max_connections: Option<usize>,
    /// Prompts sent with onBusy=enqueue that may wait behind a session's run; past it, 429.
    pub max_queued_prompts_per_session: usize,
}

/// `[server] auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// Every route but /healthz and /readyz needs `Authorization: Bearer <token>`; the token is
    /// ELFGATE_TOKEN, or else the one generated into the data directory at first start.
    #[default]
    Token,
    /// No token (loopback only; the daemon warns at every start).
    None,
}

fn default_attachment_max_bytes() -> usize {
    10 * 1024 * 1024
}

impl ServerConfig {
    /// The listen address.
    pub fn bind_addr(&self) -> Result<SocketAddr, ConfigError> {
        self.bind
            .parse()
            .map_err(|e| ConfigError::Invalid(format!("server.bind '{}': {e}", self.bind)))
    }

    /// The address, the token requirement and the allowed origins fit together.
    pub(super) fn check_listener(&self) -> Result<(), ConfigError> {
        let addr = self.bind_addr()?;
        if !addr.ip().is_loopback() && self.auth == AuthMode::None {
            return Err(ConfigError::Invalid(format!(
                "server.auth = \"none\" is only allowed on a loopback address, not on {addr}"
            )));
        }
        for origin in &self.allowed_origins {
            crate::origin::parse_origin(origin).map_err(|e| {
                ConfigError::Invalid(format!("server.allowed_origins '{origin}': {e}"))
            })?;
        }
        Ok(())
    }

    /// The size limits of a request are positive.
    pub(super) fn check_sizes(&self) -> Result<(), ConfigError> {
        if self.attachment_max_bytes == 0 {
            return Err(ConfigError::Invalid(
                "server.attachment_max_bytes must be positive".into(),
            ));
        }
        if self.body_limit_bytes == 0 {
            return Err(ConfigError::Invalid(
                "server.body_limit_bytes must be positive".into(),
            ));
        }
        Ok(())
    }

    /// The connection limits are positive.
    pub(super) fn check_connections(&self) -> Result<(), ConfigError> {
        if self.header_read_timeout_secs == 0 {
            return Err(ConfigError::Invalid(
                "server.header_read_timeout_secs must be positive".into(),
            ));
        }
        if self.max_connections == Some(0) {
            return Err(ConfigError::Invalid(
                "server.max_connections must be positive".into(),
            ));
        }
        Ok(())
    }
}
