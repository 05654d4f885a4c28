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

/// Providers by name, with the default used when a session names none.
#[derive(Clone, Default)]
pub struct ProviderRegistry {
    providers: BTreeMap<String, Arc<dyn LlmProvider>>,
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
