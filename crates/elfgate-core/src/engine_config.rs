//! `engineConfig`: a session's engine settings, as the API takes them (POST /v1/sessions and every
//! prompt). Parsed once, at the request, so that a wrong type or an unknown key is refused there
//! with the field named instead of being ignored by the engine later.

use crate::mcp_config::McpSessionConfig;
use crate::modes::{Network, ThinkingLevel};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// Engine settings of a session or a prompt. Every key is optional; an absent key leaves the
/// daemon's default (`[engines.*]` in the configuration). Unknown keys are refused.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EngineConfig {
    /// LLM iterations per run (tinyelf). Alias: maxTurns.
    #[serde(alias = "maxTurns", skip_serializing_if = "Option::is_none")]
    pub max_iterations: Option<u32>,
    /// Sampling temperature (every engine).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Output token limit of each LLM call (every engine).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Tool results longer than this many characters are cut (tinyelf).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_result_max_chars: Option<usize>,
    /// Retries of a failed LLM call, at most 10 (tinyelf).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_llm_retries: Option<u32>,
    /// Delay before retry n is this x n milliseconds (tinyelf).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub llm_retry_delay_ms: Option<u64>,
    /// Milliseconds a tool call may run (tinyelf). Alias: toolTimeoutMs.
    #[serde(alias = "toolTimeoutMs", skip_serializing_if = "Option::is_none")]
    pub tool_execution_timeout: Option<u64>,
    /// Milliseconds a permission request waits for the client (tinyelf). Alias:
    /// permissionTimeoutMs.
    #[serde(alias = "permissionTimeoutMs", skip_serializing_if = "Option::is_none")]
    pub permission_timeout: Option<u64>,
    /// Background sub-agent drains in a row before the loop stops anyway (tinyelf).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_background_drain_rounds: Option<u32>,
    /// History messages loaded on resume (tinyelf).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_history: Option<u32>,
    /// Reasoning effort when the prompt has no top-level thinkingLevel (every engine).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking_level: Option<ThinkingLevel>,
    /// Tools offered to the model (tinyelf). Alias: tools.
    #[serde(alias = "tools", skip_serializing_if = "Option::is_none")]
    pub enabled_tools: Option<Vec<String>>,
    /// Model of the sub-agents started with spawn (tinyelf).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sub_agent_model: Option<String>,
    /// LLM iterations of a sub-agent (tinyelf).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sub_agent_max_iterations: Option<u32>,
    /// Network of the session's shell commands (tinyelf).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shell_network: Option<Network>,
    /// Variables set for the session's shell commands (tinyelf).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shell_env: Option<BTreeMap<String, String>>,
    /// MCP servers of the session over the daemon's, and daemon servers it does without
    /// (tinyelf). The start request's top-level `mcpConfig` is stored here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp_config: Option<McpSessionConfig>,
    /// Extra arguments of the CLI (cli), each in the backend's `allowed_args`. The request's
    /// top-level `cliArgs` lands here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cli_args: Option<Vec<String>>,
    /// What the channel's user may do (every engine; see docs/api.md). The request's top-level
    /// `channelPermissions` (alias `channelUserPermissions`) lands here; stored with the session
    /// and kept for its later runs and tool runs until a prompt sends new ones.
    #[serde(
        alias = "channelUserPermissions",
        skip_serializing_if = "Option::is_none"
    )]
    pub channel_permissions: Option<ChannelPermissions>,
    /// Tokens (input and output, every model call of the run, sub-agents included) one run may
    /// spend (tinyelf); checked before each model call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_total_tokens: Option<u64>,
    /// Tokens the session may spend over all its runs, this one included (tinyelf).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_session_tokens: Option<u64>,
    /// Dollars the session may spend over all its runs, this one included (every engine that
    /// calls models, and the cli engine by its reported usage): checked before each model call
    /// with the call's estimate reserved; at the limit the session pauses (`budget_paused`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    /// The skills offered, by name (tinyelf): only these of the skills found; all when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skills: Option<Vec<String>>,
    /// Variables handed to the session's CLI (cli), on top of the ones the daemon gives it;
    /// never one the daemon sets for the CLI's provider, an `ELFGATE_*` one or a provider's key
    /// variable (422 naming it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider_env: Option<BTreeMap<String, String>>,
    /// Ask for the model's long context (tinyelf, chat, st-chat, api): Anthropic's context-1m
    /// beta header, and the provider's extended_context_window_tokens for compaction.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub use_extended_context: Option<bool>,
    /// Search the web before answering (chat, st-chat, api): the prompt is the query, the
    /// results go into the request's context (needs `[tools.web_search]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search_orchestration: Option<bool>,
    /// Ask the provider to search the web itself (tinyelf, chat, st-chat, api), where its kind
    /// can: openai-responses and gemini; 422 on the others.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub native_search_enabled: Option<bool>,
    /// The configured ACP agent a `cliBackend: "acp"` session talks to
    /// (`[engines.cli.acp.agents.NAME]`); also accepted as the request's top-level `acpAgent`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acp_agent: Option<String>,
    /// Where a signed POST goes when a run of the session ends (besides `[webhooks]`' targets),
    /// signed with `webhooks.notify_secret_env`'s secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notify_url: Option<String>,
    /// The workflow a `workflow` session runs: set by the daemon when it starts a workflow's
    /// run, never taken from a client.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workflow: Option<WorkflowRef>,
}

