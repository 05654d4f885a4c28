//! Configuration: the built-in config/default.toml, an optional file over it, environment
//! variables over both. See config/default.toml for every key.

use elfgate_llm::ProviderKind;
use figment::Figment;
use figment::providers::{Env, Format, Toml};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

mod nats_access;
mod workflows;
pub(crate) use nats_access::secret_from_env;
pub use workflows::{AgentProfile, WebhookTarget, WebhooksConfig, WorkflowHook, WorkflowsConfig};

/// The built-in defaults.
pub const DEFAULT_TOML: &str = include_str!("../../../config/default.toml");

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

/// The longest `[storage] log_linger_ms`: events a crash can lose are those of the last linger.
pub const MAX_LOG_LINGER_MS: u64 = 10_000;

/// `[storage]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageConfig {
    /// Database URL.
    pub url: String,
    /// Published events that may wait for the log writer before publishers wait for room.
    pub log_queue_events: usize,
    /// How long a published event may wait for others before the log writer commits it.
    pub log_linger_ms: u64,
    /// A file holding the PostgreSQL user's password (over the URL's and `PGPASSWORD`).
    #[serde(default)]
    pub password_file: Option<std::path::PathBuf>,
    /// Where the token file and the daemon's other local state live; by default the SQLite
    /// database's directory, or `data` (under the working directory) with PostgreSQL.
    #[serde(default)]
    pub data_dir: Option<std::path::PathBuf>,
}

impl StorageConfig {
    /// Whether the store is a PostgreSQL server.
    pub fn is_postgres(&self) -> bool {
        elfgate_store::is_postgres_url(&self.url)
    }

    /// The password in `password_file` (its first line), if one is named.
    pub fn password(&self) -> Result<Option<String>, ConfigError> {
        let Some(file) = &self.password_file else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(file).map_err(|e| {
            ConfigError::Invalid(format!(
                "storage.password_file: cannot read {}: {e}",
                file.display()
            ))
        })?;
        match text.lines().next().map(str::trim_end) {
            Some(p) if !p.is_empty() => Ok(Some(p.to_string())),
            _ => Err(ConfigError::Invalid(format!(
                "storage.password_file: {} holds no password",
                file.display()
            ))),
        }
    }
}

/// The shortest lease a node may hold, in seconds.
pub const MIN_LEASE_SECS: u64 = 2;

/// `[tools]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsConfig {
    /// `[tools.web_search]`: the web_search tool's backend; absent, there is no such tool.
    #[serde(default)]
    pub web_search: Option<elfgate_tools::search::WebSearchConfig>,
}

/// `[cluster]`: this daemon is one node of a fleet that shares a PostgreSQL store and a NATS bus.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// The NATS server (nats://host:port).
    pub nats_url: String,
    /// This node's id; by default derived from the host name and the bound port.
    #[serde(default)]
    pub node_id: Option<String>,
    /// Seconds a node's ownership of a session lasts without a heartbeat.
    #[serde(default = "default_lease_secs")]
    pub lease_secs: u64,
    /// Seconds between a node's heartbeats.
    #[serde(default = "default_heartbeat_secs")]
    pub heartbeat_secs: u64,
    /// Seconds a stopping node (SIGTERM) lets its active runs finish before it interrupts the
    /// rest with finish reason `node_shutdown`.
    #[serde(default = "default_drain_secs")]
    pub drain_secs: u64,
    /// Where other nodes and operators reach this node (`GET /v1/cluster`); by default
    /// `http://` and `server.bind`, which says nothing when bound to every interface.
    #[serde(default)]
    pub address: Option<String>,
    /// The user this node connects to NATS as (with `nats_password_env`).
    #[serde(default)]
    pub nats_user: Option<String>,
    /// The variable holding the NATS user's password.
    #[serde(default)]
    pub nats_password_env: Option<String>,
    /// The variable holding the NATS server's token (`--auth`).
    #[serde(default)]
    pub nats_token_env: Option<String>,
    /// A NATS credentials file (`.creds`: a user JWT and its NKey seed).
    #[serde(default)]
    pub nats_creds_file: Option<std::path::PathBuf>,
    /// A file holding the NKey seed (`SU…`) this node authenticates with.
    #[serde(default)]
    pub nats_nkey_file: Option<std::path::PathBuf>,
    /// The CA (PEM) the NATS server's certificate must chain to; set, the connection is TLS.
    #[serde(default)]
    pub nats_tls_ca: Option<std::path::PathBuf>,
    /// This node's client certificate (PEM) for NATS servers that verify clients.
    #[serde(default)]
    pub nats_tls_cert: Option<std::path::PathBuf>,
    /// The client certificate's private key (PEM).
    #[serde(default)]
    pub nats_tls_key: Option<std::path::PathBuf>,
    /// The name of the environment variable holding the fleet's secret, which signs every
    /// message a node puts on NATS (docs/security.md, "A fleet"); required.
    #[serde(default)]
    pub secret_env: Option<String>,
    /// Or the file holding it (readable by the daemon's user alone).
    #[serde(default)]
    pub secret_file: Option<std::path::PathBuf>,
    /// The secret itself, read from `secret_env` at load.
    #[serde(skip)]
    pub secret: FleetSecret,
}

