//! `[engines.cli]`: the supervisor's limits and one table per backend, plus what only the running
//! daemon knows (the providers the CLIs may be pointed at, the data directory).

use super::adapter::CliProvider;
use super::backend::BackendProgram;
use elfgate_core::CliBackend;
use elfgate_llm::ProviderKind;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

/// `[engines.cli.<backend>]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BackendConfig {
    /// The program: a path (with a slash), or a name looked up in the project's
    /// `tools/cli/node_modules/.bin/` and then in PATH. Default: the CLI's own name.
    pub binary: Option<String>,
    /// Arguments added to every run, after the engine's own.
    pub args: Vec<String>,
    /// Variables set for the CLI (never a provider's key variable nor `ELFGATE_*`).
    pub env: BTreeMap<String, String>,
    /// Runs of this backend at once; more wait in line (0 is taken as 1).
    pub max_concurrent: Option<usize>,
    /// Arguments a request's `cliArgs` may contain, each matched exactly or, for an entry ending
    /// in `=`, as a prefix (`--max-turns=` allows `--max-turns=5`).
    pub allowed_args: Vec<String>,
    /// The configured provider whose base URL and key the CLI gets when a session names none.
    pub provider: Option<String>,
}

/// `[engines.cli.acp]`: agents spoken to with the Agent Client Protocol.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AcpConfig {
    /// Prompts to ACP agents at once; more wait in line (0 is taken as 1).
    pub max_concurrent: Option<usize>,
    /// Seconds a session's agent process is kept after a prompt, for the session's next one
    /// (an ACP agent holds its conversation in memory); 0 ends it after each prompt.
    pub keep_alive_secs: u64,
    /// The agents, by the name a session gives as `acpAgent`.
    pub agents: BTreeMap<String, AcpAgentConfig>,
}

impl Default for AcpConfig {
    fn default() -> Self {
        AcpConfig {
            max_concurrent: None,
            keep_alive_secs: 600,
            agents: BTreeMap::new(),
        }
    }
}

/// `[engines.cli.acp.agents.NAME]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AcpAgentConfig {
    /// The program: a path (with a slash), or a name looked up in the project's
    /// `tools/cli/node_modules/.bin/` and then in PATH.
    pub command: String,
    /// Its arguments (e.g. `["--acp"]`).
    pub args: Vec<String>,
    /// Variables set for it (never a provider's key variable nor `ELFGATE_*`).
    pub env: BTreeMap<String, String>,
    /// The argument that names the model, followed by the session's model when it has one
    /// (e.g. `"-m"`); none: the agent picks its model itself.
    pub model_arg: Option<String>,
    /// The cli backend this agent is a mode of (e.g. `gemini-cli` for `gemini --acp`): the agent
    /// gets that backend's home and configuration files and its provider set-up (the provider's
    /// variables, or the daemon's door with a run token), as that backend's runs do.
    pub provider_setup: Option<CliBackend>,
    /// The provider of its sessions that name none (else `provider_setup`'s backend's default).
    pub provider: Option<String>,
    /// Answer a read of a file that does not exist with empty content instead of the protocol's
    /// "resource not found" error (gemini-cli 0.61 reads a file before it writes it and takes
    /// that error for a failure, so it could not create files).
    pub missing_file_as_empty: bool,
    /// Milliseconds of silence that end what the agent replays of a loaded session after its
    /// answer to `session/load` (the protocol has the replay come before the answer, so 0 by
    /// default; gemini-cli 0.61 sends it after, and needs a few hundred).
    pub load_replay_settle_ms: u64,
}

