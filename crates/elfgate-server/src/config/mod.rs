//! Configuration: the built-in config/default.toml, an optional file over it, environment
//! variables over both. See config/default.toml for every key.
//!
//! One file per section (or group of related sections): its types and the checks of its values.
//! This file holds the whole [`Config`], its loading, and the order in which the checks run.

use figment::Figment;
use figment::providers::{Env, Format, Toml};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

mod auth;
mod budgets;
mod cluster;
mod engines;
mod jwt;
mod nats_access;
mod providers;
mod rate_limits;
mod server;
mod storage;
mod telemetry;
mod workflows;
pub use auth::AuthConfig;
pub use budgets::BudgetEntry;
pub use cluster::{ClusterConfig, FleetSecret, MAX_DRAIN_SECS, MIN_LEASE_SECS};
pub use engines::{ChatEngineConfig, EnginesConfig, ToolsConfig};
pub use jwt::{GroupGrant, JwtConfig, MAX_JWKS_BYTES};
pub(crate) use nats_access::secret_from_env;
pub use providers::{AliasTarget, BuiltinWebSearch, DefaultsConfig, ProviderConfigSection};
pub use rate_limits::{RateLimitRule, RateLimitValues, RateScope};
pub use server::{AuthMode, ServerConfig};
pub use storage::{MAX_LOG_LINGER_MS, StorageConfig};
pub use telemetry::{MAX_CONTENT_BYTES, TelemetryConfig};
pub use workflows::{AgentProfile, WebhookTarget, WebhooksConfig, WorkflowHook, WorkflowsConfig};

/// The built-in defaults.
pub const DEFAULT_TOML: &str = include_str!("../../../../config/default.toml");

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A source could not be read or a value has the wrong type.
    #[error("invalid configuration: {0}")]
    Parse(#[from] Box<figment::Error>),
    /// Values that parse but do not fit together.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// The whole configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[server]`.
    pub server: ServerConfig,
    /// `[storage]`.
    pub storage: StorageConfig,
    /// `[auth]`: principals, keys and who sees what.
    #[serde(default)]
    pub auth: AuthConfig,
    /// `[providers.*]`.
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderConfigSection>,
    /// `[defaults]`.
    #[serde(default)]
    pub defaults: DefaultsConfig,
    /// `[engines.*]`.
    pub engines: EnginesConfig,
    /// `[mcp]`: MCP servers of tinyelf sessions.
    #[serde(default)]
    pub mcp: elfgate_core::McpSection,
    /// `[aliases]`: model names of the gateway's front doors.
    #[serde(default)]
    pub aliases: BTreeMap<String, AliasTarget>,
    /// `[agents.NAME]`: agent profiles a session selects with `agentId`.
    #[serde(default)]
    pub agents: BTreeMap<String, AgentProfile>,
    /// `[cluster]`: absent for a single node.
    #[serde(default)]
    pub cluster: Option<ClusterConfig>,
    /// `[tools]`: tools that need the operator's setup (`[tools.web_search]`).
    #[serde(default)]
    pub tools: ToolsConfig,
    /// `[workflow_hooks.NAME]`: inbound webhooks (`POST /v1/hooks/NAME`) that start a workflow.
    #[serde(default)]
    pub workflow_hooks: BTreeMap<String, WorkflowHook>,
    /// `[webhooks]`: signed POSTs to configured targets when runs end.
    #[serde(default)]
    pub webhooks: WebhooksConfig,
    /// `[workflows]`.
    #[serde(default)]
    pub workflows: WorkflowsConfig,
    /// `[[budgets]]`: spending limits on keys, users and teams.
    #[serde(default)]
    pub budgets: Vec<BudgetEntry>,
    /// `[sandbox]`: how the processes started for agents are confined.
    #[serde(default)]
    pub sandbox: elfgate_tools::sandbox::SandboxConfig,
    /// `[[rate_limits]]`: how fast a key, user or team may call (docs/spend.md).
    #[serde(default)]
    pub rate_limits: Vec<RateLimitRule>,
    /// `[telemetry]`: runs as OpenTelemetry traces over OTLP; absent: nothing is exported.
    #[serde(default)]
    pub telemetry: Option<TelemetryConfig>,
    /// The bearer token, from ELFGATE_TOKEN only.
    #[serde(skip)]
    pub token: Option<String>,
    /// The file the configuration was read from (POST /v1/mcp/reload reads it again).
    #[serde(skip)]
    pub source: Option<std::path::PathBuf>,
}