/// The bounds of engineConfig's numbers, inclusive: a value outside them is refused (422) when
/// the request comes, instead of overflowing a deadline or a count later in the run. Documented
/// in docs/api.md.
pub mod bounds {
    /// maxIterations and subAgentMaxIterations.
    pub const ITERATIONS: (u32, u32) = (1, 10_000);
    /// temperature.
    pub const TEMPERATURE: (f32, f32) = (0.0, 2.0);
    /// maxTokens.
    pub const MAX_TOKENS: (u32, u32) = (1, 1_000_000);
    /// toolResultMaxChars.
    pub const TOOL_RESULT_MAX_CHARS: (usize, usize) = (1, 100_000_000);
    /// maxLlmRetries.
    pub const LLM_RETRIES: (u32, u32) = (0, 10);
    /// llmRetryDelayMs: at most ten minutes.
    pub const LLM_RETRY_DELAY_MS: (u64, u64) = (0, 600_000);
    /// toolExecutionTimeout and permissionTimeout, in milliseconds: at most a week.
    pub const TIMEOUT_MS: (u64, u64) = (1, 7 * 24 * 3_600_000);
    /// maxBackgroundDrainRounds.
    pub const DRAIN_ROUNDS: (u32, u32) = (0, 1_000);
    /// maxHistory.
    pub const MAX_HISTORY: (u32, u32) = (1, 100_000);
    /// maxTotalTokens and maxSessionTokens.
    pub const TOKEN_BUDGET: (u64, u64) = (1, 1_000_000_000_000);
}

/// The workflow version a `workflow` session runs, with the run's inputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkflowRef {
    /// The workflow's name.
    pub name: String,
    /// The version the run started with.
    pub version: u32,
    /// The inputs, defaults filled in.
    #[schema(value_type = Object)]
    pub inputs: serde_json::Map<String, serde_json::Value>,
    /// A resume of a run that failed: where it goes on and what the steps before had given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<WorkflowResume>,
}

/// Where a resumed workflow run goes on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkflowResume {
    /// The run it resumes.
    pub run_id: crate::RunId,
    /// The index of the first step it runs.
    pub from_step: u32,
    /// The earlier steps' `{output, status}` by id, as the resumed run ended them.
    #[schema(value_type = Object)]
    pub outputs: serde_json::Map<String, serde_json::Value>,
}