/// The fleet's secret, from the variable `secret_env` names or the file `secret_file`: exactly
/// one is required, and the secret must be long enough that it cannot be guessed (a blank or
/// short one is a mistake, refused rather than signed with). A file must be readable by the
/// daemon's user alone, as the token file is.
fn read_fleet_secret(cluster: &ClusterConfig) -> Result<FleetSecret, ConfigError> {
    let min = crate::fleet::signing::MIN_SECRET_BYTES;
    let (value, from) = match (&cluster.secret_env, &cluster.secret_file) {
        (Some(_), Some(_)) => {
            return Err(ConfigError::Invalid(
                "cluster.secret_env and cluster.secret_file: give one of them, not both".into(),
            ));
        }
        (None, None) => {
            return Err(ConfigError::Invalid(format!(
                "cluster.secret_env (or cluster.secret_file) is required: the fleet's secret \
                 (at least {min} bytes, the same on every node), which signs every message on \
                 the bus"
            )));
        }
        (Some(name), None) => match std::env::var(name) {
            Ok(v) => (v, format!("cluster.secret_env: the variable {name}")),
            Err(_) => {
                return Err(ConfigError::Invalid(format!(
                    "cluster.secret_env: the variable {name} is not set (or not UTF-8)"
                )));
            }
        },
        (None, Some(path)) => {
            let shown = path.display();
            let meta = std::fs::metadata(path)
                .map_err(|e| ConfigError::Invalid(format!("cluster.secret_file '{shown}': {e}")))?;
            if std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o077 != 0 {
                return Err(ConfigError::Invalid(format!(
                    "cluster.secret_file '{shown}' is readable by other users: chmod 600 it"
                )));
            }
            let v = std::fs::read_to_string(path)
                .map_err(|e| ConfigError::Invalid(format!("cluster.secret_file '{shown}': {e}")))?;
            (v, format!("cluster.secret_file '{shown}'"))
        }
    };
    if value.trim().len() < min {
        return Err(ConfigError::Invalid(format!(
            "{from} holds fewer than {min} bytes (blank or short): set a long random secret, \
             e.g. `openssl rand -hex 32`"
        )));
    }
    Ok(FleetSecret(value.trim().to_string()))
}

/// The fleet's shared secret; never printed.
#[derive(Clone, Default)]
pub struct FleetSecret(pub String);

impl std::fmt::Debug for FleetSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FleetSecret(…)")
    }
}

fn default_drain_secs() -> u64 {
    30
}

/// The longest drain a node may be given.
pub const MAX_DRAIN_SECS: u64 = 3600;

fn default_lease_secs() -> u64 {
    5
}

fn default_heartbeat_secs() -> u64 {
    1
}

