//! The `[workflows]`, `[webhooks]` (and its targets), `[workflow_hooks.NAME]` and `[agents.NAME]`
//! sections of the configuration.

use super::{Config, ConfigError};
use serde::Deserialize;

/// `[workflows]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkflowsConfig {
    /// A folder of definitions (`*.yaml`, `*.yml`, `*.json`) stored at start (docs/workflows.md,
    /// "Definitions from files").
    pub dir: Option<std::path::PathBuf>,
    /// The instructions one render of a template may run (docs/workflows.md, "Limits").
    pub template_fuel: u64,
    /// The bytes one render may write, and a step's output may hold (docs/workflows.md,
    /// "Limits").
    pub max_output_bytes: usize,
}

impl Default for WorkflowsConfig {
    fn default() -> Self {
        let limits = elfgate_workflow::template::Limits::default();
        WorkflowsConfig {
            dir: None,
            template_fuel: limits.fuel,
            max_output_bytes: limits.output_bytes,
        }
    }
}

impl WorkflowsConfig {
    /// The limits of a template's render are positive.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        for (key, value) in [
            ("template_fuel", self.template_fuel),
            ("max_output_bytes", self.max_output_bytes as u64),
        ] {
            if value == 0 {
                return Err(ConfigError::Invalid(format!("workflows.{key}: at least 1")));
            }
        }
        Ok(())
    }

    /// The limits of a template's render.
    pub fn template_limits(&self) -> elfgate_workflow::template::Limits {
        elfgate_workflow::template::Limits {
            fuel: self.template_fuel,
            output_bytes: self.max_output_bytes,
        }
    }
}

/// `[webhooks]`: a signed POST to each matching target when a run ends (docs/workflows.md,
/// "Webhooks when runs end").
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebhooksConfig {
    /// Attempts of a delivery before it is given up (at least 1).
    pub max_attempts: u32,
    /// Milliseconds before the first retry; doubled for each next one, with up to a quarter
    /// more at random (jitter).
    pub backoff_ms: u64,
    /// The longest wait between two attempts, in milliseconds.
    pub max_backoff_ms: u64,
    /// Seconds an attempt may take.
    pub timeout_secs: u64,
    /// Deliveries that may wait at once for one target; past it that target misses a run's end
    /// (logged), the others do not.
    pub max_pending: u32,
    /// Allow targets at loopback, private and other non-public addresses (as web_fetch's).
    pub allow_private_addresses: bool,
    /// The targets.
    pub targets: Vec<WebhookTarget>,
    /// The variable holding the secret that signs the POSTs to sessions' own `notifyUrl`
    /// (unset: sessions cannot set one).
    pub notify_secret_env: Option<String>,
}

impl Default for WebhooksConfig {
    fn default() -> Self {
        WebhooksConfig {
            max_attempts: 8,
            backoff_ms: 1000,
            max_backoff_ms: 300_000,
            timeout_secs: 10,
            max_pending: 10_000,
            allow_private_addresses: false,
            targets: Vec::new(),
            notify_secret_env: None,
        }
    }
}

/// `[[webhooks.targets]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookTarget {
    /// Its name, in the deliveries' records.
    pub name: String,
    /// Where the POST goes (http or https).
    pub url: String,
    /// The variable holding the secret the body is signed with.
    pub secret_env: String,
    /// The engines whose runs it hears of (absent: all).
    #[serde(default)]
    pub engines: Option<Vec<elfgate_core::EngineType>>,
    /// The finish reasons it hears of (absent: all).
    #[serde(default)]
    pub finish_reasons: Option<Vec<elfgate_core::FinishReason>>,
}

/// `[workflow_hooks.NAME]`: an inbound webhook. `POST /v1/hooks/NAME` with a body signed by
/// HMAC-SHA256 under the secret starts a run of the workflow, the body as its `payload` input
/// (docs/workflows.md, "Inbound webhooks").
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkflowHook {
    /// The workflow a delivery runs (its latest version).
    pub workflow: String,
    /// The variable holding the shared secret (never the secret itself in the file).
    pub secret_env: String,
    /// Also take a signature of the body alone (`X-Elfgate-Signature-256`, GitHub's
    /// `X-Hub-Signature-256`), which a captured delivery replays for ever (docs/security.md,
    /// "Webhooks").
    #[serde(default)]
    pub allow_replayable_signature: bool,
}

/// `[agents.NAME]`: a named agent profile. A session that names it with `agentId` starts with
/// these settings wherever its own request is silent (docs/api.md, "Agent profiles").
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentProfile {
    /// The system prompt.
    pub system_prompt: Option<String>,
    /// The provider.
    pub provider: Option<String>,
    /// The model.
    pub model: Option<String>,
    /// The permission mode.
    pub permission_mode: Option<elfgate_core::PermissionMode>,
    /// The tools offered (engineConfig enabledTools).
    pub tools: Option<Vec<String>>,
    /// The skills offered (engineConfig skills).
    pub skills: Option<Vec<String>>,
    /// Any other engineConfig keys, camelCase as in the API.
    pub engine_config: Option<serde_json::Map<String, serde_json::Value>>,
}

impl WebhooksConfig {
    /// Whether a run's end can give a delivery: a target is configured, or a session may name
    /// a `notifyUrl` (which needs the secret to sign it). When not, run ends are not written to
    /// the store's outbox at all.
    pub fn delivers_run_ends(&self) -> bool {
        !self.targets.is_empty() || self.notify_secret_env.is_some()
    }
}

impl AgentProfile {
    /// The profile's engineConfig: its own keys with tools and skills in it.
    pub fn engine_config(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut cfg = self.engine_config.clone().unwrap_or_default();
        if let Some(tools) = &self.tools {
            cfg.insert("enabledTools".into(), serde_json::json!(tools));
        }
        if let Some(skills) = &self.skills {
            cfg.insert("skills".into(), serde_json::json!(skills));
        }
        cfg
    }
}

impl Config {
    /// The webhooks' limits are positive, every signing secret set is not blank, and the
    /// targets have distinct names and http(s) URLs.
    pub(super) fn check_webhooks(&self) -> Result<(), ConfigError> {
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

    /// Each agent profile names a configured provider and an engineConfig that parses.
    pub(super) fn check_agents(&self) -> Result<(), ConfigError> {
        for (name, profile) in &self.agents {
            self.check_agent(name, profile)?;
        }
        Ok(())
    }

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
}