/// What a chat channel lets its user do (from the seed's channelUserPermissions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChannelPermissions {
    /// false blocks every tool call.
    pub can_use_tool: bool,
    /// true asks the client before every tool call.
    #[serde(default)]
    pub require_confirmation: bool,
}

/// Why an `engineConfig` object was refused: the key path and serde's reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("engineConfig{}: {message}", display_path(.path))]
pub struct EngineConfigError {
    /// Where, e.g. `maxIterations`, `shellEnv.FOO`, or the unknown key; empty or `.` for the
    /// object itself.
    pub path: String,
    /// What is wrong, e.g. `invalid type: string "x", expected u32`.
    pub message: String,
}

fn display_path(path: &str) -> String {
    if path.is_empty() || path == "." {
        String::new()
    } else {
        format!(".{path}")
    }
}

impl EngineConfig {
    /// Parses an `engineConfig` object.
    pub fn from_json(value: &Value) -> Result<Self, EngineConfigError> {
        let cfg: EngineConfig =
            serde_path_to_error::deserialize(value).map_err(|e| EngineConfigError {
                path: e.path().to_string(),
                message: e.inner().to_string(),
            })?;
        if let Some(problem) = cfg.mcp_config.as_ref().and_then(|m| m.problem("mcpConfig")) {
            return Err(EngineConfigError {
                path: String::new(),
                message: problem,
            });
        }
        cfg.check_bounds()?;
        Ok(cfg)
    }

    /// Every number within [`bounds`].
    fn check_bounds(&self) -> Result<(), EngineConfigError> {
        use bounds::*;
        fn within<T: PartialOrd + std::fmt::Display + Copy>(
            path: &str,
            value: Option<T>,
            (lo, hi): (T, T),
        ) -> Result<(), EngineConfigError> {
            match value {
                // Written so that NaN is outside too.
                Some(v) if !(v >= lo && v <= hi) => Err(EngineConfigError {
                    path: path.to_string(),
                    message: format!("{v} is outside {lo}..={hi}"),
                }),
                _ => Ok(()),
            }
        }
        within("maxIterations", self.max_iterations, ITERATIONS)?;
        within("temperature", self.temperature, TEMPERATURE)?;
        within("maxTokens", self.max_tokens, MAX_TOKENS)?;
        within(
            "toolResultMaxChars",
            self.tool_result_max_chars,
            TOOL_RESULT_MAX_CHARS,
        )?;
        within("maxLlmRetries", self.max_llm_retries, LLM_RETRIES)?;
        within(
            "llmRetryDelayMs",
            self.llm_retry_delay_ms,
            LLM_RETRY_DELAY_MS,
        )?;
        within(
            "toolExecutionTimeout",
            self.tool_execution_timeout,
            TIMEOUT_MS,
        )?;
        within("permissionTimeout", self.permission_timeout, TIMEOUT_MS)?;
        within(
            "maxBackgroundDrainRounds",
            self.max_background_drain_rounds,
            DRAIN_ROUNDS,
        )?;
        within("maxHistory", self.max_history, MAX_HISTORY)?;
        within(
            "subAgentMaxIterations",
            self.sub_agent_max_iterations,
            ITERATIONS,
        )?;
        within("maxTotalTokens", self.max_total_tokens, TOKEN_BUDGET)?;
        within("maxSessionTokens", self.max_session_tokens, TOKEN_BUDGET)?;
        within(
            "maxCostUsd",
            self.max_cost_usd,
            (0.0, crate::budget::MAX_BUDGET_USD),
        )?;
        Ok(())
    }

    /// The object with canonical key names and only the keys that are set.
    pub fn to_json(&self) -> Value {
        // Serializing plain numbers, strings and maps cannot fail; the fallback is never taken.
        serde_json::to_value(self).unwrap_or_else(|_| Value::Object(Default::default()))
    }

