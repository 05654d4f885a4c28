//! TinyElf's settings: the daemon-wide `[engines.tinyelf]` section and the per-run values after a
//! session's `engineConfig` overrides.

use elfgate_core::{EngineConfig, PermissionMode, ThinkingLevel};
use elfgate_llm::{Backoff, Jitter, RetryPolicy};
use elfgate_tools::HookConfig;
use elfgate_tools::process::{ChildEnv, ChildSetup, Isolation, Network};
use elfgate_tools::sandbox::Sandbox;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

/// `[engines.tinyelf.guardian]`: the optional LLM reviewer.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GuardianConfig {
    /// Review tool calls.
    pub enabled: bool,
    /// Provider to ask (default: the session's).
    pub provider: Option<String>,
    /// Model to ask (default: the provider's default model).
    pub model: Option<String>,
    /// Seconds to wait for the verdict; no verdict in time blocks the call.
    pub timeout_secs: f64,
    /// Also review read_only tools.
    pub review_read_only: bool,
}

impl Default for GuardianConfig {
    fn default() -> Self {
        GuardianConfig {
            enabled: false,
            provider: None,
            model: None,
            timeout_secs: 30.0,
            review_read_only: false,
        }
    }
}

/// `[engines.tinyelf]`: defaults of the agent loop, each overridable per
/// session through engineConfig, and the security pipeline's configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TinyElfConfig {
    /// LLM iterations per run.
    pub max_iterations: u32,
    /// Sampling temperature.
    pub temperature: f32,
    /// Output token limit per LLM call.
    pub max_tokens: u32,
    /// Tool results longer than this many characters are truncated with a marker.
    pub tool_result_max_chars: usize,
    /// Retries of a failed LLM call.
    pub max_llm_retries: u32,
    /// The unit of the retry schedule, in milliseconds.
    pub llm_retry_delay_ms: u64,
    /// How the retry delay grows: linear (unit x n) or exponential (unit x 2^(n-1)).
    pub llm_retry_backoff: Backoff,
    /// Randomness applied to the retry delay.
    pub llm_retry_jitter: Jitter,
    /// Longest retry delay, in milliseconds; a longer Retry-After ends the call.
    pub max_llm_retry_delay_ms: u64,
    /// Seconds a tool call may run.
    pub tool_timeout_secs: f64,
    /// Seconds a permission request waits for the client before it is denied.
    pub permission_timeout_secs: f64,
    /// Background sub-agent drains in a row before the loop stops anyway.
    pub max_background_drain_rounds: u32,
    /// Seconds a plain answer waits for background sub-agents still running; past it the
    /// answer stands and the agents still running are reported (and stopped with the run).
    pub background_wait_secs: f64,
    /// History messages loaded on resume.
    pub default_max_history: u32,
    /// LLM iterations of a sub-agent.
    pub sub_agent_max_iterations: u32,
    /// Background sub-agents one run may start; past it spawn with background: true fails.
    pub max_background_agents: u32,
    /// Decisions the permission broker remembers per session; past it the oldest is forgotten.
    pub max_remembered_decisions: usize,
    /// Bytes of stdout and of stderr a shell call keeps (each).
    pub shell_max_output_bytes: usize,
    /// Most files a shell result names as created, changed or deleted in the project.
    pub shell_max_listed_changes: usize,
    /// Variables shell commands and hooks get on top of the allow-listed ones.
    pub shell_env: BTreeMap<String, String>,
    /// Names of the daemon's variables passed through to shell commands and hooks.
    pub shell_env_passthrough: Vec<String>,
    /// The network of shell commands and hooks: isolated (a namespace of their own) or host.
    pub shell_network: Network,
    /// Let web_fetch reach loopback and private addresses.
    pub web_fetch_allow_private: bool,
    /// The web_search tool's backend, from the daemon's `[tools.web_search]` (None: no tool).
    #[serde(skip)]
    pub web_search: Option<elfgate_tools::search::WebSearchConfig>,
    /// Most bytes web_fetch reads.
    pub web_fetch_max_bytes: usize,
    /// Seconds web_fetch may take.
    pub web_fetch_timeout_secs: f64,
    /// Extra deny zones (paths) on top of the data directory, ~/.ssh and /etc.
    pub deny_paths: Vec<String>,
    /// Extra denied shell command patterns (regexes) on top of the built-in list.
    pub deny_commands: Vec<String>,
    /// Tier overrides by tool name: read_only, confirm_once, always_confirm, manual_only.
    pub tool_tiers: BTreeMap<String, String>,
    /// The permission modes in which always_confirm tools run without asking (plan cannot be
    /// one: it denies every tool that is not read_only).
    pub always_confirm_skip_modes: Vec<PermissionMode>,
    /// Tools offered to the model (all built-in tools when absent).
    pub enabled_tools: Option<Vec<String>>,
    /// Folders whose subfolders are skills (each with a SKILL.md), on top of the project's
    /// `.elfgate/skills`.
    pub skills_dirs: Vec<String>,
    /// Skills the router activates for one turn at most (0: no router; the model loads skills
    /// itself from the catalogue).
    pub max_active_skills: usize,
    /// Estimated tokens the active skills' instructions may take together.
    pub active_skills_max_tokens: u64,
    /// Most bytes of the project's AGENTS.md and ELFGATE.md put in the system prompt (together).
    pub project_context_max_bytes: usize,
    /// Hook commands.
    pub hooks: Vec<HookConfig>,
    /// The guardian.
    pub guardian: GuardianConfig,
    /// Set by the daemon, not the configuration: variables that hold secrets (the providers'
    /// api_key_env), never passed to a child even when named in shell_env or its passthrough.
    #[serde(skip)]
    pub secret_env: BTreeSet<String>,
    /// Set by the daemon, not the configuration: how this host isolates a child's network (None:
    /// it cannot, and isolated falls back to host).
    #[serde(skip)]
    pub isolation: Option<Isolation>,
    /// Set by the daemon, not the configuration (`[sandbox]`): the sandbox commands and hooks
    /// run in (None: unconfined).
    #[serde(skip)]
    pub sandbox: Option<Arc<Sandbox>>,
}

