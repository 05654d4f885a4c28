//! The configured LLM providers, by name.

use elfgate_llm::LlmProvider;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A provider name that is not configured, or no provider at all.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ResolveError {
    /// The named provider is not configured.
    #[error("unknown provider '{0}'")]
    UnknownProvider(String),
    /// No provider was named and there is no default.
    #[error("no provider given and no default provider configured")]
    NoDefault,
}

/// A model's context window, as configured (`[providers.NAME]` and its `models."MODEL"`).
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelLimits {
    /// Tokens the model reads at most (prompt and answer together).
    pub context_window_tokens: Option<u64>,
    /// Tokens of the window kept free for the answer.
    pub reserve_output_tokens: Option<u64>,
    /// The larger window the model has when a session asks for it (engineConfig
    /// useExtendedContext), e.g. 1,000,000 for Claude Sonnet 4 with Anthropic's context-1m beta.
    pub extended_context_window_tokens: Option<u64>,
    /// What the model costs, in US dollars per million input tokens (a turn's costUsd).
    pub input_usd_per_mtok: Option<f64>,
    /// What the model costs, in US dollars per million output tokens.
    pub output_usd_per_mtok: Option<f64>,
    /// What the model costs, in US dollars per million prompt tokens read from the provider's
    /// prompt cache (absent: the input price).
    pub cache_read_usd_per_mtok: Option<f64>,
    /// What the model costs, in US dollars per million prompt tokens written to the provider's
    /// prompt cache (absent: the input price).
    pub cache_write_usd_per_mtok: Option<f64>,
}

impl ModelLimits {
    /// These limits, with `over`'s keys replacing them where `over` sets them.
    pub fn overridden_by(&self, over: &ModelLimits) -> ModelLimits {
        ModelLimits {
            context_window_tokens: over.context_window_tokens.or(self.context_window_tokens),
            reserve_output_tokens: over.reserve_output_tokens.or(self.reserve_output_tokens),
            extended_context_window_tokens: over
                .extended_context_window_tokens
                .or(self.extended_context_window_tokens),
            input_usd_per_mtok: over.input_usd_per_mtok.or(self.input_usd_per_mtok),
            output_usd_per_mtok: over.output_usd_per_mtok.or(self.output_usd_per_mtok),
            cache_read_usd_per_mtok: over
                .cache_read_usd_per_mtok
                .or(self.cache_read_usd_per_mtok),
            cache_write_usd_per_mtok: over
                .cache_write_usd_per_mtok
                .or(self.cache_write_usd_per_mtok),
        }
    }

    /// The model's prices: None unless both its input and output prices are configured (a model
    /// without prices has no cost).
    pub fn prices(&self) -> Option<elfgate_core::Prices> {
        Some(elfgate_core::Prices {
            input_usd_per_mtok: self.input_usd_per_mtok?,
            output_usd_per_mtok: self.output_usd_per_mtok?,
            cache_read_usd_per_mtok: self.cache_read_usd_per_mtok,
            cache_write_usd_per_mtok: self.cache_write_usd_per_mtok,
        })
    }
}

/// A provider's limits: its own, and per model.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContextLimits {
    /// For every model of the provider.
    pub provider: ModelLimits,
    /// Per model name, over the provider's.
    pub models: BTreeMap<String, ModelLimits>,
}

/// Providers by name, with the default used when a session names none.
#[derive(Clone, Default)]
pub struct ProviderRegistry {
    providers: BTreeMap<String, Arc<dyn LlmProvider>>,
    limits: BTreeMap<String, ContextLimits>,
    default: Option<String>,
}

impl std::fmt::Debug for ProviderRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderRegistry")
            .field("providers", &self.providers.keys().collect::<Vec<_>>())
            .field("default", &self.default)
            .finish()
    }
}

impl ProviderRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a provider under a name.
    pub fn insert(&mut self, name: impl Into<String>, provider: Arc<dyn LlmProvider>) {
        self.providers.insert(name.into(), provider);
    }

    /// Sets a provider's context limits.
    pub fn set_limits(&mut self, name: impl Into<String>, limits: ContextLimits) {
        self.limits.insert(name.into(), limits);
    }

    /// The limits that apply to `model` of provider `name` (empty when none are configured).
    pub fn limits(&self, name: &str, model: &str) -> ModelLimits {
        let Some(l) = self.limits.get(name) else {
            return ModelLimits::default();
        };
        match l.models.get(model) {
            Some(m) => l.provider.overridden_by(m),
            None => l.provider.clone(),
        }
    }

    /// The prices of `model` of provider `name` (None: unpriced).
    pub fn prices(&self, name: &str, model: &str) -> Option<elfgate_core::Prices> {
        self.limits(name, model).prices()
    }

    /// Sets the default provider's name.
    pub fn set_default(&mut self, name: Option<String>) {
        self.default = name;
    }

    /// The provider named `name`, or the default one.
    pub fn resolve(
        &self,
        name: Option<&str>,
    ) -> Result<(String, Arc<dyn LlmProvider>), ResolveError> {
        let name = match name {
            Some(n) => n.to_string(),
            None => self.default.clone().ok_or(ResolveError::NoDefault)?,
        };
        self.providers
            .get(&name)
            .map(|p| (name.clone(), p.clone()))
            .ok_or(ResolveError::UnknownProvider(name))
    }

    /// The configured names.
    pub fn names(&self) -> Vec<String> {
        self.providers.keys().cloned().collect()
    }
}