/// `[providers.NAME]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfigSection {
    /// Wire format.
    pub kind: ProviderKind,
    /// Base URL.
    pub base_url: String,
    /// Environment variable holding the API key.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Model used when a session names none.
    #[serde(default)]
    pub default_model: Option<String>,
    /// Seconds without a decoded event after which a stream is failed.
    #[serde(default = "default_idle")]
    pub idle_timeout_secs: u64,
    /// Seconds allowed until response headers.
    #[serde(default = "default_request_timeout")]
    pub request_timeout_secs: u64,
    /// Seconds a call may take until its first event, over all its attempts and the delays
    /// between them (0: no limit). Absent: `request_timeout_secs + idle_timeout_secs`, the most
    /// one attempt may take by its own limits, so that a stall before the first token costs one
    /// attempt's wait, not one per attempt.
    #[serde(default)]
    pub first_token_timeout_secs: Option<u64>,
    /// Gateway requests running at once on this provider (absent: no limit).
    #[serde(default)]
    pub max_concurrent: Option<usize>,
    /// Gateway requests started per minute on this provider (absent: no limit).
    #[serde(default)]
    pub requests_per_minute: Option<u32>,
    /// Gateway requests that may wait for either limit; past it, 429.
    #[serde(default = "default_max_queued")]
    pub max_queued: usize,
    /// The models' context window in tokens (tinyelf compacts a request that would not fit).
    #[serde(default)]
    pub context_window_tokens: Option<u64>,
    /// Tokens of the window kept for the answer (default: the request's max_tokens).
    #[serde(default)]
    pub reserve_output_tokens: Option<u64>,
    /// The models' window when a session asks for the extended context (useExtendedContext).
    #[serde(default)]
    pub extended_context_window_tokens: Option<u64>,
    /// The models' price in US dollars per million input tokens (a turn's costUsd).
    #[serde(default)]
    pub input_usd_per_mtok: Option<f64>,
    /// The models' price in US dollars per million output tokens.
    #[serde(default)]
    pub output_usd_per_mtok: Option<f64>,
    /// Per model name: the same keys, over the provider's.
    #[serde(default)]
    pub models: std::collections::BTreeMap<String, elfgate_engines::ModelLimits>,
    /// What the gateway does with a caller's built-in `web_search` tool on this provider's
    /// routes (absent: see [`Config::builtin_web_search`]).
    #[serde(default)]
    pub builtin_web_search: Option<BuiltinWebSearch>,
}

/// `builtin_web_search`: how a gateway caller's built-in `web_search` tool is served.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum BuiltinWebSearch {
    /// The provider searches itself (a kind that can: openai-responses, anthropic, gemini).
    Native,
    /// The daemon's search backend (`[tools.web_search]`) answers the model's searches.
    Local,
    /// Left out of the request, with a notice (a response header and a log line).
    Omit,
}

fn default_attachment_max_bytes() -> usize {
    10 * 1024 * 1024
}

fn default_max_queued() -> usize {
    64
}

fn default_idle() -> u64 {
    120
}
fn default_request_timeout() -> u64 {
    60
}

/// One alias: a route, or a chain of routes tried in order.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum AliasTarget {
    /// `NAME = "PROVIDER/MODEL"`.
    One(String),
    /// `NAME = ["PROVIDER/MODEL", ...]`: a fallback chain.
    Chain(Vec<String>),
}

impl AliasTarget {
    /// The routes, in order.
    pub fn routes(&self) -> Vec<String> {
        match self {
            AliasTarget::One(r) => vec![r.clone()],
            AliasTarget::Chain(rs) => rs.clone(),
        }
    }
}

/// `[defaults]`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct DefaultsConfig {
    /// Provider used when a session names none.
    #[serde(default)]
    pub provider: Option<String>,
}