impl Default for TinyElfConfig {
    fn default() -> Self {
        TinyElfConfig {
            max_iterations: 40,
            temperature: 0.1,
            max_tokens: 8192,
            tool_result_max_chars: 50_000,
            max_llm_retries: 2,
            llm_retry_delay_ms: 1000,
            llm_retry_backoff: Backoff::Linear,
            llm_retry_jitter: Jitter::None,
            max_llm_retry_delay_ms: 60_000,
            tool_timeout_secs: 300.0,
            permission_timeout_secs: 300.0,
            max_background_drain_rounds: 3,
            background_wait_secs: 300.0,
            default_max_history: 100,
            sub_agent_max_iterations: 20,
            max_background_agents: 8,
            max_remembered_decisions: elfgate_tools::DEFAULT_MAX_REMEMBERED_DECISIONS,
            shell_max_output_bytes: 100_000,
            shell_max_listed_changes: 50,
            shell_env: BTreeMap::new(),
            shell_env_passthrough: Vec::new(),
            shell_network: Network::Isolated,
            web_fetch_allow_private: false,
            web_search: None,
            web_fetch_max_bytes: 2 * 1024 * 1024,
            web_fetch_timeout_secs: 30.0,
            deny_paths: Vec::new(),
            deny_commands: Vec::new(),
            tool_tiers: BTreeMap::new(),
            always_confirm_skip_modes: vec![PermissionMode::BypassPermissions],
            enabled_tools: None,
            skills_dirs: Vec::new(),
            max_active_skills: 3,
            active_skills_max_tokens: 8000,
            project_context_max_bytes: 32 * 1024,
            hooks: Vec::new(),
            guardian: GuardianConfig::default(),
            secret_env: BTreeSet::new(),
            isolation: None,
            sandbox: None,
        }
    }
}

/// A `[engines.tinyelf]` value that parses but cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TinyElfConfigError {
    /// A hook's timeout.
    #[error("engines.tinyelf.hooks[{index}].timeout_secs {why}")]
    HookTimeout {
        /// The hook's place in the list.
        index: usize,
        /// What is wrong with it.
        why: String,
    },
    /// The permission policy's settings.
    #[error("engines.tinyelf.{0}")]
    Policy(#[from] elfgate_tools::TierPolicyError),
}

