//! MCP server settings: one server's keys (`[mcp.servers.NAME]` in the configuration, and the same
//! keys in a session's `mcpConfig`), and a session's `mcpConfig` merged over the daemon's set.
//! See docs/mcp.md.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// Seconds a server gets to start and answer `initialize` and `tools/list` when unset.
pub const DEFAULT_STARTUP_TIMEOUT_SECS: f64 = 30.0;
/// Seconds one tool call may take when unset.
pub const DEFAULT_CALL_TIMEOUT_SECS: f64 = 120.0;

/// One MCP server: a command (stdio) or a URL (streamable HTTP).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// Program started for a stdio server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Variables it gets on top of the clean child environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Its working directory (default: the daemon's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Endpoint of a streamable HTTP server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Headers sent with every HTTP request.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// false: configured but never started.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Seconds to start and answer initialize and tools/list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_timeout_secs: Option<f64>,
    /// Seconds one tool call may take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_timeout_secs: Option<f64>,
    /// Tier by tool name (the server's name for it, without the `mcp__` prefix): read_only,
    /// confirm_once, always_confirm, manual_only.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tool_tiers: BTreeMap<String, String>,
}

fn yes() -> bool {
    true
}

impl Default for McpServerConfig {
    fn default() -> Self {
        McpServerConfig {
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
            url: None,
            headers: BTreeMap::new(),
            enabled: true,
            startup_timeout_secs: None,
            call_timeout_secs: None,
            tool_tiers: BTreeMap::new(),
        }
    }
}

/// How a server is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum McpTransport {
    /// A child process speaking JSON-RPC on its stdin and stdout.
    Stdio,
    /// Streamable HTTP.
    StreamableHttp,
}

impl McpServerConfig {
    /// Which transport the keys select; None when neither or both of `command` and `url` are set.
    pub fn transport(&self) -> Option<McpTransport> {
        match (&self.command, &self.url) {
            (Some(_), None) => Some(McpTransport::Stdio),
            (None, Some(_)) => Some(McpTransport::StreamableHttp),
            _ => None,
        }
    }

    /// What is wrong with these keys, if anything (the message names the key under `prefix`).
    pub fn problem(&self, prefix: &str) -> Option<String> {
        match (&self.command, &self.url) {
            (None, None) => return Some(format!("{prefix}: set either command or url")),
            (Some(_), Some(_)) => {
                return Some(format!("{prefix}: set command or url, not both"));
            }
            (Some(c), None) if c.trim().is_empty() => {
                return Some(format!("{prefix}.command must not be empty"));
            }
            (None, Some(u)) if !(u.starts_with("http://") || u.starts_with("https://")) => {
                return Some(format!(
                    "{prefix}.url '{u}' must start with http:// or https://"
                ));
            }
            _ => {}
        }
        for (key, v) in [
            ("startup_timeout_secs", self.startup_timeout_secs),
            ("call_timeout_secs", self.call_timeout_secs),
        ] {
            if let Some(v) = v
                && !(v.is_finite() && v > 0.0)
            {
                return Some(format!("{prefix}.{key} must be a positive number"));
            }
        }
        for (tool, tier) in &self.tool_tiers {
            if !["read_only", "confirm_once", "always_confirm", "manual_only"]
                .contains(&tier.as_str())
            {
                return Some(format!(
                    "{prefix}.tool_tiers.{tool}: unknown tier '{tier}' (read_only, confirm_once, \
                     always_confirm, manual_only)"
                ));
            }
        }
        None
    }

    /// The keys that decide what connection the server gets: two servers with equal keys share
    /// one. Timeouts of calls and tiers are applied per call, so they are not part of it.
    pub fn connection_key(&self, name: &str) -> String {
        let conn = McpServerConfig {
            call_timeout_secs: None,
            tool_tiers: BTreeMap::new(),
            enabled: true,
            ..self.clone()
        };
        format!(
            "{name}\u{0}{}",
            serde_json::to_string(&conn).unwrap_or_default()
        )
    }
}

/// `[mcp]`: the daemon's MCP servers.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpSection {
    /// Seconds a server nobody uses keeps running before it is shut down.
    #[serde(default = "default_idle")]
    pub idle_shutdown_secs: f64,
    /// `[mcp.servers.NAME]`.
    #[serde(default)]
    pub servers: BTreeMap<String, McpServerConfig>,
}

fn default_idle() -> f64 {
    30.0
}

impl Default for McpSection {
    fn default() -> Self {
        McpSection {
            idle_shutdown_secs: default_idle(),
            servers: BTreeMap::new(),
        }
    }
}

/// A server name usable in a tool name (`mcp__<server>__<tool>`).
pub fn valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && !name.contains("__")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