/// `[engines.chat]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatEngineConfig {
    /// Most history messages sent.
    pub max_history: u32,
    /// Retries before the first token.
    pub max_retries: u32,
    /// Base retry delay.
    pub retry_delay_ms: u64,
    /// Longest retry delay.
    pub max_retry_delay_ms: u64,
    /// How the retry delay grows.
    #[serde(default)]
    pub retry_backoff: elfgate_llm::Backoff,
    /// Randomness applied to the retry delay.
    #[serde(default)]
    pub retry_jitter: elfgate_llm::Jitter,
}

/// `[engines]`.
#[derive(Debug, Clone, Deserialize)]
pub struct EnginesConfig {
    /// Chat engines' settings.
    pub chat: ChatEngineConfig,
    /// TinyElf's defaults and security pipeline (`[engines.tinyelf]`).
    #[serde(default)]
    pub tinyelf: elfgate_engines::TinyElfConfig,
    /// The cli engine's supervisor and backends (`[engines.cli]`).
    #[serde(default)]
    pub cli: elfgate_engines::CliConfig,
}

impl EnginesConfig {
    /// `[engines.cli]` with the configured providers (the CLIs are pointed at them) and the
    /// variables holding their keys (none reaches a CLI but its own provider's).
    pub fn cli_config(&self, config: &Config) -> elfgate_engines::CliConfig {
        let mut c = self.cli.clone();
        c.providers = config
            .providers
            .iter()
            .map(|(name, p)| {
                let provider = elfgate_engines::cli::CliProvider {
                    kind: p.kind,
                    base_url: p.base_url.clone(),
                    api_key_env: p.api_key_env.clone(),
                    default_model: p.default_model.clone(),
                };
                (name.clone(), provider)
            })
            .collect();
        c.secret_env = config
            .providers
            .values()
            .filter_map(|p| p.api_key_env.clone())
            .collect();
        c
    }
}