impl TinyElfConfig {
    /// Values that parse but cannot be used, named by their key.
    pub fn validate(&self) -> Result<(), TinyElfConfigError> {
        for (index, h) in self.hooks.iter().enumerate() {
            if let Some(why) = h.timeout_problem() {
                return Err(TinyElfConfigError::HookTimeout { index, why });
            }
        }
        self.tier_policy()?;
        Ok(())
    }

    /// The permission policy these settings make.
    pub(crate) fn tier_policy(
        &self,
    ) -> Result<elfgate_tools::TierPolicy, elfgate_tools::TierPolicyError> {
        elfgate_tools::TierPolicy::new(self.always_confirm_skip_modes.clone())
    }

    /// The environment of shell commands and hooks, before a session's additions.
    pub(crate) fn child_env(&self) -> ChildEnv {
        ChildEnv::from_daemon(
            &self.shell_env,
            &self.shell_env_passthrough,
            &self.secret_env,
        )
    }

    /// The setup of children with `network` on this host: isolated needs the probe to have
    /// succeeded, else they share the host's network (the daemon warned about it at start).
    pub(crate) fn child_setup(&self, env: ChildEnv, network: Network) -> ChildSetup {
        ChildSetup {
            env,
            isolation: match network {
                Network::Isolated => self.isolation.clone(),
                Network::Host => None,
            },
            sandbox: self.sandbox.clone(),
        }
    }
}

/// The values one run uses.
#[derive(Debug, Clone)]
pub(crate) struct RunSettings {
    pub max_iterations: u32,
    pub temperature: f32,
    pub max_tokens: u32,
    pub tool_result_max_chars: usize,
    /// Retries of an LLM call, shared by the provider client and the loop (see `Runner::call_llm`).
    pub llm_retry: RetryPolicy,
    pub tool_timeout: Duration,
    pub permission_timeout: Duration,
    pub max_background_drain_rounds: u32,
    pub background_wait: Duration,
    pub max_history: u32,
    pub thinking: ThinkingLevel,
    pub enabled_tools: Option<Vec<String>>,
    pub sub_agent_model: Option<String>,
    pub sub_agent_max_iterations: u32,
    /// Environment and network of the run's shell commands.
    pub child: ChildSetup,
    /// Tokens a request may take (the model's context window less the answer's reserve); None
    /// when the provider configures no window, and requests are sent as they are.
    pub context_limit: Option<u64>,
    /// Tokens the run may spend (engineConfig maxTotalTokens).
    pub max_total_tokens: Option<u64>,
    /// Tokens the session may spend, and what its ended runs spent (engineConfig
    /// maxSessionTokens; the spent part known once the store is asked).
    pub max_session_tokens: Option<u64>,
    pub session_tokens_before: u64,
    /// The input tokens the provider reported for the session's latest model call before this
    /// run (from the stored history), a floor for the first call's under a token budget.
    pub last_input_tokens: Option<u64>,
    /// engineConfig useExtendedContext: the long context asked for, the larger window used.
    pub extended_context: bool,
    /// The model's prices, when configured (None: its calls have no cost).
    pub prices: Option<elfgate_core::Prices>,
    /// The run's provider, as configured (its calls' meters name it).
    pub provider_name: String,
}

impl RunSettings {
    /// These settings with the context limit of the run's model: its window less the reserve for
    /// the answer (`reserve_output_tokens`, default the run's `max_tokens`).
    pub(crate) fn with_limits(mut self, limits: &crate::providers::ModelLimits) -> Self {
        let window = if self.extended_context {
            limits
                .extended_context_window_tokens
                .or(limits.context_window_tokens)
        } else {
            limits.context_window_tokens
        };
        self.prices = limits.prices();
        self.context_limit = window.map(|window| {
            let reserve = limits
                .reserve_output_tokens
                .unwrap_or(u64::from(self.max_tokens));
            window.saturating_sub(reserve).max(1)
        });
        self
    }
}

fn secs(s: f64) -> Duration {
    elfgate_tools::clamped_secs(s, 0.001, 86_400.0)
}

