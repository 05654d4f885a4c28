//! `[engines.*]` and `[tools]`: the engines' settings and the tools that need the operator's setup.

use super::{Config, ConfigError};
use serde::Deserialize;

/// `[tools]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsConfig {
    /// `[tools.web_search]`: the web_search tool's backend; absent, there is no such tool.
    #[serde(default)]
    pub web_search: Option<elfgate_tools::search::WebSearchConfig>,
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

    /// TinyElf's settings and the cli engine's, with the providers it is pointed at, can be used.
    pub(super) fn check(&self, config: &Config) -> Result<(), ConfigError> {
        self.tinyelf
            .validate()
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        self.cli_config(config)
            .validate()
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        Ok(())
    }
}