/// The whole configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[server]`.
    pub server: ServerConfig,
    /// `[storage]`.
    pub storage: StorageConfig,
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
    /// `[sandbox]`: how the processes started for agents are confined.
    #[serde(default)]
    pub sandbox: elfgate_tools::sandbox::SandboxConfig,
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
    /// How a gateway caller's built-in `web_search` is served on provider `name` (of `kind`):
    /// its `builtin_web_search`, else the provider's own search where its kind has one, else
    /// the daemon's search backend where one is configured, else left out.
    pub fn builtin_web_search(&self, name: &str, kind: ProviderKind) -> BuiltinWebSearch {
        match self.providers.get(name).and_then(|p| p.builtin_web_search) {
            Some(mode) => mode,
            None if kind.searches_natively() => BuiltinWebSearch::Native,
            None if self.tools.web_search.is_some() => BuiltinWebSearch::Local,
            None => BuiltinWebSearch::Omit,
        }
    }

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
            cluster.secret = read_fleet_secret(cluster)?;
        }
        Ok(config)
    }

    /// The listen address.
    pub fn bind_addr(&self) -> Result<SocketAddr, ConfigError> {
        self.server
            .bind
            .parse()
            .map_err(|e| ConfigError::Invalid(format!("server.bind '{}': {e}", self.server.bind)))
    }

    /// This daemon as a node of the fleet (`[cluster]`), None for a single node. The node id is
    /// `cluster.node_id`, else the host name and the bound port (`HOST-PORT`); with port 0 (a
    /// port the system picks) it must be given.
    pub fn fleet_member(&self) -> Result<Option<elfgate_store::FleetMember>, ConfigError> {
        let Some(cluster) = &self.cluster else {
            return Ok(None);
        };
        let bind = self.bind_addr()?;
        let node_id = match &cluster.node_id {
            Some(id) => id.clone(),
            None if bind.port() == 0 => {
                return Err(ConfigError::Invalid(
                    "cluster.node_id is required when server.bind's port is 0 (the default id is \
                     the host name and the port)"
                        .into(),
                ));
            }
            None => {
                let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .ok()
                    .map(|h| {
                        h.trim()
                            .chars()
                            .map(|c| {
                                if c.is_ascii_alphanumeric() || c == '-' {
                                    c
                                } else {
                                    '_'
                                }
                            })
                            .collect::<String>()
                    })
                    .filter(|h| !h.is_empty())
                    .unwrap_or_else(|| "node".into());
                format!("{host}-{}", bind.port())
            }
        };
        Ok(Some(elfgate_store::FleetMember {
            node_id,
            address: cluster
                .address
                .clone()
                .unwrap_or_else(|| format!("http://{bind}")),
            version: env!("CARGO_PKG_VERSION").into(),
            lease: std::time::Duration::from_secs(cluster.lease_secs),
            heartbeat: std::time::Duration::from_secs(cluster.heartbeat_secs),
        }))
    }

    /// The store's URL and `[cluster]` fit together.
    fn validate_webhooks(&self) -> Result<(), ConfigError> {
        let w = &self.webhooks;
        for (key, value) in [
            ("max_attempts", u64::from(w.max_attempts)),
            ("timeout_secs", w.timeout_secs),
            ("max_pending", u64::from(w.max_pending)),
        ] {
            if value == 0 {
                return Err(ConfigError::Invalid(format!("webhooks.{key}: at least 1")));
            }
        }
        // A secret set but blank signs with the empty key, which anybody can: refused as a blank
        // token is (an unset one is a node without the secret: its hooks and targets fail).
        let secrets = (w.targets.iter().map(|t| t.secret_env.as_str()))
            .chain(w.notify_secret_env.as_deref())
            .chain(self.workflow_hooks.values().map(|h| h.secret_env.as_str()));
        for variable in secrets {
            crate::webhooks::signature::key_in(variable)
                .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        }
        let mut names = std::collections::BTreeSet::new();
        for t in &w.targets {
            if !names.insert(t.name.as_str()) {
                return Err(ConfigError::Invalid(format!(
                    "webhooks.targets: two targets are named '{}'",
                    t.name
                )));
            }
            match reqwest::Url::parse(&t.url) {
                Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => {}
                _ => {
                    return Err(ConfigError::Invalid(format!(
                        "webhooks.targets '{}': url '{}' is not an http or https URL",
                        t.name, t.url
                    )));
                }
            }
        }
        Ok(())
    }

    fn validate_storage(&self) -> Result<(), ConfigError> {
        let url = &self.storage.url;
        let sqlite = url.starts_with("sqlite:");
        if !sqlite && !self.storage.is_postgres() {
            return Err(ConfigError::Invalid(format!(
                "storage.url must start with sqlite:// or postgres:// (have '{}')",
                redact_url(url)
            )));
        }
        if self.storage.password_file.is_some() {
            if sqlite {
                return Err(ConfigError::Invalid(
                    "storage.password_file is for a postgres:// storage.url".into(),
                ));
            }
            self.storage.password()?;
        }
        let Some(cluster) = &self.cluster else {
            return Ok(());
        };
        if sqlite {
            return Err(ConfigError::Invalid(
                "[cluster] needs storage.url = \"postgres://…\": a SQLite database cannot be \
                 shared by several nodes (remove [cluster] to run a single node on SQLite)"
                    .into(),
            ));
        }
        nats_access::check(cluster)?;
        if let Some(id) = &cluster.node_id
            && (id.is_empty()
                || id.len() > 64
                || !id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        {
            return Err(ConfigError::Invalid(format!(
                "cluster.node_id '{id}' must be 1 to 64 letters, digits, '-' or '_' (it names \
                 the node's NATS subjects)"
            )));
        }
        if let Some(address) = &cluster.address
            && !(address.starts_with("http://") || address.starts_with("https://"))
        {
            return Err(ConfigError::Invalid(format!(
                "cluster.address '{address}' must be a URL starting with http:// or https://"
            )));
        }
        if cluster.drain_secs > MAX_DRAIN_SECS {
            return Err(ConfigError::Invalid(format!(
                "cluster.drain_secs must be at most {MAX_DRAIN_SECS}"
            )));
        }
        if cluster.heartbeat_secs == 0 {
            return Err(ConfigError::Invalid(
                "cluster.heartbeat_secs must be positive".into(),
            ));
        }
        if cluster.lease_secs < MIN_LEASE_SECS || cluster.lease_secs < 2 * cluster.heartbeat_secs {
            return Err(ConfigError::Invalid(format!(
                "cluster.lease_secs ({}) must be at least {MIN_LEASE_SECS} and at least twice \
                 cluster.heartbeat_secs ({}): a lease must outlive a missed heartbeat",
                cluster.lease_secs, cluster.heartbeat_secs
            )));
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), ConfigError> {
        self.validate_webhooks()?;
        self.sandbox
            .validate()
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        for (key, value) in [
            ("template_fuel", self.workflows.template_fuel),
            ("max_output_bytes", self.workflows.max_output_bytes as u64),
        ] {
            if value == 0 {
                return Err(ConfigError::Invalid(format!("workflows.{key}: at least 1")));
            }
        }
        let addr = self.bind_addr()?;
        if !addr.ip().is_loopback() && self.server.auth == AuthMode::None {
            return Err(ConfigError::Invalid(format!(
                "server.auth = \"none\" is only allowed on a loopback address, not on {addr}"
            )));
        }
        for origin in &self.server.allowed_origins {
            crate::origin::parse_origin(origin).map_err(|e| {
                ConfigError::Invalid(format!("server.allowed_origins '{origin}': {e}"))
            })?;
        }
        if let Some(p) = &self.defaults.provider
            && !self.providers.contains_key(p)
        {
            return Err(ConfigError::Invalid(format!(
                "defaults.provider '{p}' is not a configured provider (have: {})",
                self.providers
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        for (name, p) in &self.providers {
            let prices = [(String::new(), p.input_usd_per_mtok, p.output_usd_per_mtok)]
                .into_iter()
                .chain(p.models.iter().map(|(m, l)| {
                    (
                        format!(".models.\"{m}\""),
                        l.input_usd_per_mtok,
                        l.output_usd_per_mtok,
                    )
                }));
            for (at, input, output) in prices {
                for (key, v) in [
                    ("input_usd_per_mtok", input),
                    ("output_usd_per_mtok", output),
                ] {
                    if v.is_some_and(|v| !(v.is_finite() && v >= 0.0)) {
                        return Err(ConfigError::Invalid(format!(
                            "providers.{name}{at}.{key} must be a finite number of dollars, 0 or more"
                        )));
                    }
                }
            }
            match p.builtin_web_search {
                Some(BuiltinWebSearch::Native) if !p.kind.searches_natively() => {
                    return Err(ConfigError::Invalid(format!(
                        "providers.{name}.builtin_web_search = \"native\": a {} provider cannot \
                         search itself (local or omit)",
                        p.kind
                    )));
                }
                Some(BuiltinWebSearch::Local) if self.tools.web_search.is_none() => {
                    return Err(ConfigError::Invalid(format!(
                        "providers.{name}.builtin_web_search = \"local\" needs a search backend: \
                         configure [tools.web_search]"
                    )));
                }
                _ => {}
            }
            if !(p.base_url.starts_with("http://") || p.base_url.starts_with("https://")) {
                return Err(ConfigError::Invalid(format!(
                    "providers.{name}.base_url '{}' must start with http:// or https://",
                    p.base_url
                )));
            }
        }
        for (name, target) in &self.aliases {
            self.check_alias(name, target)?;
        }
        for (name, profile) in &self.agents {
            self.check_agent(name, profile)?;
        }
        self.validate_storage()?;
        if self.server.attachment_max_bytes == 0 {
            return Err(ConfigError::Invalid(
                "server.attachment_max_bytes must be positive".into(),
            ));
        }
        if self.server.body_limit_bytes == 0 {
            return Err(ConfigError::Invalid(
                "server.body_limit_bytes must be positive".into(),
            ));
        }
        self.engines
            .tinyelf
            .validate()
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        self.engines
            .cli_config(self)
            .validate()
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        if let Some(p) = self.mcp.problem() {
            return Err(ConfigError::Invalid(p));
        }
        if self.server.header_read_timeout_secs == 0 {
            return Err(ConfigError::Invalid(
                "server.header_read_timeout_secs must be positive".into(),
            ));
        }
        if self.server.max_connections == Some(0) {
            return Err(ConfigError::Invalid(
                "server.max_connections must be positive".into(),
            ));
        }
        if self.storage.log_queue_events == 0 {
            return Err(ConfigError::Invalid(
                "storage.log_queue_events must be positive".into(),
            ));
        }
        if self.storage.log_linger_ms > MAX_LOG_LINGER_MS {
            return Err(ConfigError::Invalid(format!(
                "storage.log_linger_ms must be at most {MAX_LOG_LINGER_MS}"
            )));
        }
        Ok(())
    }

    /// An alias must be able to work as written: each route a `PROVIDER/MODEL` of a configured
    /// provider or an `elfgate:ENGINE[:PROVIDER/MODEL]` of a known engine, never another alias
    /// (routes do not nest, so a self-reference or a cycle could only fail at request time),
    /// and a chain made of provider routes only (an engine's run is not one call to fall back
    /// from, and its fallbacks would be dropped unseen).
    fn check_agent(&self, name: &str, profile: &AgentProfile) -> Result<(), ConfigError> {
        if let Some(p) = &profile.provider
            && !self.providers.contains_key(p)
        {
            return Err(ConfigError::Invalid(format!(
                "agents.{name}.provider '{p}' is not a configured provider"
            )));
        }
        if let Some(cfg) = &profile.engine_config
            && (cfg.contains_key("enabledTools") && profile.tools.is_some()
                || cfg.contains_key("skills") && profile.skills.is_some())
        {
            return Err(ConfigError::Invalid(format!(
                "agents.{name}: tools and skills are given twice (also in engine_config)"
            )));
        }
        elfgate_core::EngineConfig::from_json(&serde_json::Value::Object(profile.engine_config()))
            .map_err(|e| ConfigError::Invalid(format!("agents.{name}.{e}")))?;
        Ok(())
    }

    fn check_alias(&self, name: &str, target: &AliasTarget) -> Result<(), ConfigError> {
        let invalid = |why: String| Err(ConfigError::Invalid(format!("aliases.{name}: {why}")));
        let routes = target.routes();
        if routes.is_empty() {
            return invalid("names no route".into());
        }
        let chained = routes.len() > 1;
        for r in &routes {
            if r == name {
                return invalid(format!("'{r}' names the alias itself"));
            }
            if self.aliases.contains_key(r) {
                return invalid(format!(
                    "'{r}' is another alias; aliases do not nest, name its routes instead"
                ));
            }
            let provider_model = match r.strip_prefix("elfgate:") {
                Some(rest) => {
                    if chained {
                        return invalid(format!(
                            "'{r}' is an engine route; a chain may hold PROVIDER/MODEL routes \
                             only (an engine route stands alone)"
                        ));
                    }
                    let (engine, target) = match rest.split_once(':') {
                        Some((e, t)) => (e, Some(t)),
                        None => (rest, None),
                    };
                    if let Err(e) = engine.parse::<elfgate_core::EngineType>() {
                        return invalid(format!("'{r}': {e}"));
                    }
                    target.filter(|t| !t.is_empty())
                }
                None => Some(r.as_str()),
            };
            if let Some(pm) = provider_model {
                let Some((p, m)) = pm.split_once('/') else {
                    return invalid(format!(
                        "'{r}' is neither PROVIDER/MODEL nor elfgate:ENGINE[:PROVIDER/MODEL]"
                    ));
                };
                if !self.providers.contains_key(p) {
                    return invalid(format!(
                        "'{r}' names provider '{p}', which is not configured"
                    ));
                }
                if m.is_empty() {
                    return invalid(format!("'{r}' names no model"));
                }
            }
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