    /// These settings with `base`'s for every key they leave unset (a prompt's over its
    /// session's). A key replaces the base's whole value: shellEnv and enabledTools are not
    /// merged entry by entry.
    pub fn over(self, base: &EngineConfig) -> EngineConfig {
        // Destructured so that a new field cannot be forgotten here.
        let EngineConfig {
            max_iterations,
            temperature,
            max_tokens,
            tool_result_max_chars,
            max_llm_retries,
            llm_retry_delay_ms,
            tool_execution_timeout,
            permission_timeout,
            max_background_drain_rounds,
            max_history,
            thinking_level,
            enabled_tools,
            sub_agent_model,
            sub_agent_max_iterations,
            shell_network,
            shell_env,
            mcp_config,
            cli_args,
            channel_permissions,
            max_total_tokens,
            max_session_tokens,
            max_cost_usd,
            skills,
            provider_env,
            use_extended_context,
            search_orchestration,
            native_search_enabled,
            acp_agent,
            notify_url,
            workflow,
        } = self;
        EngineConfig {
            max_iterations: max_iterations.or(base.max_iterations),
            temperature: temperature.or(base.temperature),
            max_tokens: max_tokens.or(base.max_tokens),
            tool_result_max_chars: tool_result_max_chars.or(base.tool_result_max_chars),
            max_llm_retries: max_llm_retries.or(base.max_llm_retries),
            llm_retry_delay_ms: llm_retry_delay_ms.or(base.llm_retry_delay_ms),
            tool_execution_timeout: tool_execution_timeout.or(base.tool_execution_timeout),
            permission_timeout: permission_timeout.or(base.permission_timeout),
            max_background_drain_rounds: max_background_drain_rounds
                .or(base.max_background_drain_rounds),
            max_history: max_history.or(base.max_history),
            thinking_level: thinking_level.or(base.thinking_level),
            enabled_tools: enabled_tools.or_else(|| base.enabled_tools.clone()),
            sub_agent_model: sub_agent_model.or_else(|| base.sub_agent_model.clone()),
            sub_agent_max_iterations: sub_agent_max_iterations.or(base.sub_agent_max_iterations),
            shell_network: shell_network.or(base.shell_network),
            shell_env: shell_env.or_else(|| base.shell_env.clone()),
            mcp_config: mcp_config.or_else(|| base.mcp_config.clone()),
            cli_args: cli_args.or_else(|| base.cli_args.clone()),
            channel_permissions: channel_permissions.or(base.channel_permissions),
            max_total_tokens: max_total_tokens.or(base.max_total_tokens),
            max_session_tokens: max_session_tokens.or(base.max_session_tokens),
            max_cost_usd: max_cost_usd.or(base.max_cost_usd),
            skills: skills.or_else(|| base.skills.clone()),
            provider_env: provider_env.or_else(|| base.provider_env.clone()),
            use_extended_context: use_extended_context.or(base.use_extended_context),
            search_orchestration: search_orchestration.or(base.search_orchestration),
            native_search_enabled: native_search_enabled.or(base.native_search_enabled),
            acp_agent: acp_agent.or_else(|| base.acp_agent.clone()),
            notify_url: notify_url.or_else(|| base.notify_url.clone()),
            workflow: workflow.or_else(|| base.workflow.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(v: Value) -> String {
        EngineConfig::from_json(&v).unwrap_err().to_string()
    }

    #[test]
    fn aliases_and_canonical_names_parse_to_the_same_settings() {
        let old = EngineConfig::from_json(&json!({"maxTurns": 5, "tools": ["grep"],
            "toolTimeoutMs": 10, "permissionTimeoutMs": 20}))
        .unwrap();
        let new = EngineConfig::from_json(&json!({"maxIterations": 5, "enabledTools": ["grep"],
            "toolExecutionTimeout": 10, "permissionTimeout": 20}))
        .unwrap();
        assert_eq!(old, new);
        assert_eq!(
            new.to_json(),
            json!({"maxIterations": 5, "enabledTools": ["grep"], "toolExecutionTimeout": 10,
                   "permissionTimeout": 20})
        );
        assert_eq!(EngineConfig::from_json(&new.to_json()).unwrap(), new);
    }

    #[test]
    fn a_wrong_type_names_the_field() {
        assert_eq!(
            err(json!({"maxIterations": "5"})),
            r#"engineConfig.maxIterations: invalid type: string "5", expected u32"#
        );
        assert_eq!(
            err(json!({"maxTurns": -1})),
            "engineConfig.maxTurns: invalid value: integer `-1`, expected u32"
        );
        assert_eq!(
            err(json!({"shellEnv": {"A": 1}})),
            "engineConfig.shellEnv.A: invalid type: integer `1`, expected a string"
        );
        assert!(err(json!({"thinkingLevel": "huge"})).starts_with(
            "engineConfig.thinkingLevel: unknown variant `huge`, expected one of `none`"
        ));
    }

    #[test]
    fn both_names_of_one_key_are_refused() {
        let e = err(json!({"maxIterations": 3, "maxTurns": 4}));
        assert!(e.contains("duplicate field `maxIterations`"), "{e}");
    }

    #[test]
    fn an_unknown_key_is_refused_by_name() {
        let e = err(json!({"maxIteration": 3}));
        assert!(
            e.starts_with(
                "engineConfig.maxIteration: unknown field `maxIteration`, expected one of `maxIterations`, `maxTurns`,"
            ),
            "{e}"
        );
    }

    #[test]
    fn numbers_outside_their_bounds_are_refused_by_name() {
        assert_eq!(
            err(json!({"permissionTimeout": 9_223_372_036_854_775_807_u64})),
            "engineConfig.permissionTimeout: 9223372036854775807 is outside 1..=604800000"
        );
        assert_eq!(
            err(json!({"maxIterations": 0})),
            "engineConfig.maxIterations: 0 is outside 1..=10000"
        );
        assert!(err(json!({"temperature": 7.5})).starts_with("engineConfig.temperature: 7.5"));
        assert!(err(json!({"maxLlmRetries": 11})).starts_with("engineConfig.maxLlmRetries"));
        let edges = EngineConfig::from_json(&json!({"maxIterations": 10_000, "temperature": 0.0,
            "toolExecutionTimeout": 604_800_000_u64, "maxBackgroundDrainRounds": 0}));
        assert!(edges.is_ok(), "{edges:?}");
    }

    #[test]
    fn channel_user_permissions_is_channel_permissions() {
        let a = EngineConfig::from_json(&json!({"channelUserPermissions": {"canUseTool": false}}))
            .unwrap();
        let b =
            EngineConfig::from_json(&json!({"channelPermissions": {"canUseTool": false}})).unwrap();
        assert_eq!(a, b);
        assert_eq!(
            a.to_json(),
            json!({"channelPermissions": {"canUseTool": false, "requireConfirmation": false}})
        );
        let e = err(json!({"channelPermissions": {"canUseTools": false}}));
        assert!(e.contains("unknown field `canUseTools`"), "{e}");
    }

    #[test]
    fn a_prompt_overrides_its_session_key_by_key() {
        let session = EngineConfig::from_json(&json!({"maxTurns": 5, "temperature": 0.5,
            "shellEnv": {"A": "1"}}))
        .unwrap();
        let prompt =
            EngineConfig::from_json(&json!({"maxIterations": 2, "shellEnv": {"B": "2"}})).unwrap();
        let m = prompt.over(&session);
        assert_eq!(m.max_iterations, Some(2));
        assert_eq!(m.temperature, Some(0.5));
        assert_eq!(
            m.shell_env,
            Some(BTreeMap::from([("B".to_string(), "2".to_string())]))
        );
    }
}