impl McpSection {
    /// What is wrong with the section, if anything.
    pub fn problem(&self) -> Option<String> {
        if !(self.idle_shutdown_secs.is_finite() && self.idle_shutdown_secs >= 0.0) {
            return Some("mcp.idle_shutdown_secs must be zero or more".into());
        }
        self.servers.iter().find_map(|(name, s)| {
            if !valid_server_name(name) {
                return Some(format!(
                    "mcp.servers.{name}: a server name is 1 to 32 letters, digits, '-' or '_' \
                     (no '__')"
                ));
            }
            s.problem(&format!("mcp.servers.{name}"))
        })
    }
}

/// A session's `mcpConfig`: servers of its own (over the daemon's of the same name) and daemon
/// servers it does without.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct McpSessionConfig {
    /// Servers by name, with the keys of `[mcp.servers.NAME]`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub servers: BTreeMap<String, McpServerConfig>,
    /// Names of daemon servers this session does not use.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disable: Vec<String>,
}

/// Why an `mcpConfig` object was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct McpConfigError(pub String);

impl McpSessionConfig {
    /// Parses and checks an `mcpConfig` object; the error names the field.
    pub fn from_json(value: &Value) -> Result<Self, McpConfigError> {
        if !value.is_object() {
            return Err(McpConfigError("mcpConfig must be a JSON object".into()));
        }
        let cfg: McpSessionConfig = serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            let at = if path.is_empty() || path == "." {
                String::new()
            } else {
                format!(".{path}")
            };
            McpConfigError(format!("mcpConfig{at}: {}", e.inner()))
        })?;
        match cfg.problem("mcpConfig") {
            Some(p) => Err(McpConfigError(p)),
            None => Ok(cfg),
        }
    }

    /// What is wrong with these servers, if anything, named under `prefix`.
    pub fn problem(&self, prefix: &str) -> Option<String> {
        self.servers.iter().find_map(|(name, s)| {
            if !valid_server_name(name) {
                return Some(format!(
                    "{prefix}.servers.{name}: a server name is 1 to 32 letters, digits, '-' or \
                     '_' (no '__')"
                ));
            }
            s.problem(&format!("{prefix}.servers.{name}"))
        })
    }

    /// The servers a session uses: the daemon's, without the disabled ones, with the session's
    /// over them by name; servers with `enabled = false` are kept (they are listed as disabled).
    pub fn merged(
        session: Option<&McpSessionConfig>,
        global: &BTreeMap<String, McpServerConfig>,
    ) -> BTreeMap<String, McpServerConfig> {
        let mut out = global.clone();
        if let Some(s) = session {
            for name in &s.disable {
                out.remove(name);
            }
            for (name, server) in &s.servers {
                out.insert(name.clone(), server.clone());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_malformed_session_config_names_the_field() {
        let e = McpSessionConfig::from_json(&json!({"servers": {"x": {"command": 3}}}))
            .unwrap_err()
            .0;
        assert!(
            e.starts_with("mcpConfig.servers.x.command: invalid type"),
            "{e}"
        );
        let e = McpSessionConfig::from_json(&json!({"servers": {"x": {"args": []}}}))
            .unwrap_err()
            .0;
        assert_eq!(e, "mcpConfig.servers.x: set either command or url");
        let e = McpSessionConfig::from_json(&json!({"disable": "a"}))
            .unwrap_err()
            .0;
        assert!(e.starts_with("mcpConfig.disable: invalid type"), "{e}");
        let e = McpSessionConfig::from_json(&json!({"server": {}}))
            .unwrap_err()
            .0;
        assert!(e.starts_with("mcpConfig.server: unknown field"), "{e}");
    }

    #[test]
    fn a_session_replaces_and_disables_daemon_servers() {
        let global: BTreeMap<String, McpServerConfig> =
            [("a", "cmd-a"), ("b", "cmd-b"), ("c", "cmd-c")]
                .into_iter()
                .map(|(n, c)| {
                    (
                        n.to_string(),
                        McpServerConfig {
                            command: Some(c.into()),
                            enabled: true,
                            ..Default::default()
                        },
                    )
                })
                .collect();
        let session = McpSessionConfig::from_json(
            &json!({"servers": {"b": {"url": "http://x/mcp"}, "d": {"command": "d"}},
                    "disable": ["a"]}),
        )
        .unwrap();
        let m = McpSessionConfig::merged(Some(&session), &global);
        assert_eq!(m.keys().collect::<Vec<_>>(), ["b", "c", "d"]);
        assert_eq!(m["b"].transport(), Some(McpTransport::StreamableHttp));
        assert!(m["d"].enabled);
    }

    #[test]
    fn call_settings_do_not_change_the_connection() {
        let a = McpServerConfig {
            command: Some("x".into()),
            ..Default::default()
        };
        let b = McpServerConfig {
            call_timeout_secs: Some(3.0),
            tool_tiers: [("t".to_string(), "read_only".to_string())].into(),
            ..a.clone()
        };
        assert_eq!(a.connection_key("s"), b.connection_key("s"));
        let c = McpServerConfig {
            args: vec!["y".into()],
            ..a.clone()
        };
        assert_ne!(a.connection_key("s"), c.connection_key("s"));
        assert_ne!(a.connection_key("s"), a.connection_key("t"));
    }
}
