//! `[providers.NAME]`, `[defaults]` and `[aliases]`: the model providers, the one a session gets
//! when it names none, and the gateway's model names for them.

use super::{Config, ConfigError};
use elfgate_llm::ProviderKind;
use serde::Deserialize;

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
    /// The models' price in US dollars per million prompt tokens read from the provider's
    /// prompt cache (absent: the input price).
    #[serde(default)]
    pub cache_read_usd_per_mtok: Option<f64>,
    /// The models' price in US dollars per million prompt tokens written to the provider's
    /// prompt cache (absent: the input price).
    #[serde(default)]
    pub cache_write_usd_per_mtok: Option<f64>,
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

impl Config {
    /// The models a route can reach that have no prices, as `PROVIDER/MODEL`: of each provider
    /// without prices of its own, its default model, its `models."…"` tables and the aliases'
    /// routes to it that set none, and `PROVIDER/*` for its other models. Their calls have no cost.
    pub fn unpriced_models(&self) -> Vec<String> {
        let mut unpriced = std::collections::BTreeSet::new();
        for (name, p) in &self.providers {
            // Input and output go together (checked at load): a provider's input price prices
            // every model of it.
            if p.input_usd_per_mtok.is_some() {
                continue;
            }
            let aliased = self
                .aliases
                .values()
                .flat_map(AliasTarget::routes)
                .filter_map(|r| {
                    r.split_once('/')
                        .filter(|(provider, _)| provider == name)
                        .map(|(_, model)| model.to_string())
                });
            let named = p
                .default_model
                .iter()
                .cloned()
                .chain(p.models.keys().cloned())
                .chain(aliased);
            for model in named {
                let priced = p
                    .models
                    .get(&model)
                    .is_some_and(|l| l.input_usd_per_mtok.is_some());
                if !priced {
                    unpriced.insert(format!("{name}/{model}"));
                }
            }
            unpriced.insert(format!("{name}/*"));
        }
        unpriced.into_iter().collect()
    }

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

    /// The default provider is configured, and each provider's prices, search mode and URL
    /// can be used; each alias can work as written.
    pub(super) fn check_providers(&self) -> Result<(), ConfigError> {
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
            check_prices(name, p)?;
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
        Ok(())
    }

    /// An alias must be able to work as written: each route a `PROVIDER/MODEL` of a configured
    /// provider or an `elfgate:ENGINE[:PROVIDER/MODEL]` of a known engine, never another alias
    /// (routes do not nest, so a self-reference or a cycle could only fail at request time),
    /// and a chain made of provider routes only (an engine's run is not one call to fall back
    /// from, and its fallbacks would be dropped unseen).
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

/// Each price of provider `name` is a finite number of dollars, 0 or more, and each model's
/// prices (the provider's, with a model's own over them) are whole: input and output both set
/// or neither (a model without prices has no cost), and a cache price only beside them.
fn check_prices(name: &str, p: &ProviderConfigSection) -> Result<(), ConfigError> {
    let own = elfgate_engines::ModelLimits {
        input_usd_per_mtok: p.input_usd_per_mtok,
        output_usd_per_mtok: p.output_usd_per_mtok,
        cache_read_usd_per_mtok: p.cache_read_usd_per_mtok,
        cache_write_usd_per_mtok: p.cache_write_usd_per_mtok,
        ..Default::default()
    };
    let models = p
        .models
        .iter()
        .map(|(m, l)| (format!(".models.\"{m}\""), l.clone()));
    for (at, limits) in std::iter::once((String::new(), own.clone())).chain(models) {
        for (key, v) in [
            ("input_usd_per_mtok", limits.input_usd_per_mtok),
            ("output_usd_per_mtok", limits.output_usd_per_mtok),
            ("cache_read_usd_per_mtok", limits.cache_read_usd_per_mtok),
            ("cache_write_usd_per_mtok", limits.cache_write_usd_per_mtok),
        ] {
            if v.is_some_and(|v| !(v.is_finite() && v >= 0.0)) {
                return Err(ConfigError::Invalid(format!(
                    "providers.{name}{at}.{key} must be a finite number of dollars, 0 or more"
                )));
            }
        }
        let merged = own.overridden_by(&limits);
        let input = merged.input_usd_per_mtok.is_some();
        let output = merged.output_usd_per_mtok.is_some();
        if input != output {
            return Err(ConfigError::Invalid(format!(
                "providers.{name}{at}: input_usd_per_mtok and output_usd_per_mtok go together \
                 (set both, or neither for an unpriced model)"
            )));
        }
        let cached =
            merged.cache_read_usd_per_mtok.is_some() || merged.cache_write_usd_per_mtok.is_some();
        if cached && !input {
            return Err(ConfigError::Invalid(format!(
                "providers.{name}{at}: a cache price needs input_usd_per_mtok and \
                 output_usd_per_mtok"
            )));
        }
    }
    Ok(())
}