impl RunSettings {
    /// The daemon defaults with a run's engineConfig and thinking level over them; `env` is the
    /// children's environment before the session's `shellEnv`.
    pub(crate) fn resolve(
        base: &TinyElfConfig,
        env: &ChildEnv,
        cfg: &EngineConfig,
        thinking: Option<ThinkingLevel>,
    ) -> Self {
        let millis = |ms: u64| Duration::from_millis(ms.max(1));
        // Values only: a session cannot pass the daemon's own variables through.
        let shell_env = cfg.shell_env.clone().unwrap_or_default();
        RunSettings {
            max_iterations: cfg.max_iterations.unwrap_or(base.max_iterations).max(1),
            temperature: cfg.temperature.unwrap_or(base.temperature),
            max_tokens: cfg.max_tokens.unwrap_or(base.max_tokens),
            tool_result_max_chars: cfg
                .tool_result_max_chars
                .unwrap_or(base.tool_result_max_chars)
                .max(1),
            llm_retry: RetryPolicy {
                max_retries: cfg.max_llm_retries.unwrap_or(base.max_llm_retries).min(10),
                base_delay: Duration::from_millis(
                    cfg.llm_retry_delay_ms.unwrap_or(base.llm_retry_delay_ms),
                ),
                max_delay: Duration::from_millis(base.max_llm_retry_delay_ms),
                backoff: base.llm_retry_backoff,
                jitter: base.llm_retry_jitter,
            },
            tool_timeout: cfg
                .tool_execution_timeout
                .map(millis)
                .unwrap_or_else(|| secs(base.tool_timeout_secs)),
            permission_timeout: cfg
                .permission_timeout
                .map(millis)
                .unwrap_or_else(|| secs(base.permission_timeout_secs)),
            max_background_drain_rounds: cfg
                .max_background_drain_rounds
                .unwrap_or(base.max_background_drain_rounds),
            background_wait: secs(base.background_wait_secs),
            max_history: cfg.max_history.unwrap_or(base.default_max_history).max(1),
            thinking: thinking.or(cfg.thinking_level).unwrap_or_default(),
            enabled_tools: cfg
                .enabled_tools
                .clone()
                .or_else(|| base.enabled_tools.clone()),
            sub_agent_model: cfg.sub_agent_model.clone(),
            sub_agent_max_iterations: cfg
                .sub_agent_max_iterations
                .unwrap_or(base.sub_agent_max_iterations)
                .max(1),
            child: base.child_setup(
                env.with(&shell_env),
                cfg.shell_network.unwrap_or(base.shell_network),
            ),
            // Known once the provider and model are (RunSettings::with_limits).
            context_limit: None,
            max_total_tokens: cfg.max_total_tokens,
            max_session_tokens: cfg.max_session_tokens,
            // Known once the store is asked (a session budget only).
            session_tokens_before: 0,
            // Known once the history is loaded.
            last_input_tokens: None,
            extended_context: cfg.use_extended_context.unwrap_or(false),
            // Known once the provider and model are (RunSettings::with_limits).
            prices: None,
            // Known once the provider is (prepare).
            provider_name: String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The specification's constants, as a run gets them when neither the configuration nor the
    /// session says otherwise.
    #[test]
    fn a_run_without_overrides_gets_the_specifications_defaults() {
        let rs = RunSettings::resolve(
            &TinyElfConfig::default(),
            &ChildEnv::default(),
            &EngineConfig::default(),
            None,
        );
        assert_eq!(rs.max_iterations, 40);
        assert!((rs.temperature - 0.1).abs() < f32::EPSILON);
        assert_eq!(rs.max_tokens, 8192);
        assert_eq!(rs.tool_result_max_chars, 50_000);
        assert_eq!(rs.tool_timeout, Duration::from_secs(300));
        assert_eq!(rs.permission_timeout, Duration::from_secs(300));
        assert_eq!(rs.max_history, 100);
        assert_eq!(rs.max_background_drain_rounds, 3);
        assert_eq!(rs.background_wait, Duration::from_secs(300));
        assert_eq!(rs.llm_retry.max_retries, 2);
    }
}