/// The `ELFGATE_` variables that are not `ELFGATE_<SECTION>__<KEY>` and still mean something:
/// the daemon's single variables, the terminal client's `ELFGATE_URL`, and the test suite's
/// `ELFGATE_TEST_*` (which daemons started by the tests inherit).
const SINGLE_VARIABLES: &[&str] = &[
    "ELFGATE_BIND",
    "ELFGATE_DATABASE_URL",
    "ELFGATE_TOKEN",
    "ELFGATE_LOG",
    "ELFGATE_LOG_FORMAT",
    "ELFGATE_URL",
];

/// One warning naming (never showing the values of) the `ELFGATE_` variables that configure
/// nothing: a name an operator chose for a secret, say, is no reason to refuse to start.
fn warn_of_other_variables(names: impl Iterator<Item = std::ffi::OsString>) {
    let ignored: Vec<String> = names
        .filter_map(|name| name.into_string().ok())
        .filter(|name| {
            name.starts_with("ELFGATE_")
                && !name.contains("__")
                && !name.starts_with("ELFGATE_TEST_")
                && !SINGLE_VARIABLES.contains(&name.as_str())
        })
        .collect();
    if !ignored.is_empty() {
        tracing::warn!(
            variables = %ignored.join(", "),
            "ignored: these ELFGATE_ variables are not configuration (a key is \
             ELFGATE_<SECTION>__<KEY>)"
        );
    }
}

impl Config {
    /// Loads defaults, then `file`, then the environment; then checks the result.
    pub fn load(file: Option<&Path>) -> Result<Config, ConfigError> {
        let mut fig = Figment::from(Toml::string(DEFAULT_TOML));
        if let Some(path) = file {
            if !path.exists() {
                return Err(ConfigError::Invalid(format!(
                    "config file {} does not exist",
                    path.display()
                )));
            }
            fig = fig.merge(Toml::file(path));
        }
        fig = fig
            .merge(
                // Only ELFGATE_<SECTION>__<KEY> names a key: every section is a table, so a
                // name without `__` never is one (the single variables are read below).
                Env::prefixed("ELFGATE_")
                    .filter(|k| {
                        k.as_str().contains("__")
                            // ELFGATE_TEST_*: the test suite's settings (the PostgreSQL and NATS
                            // it uses), which daemons started by the tests inherit.
                            && !k.as_str().to_ascii_lowercase().starts_with("test_")
                    })
                    .split("__"),
            )
            .merge(
                Env::raw()
                    .only(&["ELFGATE_BIND"])
                    .map(|_| "server.bind".into()),
            )
            .merge(
                Env::raw()
                    .only(&["ELFGATE_DATABASE_URL"])
                    .map(|_| "storage.url".into()),
            );
        warn_of_other_variables(std::env::vars_os().map(|(name, _)| name));
        let mut config: Config = fig.extract().map_err(Box::new)?;
        config.token = match std::env::var("ELFGATE_TOKEN") {
            // A blank token is a mistake (an unset variable expanded, say), and one no client
            // could send: refuse it rather than run with a token no one has or with none.
            Ok(t) if t.trim().is_empty() => {
                return Err(ConfigError::Invalid(
                    "ELFGATE_TOKEN is set but blank: set a real token or unset it".into(),
                ));
            }
            Ok(t) => Some(t.trim().to_string()),
            Err(_) => None,
        };
        config.source = file.map(Path::to_path_buf);
        config.validate()?;
        if let Some(cluster) = &mut config.cluster {
            cluster.secret = cluster::read_fleet_secret(cluster)?;
        }
        Ok(config)
    }

    /// The listen address.
    pub fn bind_addr(&self) -> Result<SocketAddr, ConfigError> {
        self.server.bind_addr()
    }

    /// Every section's checks; the first problem found is the one reported, so the order is
    /// kept as it is.
    fn validate(&self) -> Result<(), ConfigError> {
        self.check_webhooks()?;
        self.sandbox
            .validate()
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        self.workflows.check()?;
        self.server.check_listener()?;
        self.check_providers()?;
        self.check_agents()?;
        self.storage.check_database()?;
        if let Some(cluster) = &self.cluster {
            cluster.check(&self.storage)?;
        }
        self.server.check_sizes()?;
        self.engines.check(self)?;
        if let Some(p) = self.mcp.problem() {
            return Err(ConfigError::Invalid(p));
        }
        self.server.check_connections()?;
        self.storage.check_log_writer()?;
        self.auth.check()?;
        rate_limits::check(&self.rate_limits)?;
        if let Some(jwt) = &self.auth.jwt {
            jwt.check()?;
        }
        budgets::check(&self.budgets)?;
        if let Some(telemetry) = &self.telemetry {
            telemetry.check()?;
        }
        Ok(())
    }
}

/// `url` with its password, if any, replaced: for messages and logs.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((user, host)) => match user.split_once(':') {
            Some((name, _)) => format!("{scheme}://{name}:***@{host}{path}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests;