/// `[engines.cli]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CliConfig {
    /// Seconds a CLI may print nothing on stdout before the run ends with an error.
    pub idle_timeout_secs: u64,
    /// Milliseconds after the polite interrupt before the group gets SIGTERM.
    pub interrupt_grace_ms: u64,
    /// Milliseconds after SIGTERM before the group gets SIGKILL.
    pub kill_grace_ms: u64,
    /// Longest stdout line read; a longer one is logged and skipped.
    pub max_line_bytes: usize,
    /// Seconds `<binary> --version` may take at start.
    pub version_timeout_secs: u64,
    /// Seconds a CLI's permission question waits for the client; no answer denies it.
    pub permission_timeout_secs: u64,
    /// When a CLI goes through the daemon's own door for its wire format instead of straight
    /// to the provider: `auto` (when the provider's kind is not the CLI's own), `always` (so
    /// that aliases, fallback and limits apply to CLIs too), `never`.
    pub proxy: ProxyMode,
    /// `[engines.cli.codex]`.
    pub codex: BackendConfig,
    /// `[engines.cli.claude-code]`.
    #[serde(rename = "claude-code")]
    pub claude_code: BackendConfig,
    /// `[engines.cli.gemini-cli]`.
    #[serde(rename = "gemini-cli")]
    pub gemini_cli: BackendConfig,
    /// `[engines.cli.acp]`.
    pub acp: AcpConfig,
    /// What an ACP run shares with the other backends' tables (none of it is configured).
    #[serde(skip)]
    pub acp_backend: BackendConfig,
    /// The configured providers, by name (set by the daemon, not read from the section).
    #[serde(skip)]
    pub providers: BTreeMap<String, CliProvider>,
    /// The daemon's MCP servers (`[mcp.servers]`), which claude-sdk hands to claude-code with the
    /// session's own (set by the daemon).
    #[serde(skip)]
    pub mcp_servers: BTreeMap<String, elfgate_core::mcp_config::McpServerConfig>,
    /// Every provider's key variable: none reaches a CLI but its own provider's (set by the
    /// daemon).
    #[serde(skip)]
    pub secret_env: BTreeSet<String>,
    /// Where each backend's home directory is made: `<data dir>/cli` (set by the daemon).
    #[serde(skip)]
    pub state_dir: PathBuf,
}

impl Default for CliConfig {
    fn default() -> Self {
        CliConfig {
            idle_timeout_secs: 600,
            interrupt_grace_ms: 1000,
            kill_grace_ms: 1000,
            max_line_bytes: 4 * 1024 * 1024,
            version_timeout_secs: 10,
            permission_timeout_secs: 300,
            proxy: ProxyMode::Auto,
            codex: BackendConfig::default(),
            claude_code: BackendConfig::default(),
            gemini_cli: BackendConfig::default(),
            acp: AcpConfig::default(),
            acp_backend: BackendConfig::default(),
            providers: BTreeMap::new(),
            mcp_servers: BTreeMap::new(),
            secret_env: BTreeSet::new(),
            state_dir: std::env::temp_dir().join("elfgate-cli"),
        }
    }
}

/// A backend's configured default provider that cannot serve it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("engines.cli.{}.{}: {source}", backend.as_str(), key(source))]
pub struct CliConfigError {
    /// The backend.
    pub backend: CliBackend,
    /// Why its provider cannot serve it.
    pub source: ProviderRefused,
}

/// The key under `[engines.cli.<backend>]` a refusal is about.
fn key(refused: &ProviderRefused) -> &'static str {
    match refused {
        ProviderRefused::AcpAgent { .. } => "agents",
        ProviderRefused::Unknown(_) | ProviderRefused::WrongKind { .. } => "provider",
    }
}

/// Why a provider cannot serve a CLI.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderRefused {
    /// An ACP agent's table cannot work.
    #[error("{name}: {why}")]
    AcpAgent {
        /// The agent.
        name: String,
        /// What is wrong.
        why: &'static str,
    },
    /// No provider of that name.
    #[error("unknown provider '{0}'")]
    Unknown(String),
    /// A provider of a wire format the CLI does not speak.
    #[error(
        "provider '{name}' is of kind '{kind}', which {} does not speak (it needs {}), and \
         [engines.cli] proxy = \"never\" keeps it from going through the daemon's door",
        backend.as_str(),
        backend.provider_kinds().iter().map(|k| k.as_str()).collect::<Vec<_>>().join(" or ")
    )]
    WrongKind {
        /// The provider.
        name: String,
        /// Its kind.
        kind: ProviderKind,
        /// The CLI.
        backend: CliBackend,
    },
}

/// `[engines.cli] proxy`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProxyMode {
    /// Through the daemon's door only when the provider's kind is not the CLI's own.
    #[default]
    Auto,
    /// Always through the daemon's door.
    Always,
    /// Never: a provider of another kind is refused.
    Never,
}

/// How a run reaches its provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CliRoute {
    /// The provider's name.
    pub name: String,
    /// The provider.
    pub provider: CliProvider,
    /// Whether the CLI goes through the daemon's own door (with a run token) instead of
    /// straight to the provider.
    pub proxied: bool,
}

/// The durations of the supervisor.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    pub idle: Duration,
    pub interrupt_grace: Duration,
    pub kill_grace: Duration,
    pub max_line_bytes: usize,
}

impl CliConfig {
    /// The table of a backend.
    pub fn backend(&self, b: CliBackend) -> &BackendConfig {
        match b {
            CliBackend::Codex => &self.codex,
            CliBackend::ClaudeCode => &self.claude_code,
            CliBackend::GeminiCli => &self.gemini_cli,
            CliBackend::Acp => &self.acp_backend,
        }
    }

    /// Runs of a backend at once.
    pub(crate) fn max_concurrent(&self, b: CliBackend) -> usize {
        match b {
            CliBackend::Acp => self.acp.max_concurrent,
            b => self.backend(b).max_concurrent,
        }
        .unwrap_or(4)
    }

    pub(crate) fn timeouts(&self) -> Timeouts {
        Timeouts {
            idle: Duration::from_secs(self.idle_timeout_secs.max(1)),
            interrupt_grace: Duration::from_millis(self.interrupt_grace_ms),
            kill_grace: Duration::from_millis(self.kill_grace_ms),
            max_line_bytes: self.max_line_bytes.max(1024),
        }
    }

    /// Checks what parses but cannot work: a default provider that is not configured, or of a
    /// kind the backend does not speak while `proxy = "never"`.
    pub fn validate(&self) -> Result<(), CliConfigError> {
        for (name, agent) in &self.acp.agents {
            let why = if agent.command.trim().is_empty() {
                Some("command is empty")
            } else if agent.provider_setup == Some(CliBackend::Acp) {
                Some(
                    "provider_setup names a backend of its own kind: codex, claude-code or gemini-cli",
                )
            } else if agent.provider.is_some() && agent.provider_setup.is_none() {
                Some("provider needs provider_setup (the backend whose provider set-up it takes)")
            } else {
                None
            };
            if let Some(why) = why {
                return Err(CliConfigError {
                    backend: CliBackend::Acp,
                    source: ProviderRefused::AcpAgent {
                        name: name.clone(),
                        why,
                    },
                });
            }
        }
        for (name, agent) in &self.acp.agents {
            if let (Some(b), Some(provider)) = (agent.provider_setup, &agent.provider)
                && let Err(source) = self.route_for(b, Some(provider))
            {
                return Err(CliConfigError {
                    backend: CliBackend::Acp,
                    source: ProviderRefused::AcpAgent {
                        name: name.clone(),
                        why: match source {
                            ProviderRefused::Unknown(_) => "provider is not configured",
                            _ => "provider is of a kind its provider_setup backend cannot use",
                        },
                    },
                });
            }
        }
        for &backend in CliBackend::ALL {
            if let Some(name) = &self.backend(backend).provider {
                self.route_for(backend, Some(name))
                    .map_err(|source| CliConfigError { backend, source })?;
            }
        }
        Ok(())
    }

    /// The provider a run of `backend` uses and how: `requested` (the session's providerId),
    /// else the backend's configured one, else the first provider of a kind it speaks (else,
    /// unless `proxy = "never"`, the first provider, through the daemon's door). Errors are for
    /// the client.
    pub(crate) fn route_for(
        &self,
        backend: CliBackend,
        requested: Option<&str>,
    ) -> Result<Option<CliRoute>, ProviderRefused> {
        let pick = |name: &str, p: &CliProvider| {
            let speaks = backend.speaks(p.kind);
            let proxied = match self.proxy {
                ProxyMode::Always => true,
                ProxyMode::Never => false,
                ProxyMode::Auto => !speaks,
            };
            if !speaks && !proxied {
                return Err(ProviderRefused::WrongKind {
                    name: name.to_string(),
                    kind: p.kind,
                    backend,
                });
            }
            Ok(Some(CliRoute {
                name: name.to_string(),
                provider: p.clone(),
                proxied,
            }))
        };
        match requested.or(self.backend(backend).provider.as_deref()) {
            Some(name) => {
                let p = self
                    .providers
                    .get(name)
                    .ok_or_else(|| ProviderRefused::Unknown(name.to_string()))?;
                pick(name, p)
            }
            None => {
                let own = self.providers.iter().find(|(_, p)| backend.speaks(p.kind));
                let any = (self.proxy != ProxyMode::Never)
                    .then(|| self.providers.iter().next())
                    .flatten();
                match own.or(any) {
                    Some((name, p)) => pick(name, p),
                    None => Ok(None),
                }
            }
        }
    }
}
