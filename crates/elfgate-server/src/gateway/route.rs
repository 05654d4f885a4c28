//! Which route a front door's `model` names: `PROVIDER/MODEL`, an alias from `[aliases]`, or
//! `elfgate:ENGINE[:PROVIDER/MODEL]`.

use crate::error::ApiError;
use crate::state::AppState;
use elfgate_core::EngineType;

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Straight to a provider: the caller's whole request is sent (chat engine, one turn).
    Provider {
        /// The configured provider.
        provider: String,
        /// The model, as the provider names it.
        model: String,
        /// The rest of an alias's chain: (provider, model) tried in order when the routes
        /// before failed before their first token.
        fallbacks: Vec<(String, String)>,
    },
    /// An engine runs the last user message as its prompt; only its text comes back.
    Engine {
        /// The engine.
        engine: EngineType,
        /// The provider, when named.
        provider: Option<String>,
        /// The model, when named.
        model: Option<String>,
    },
}

impl Route {
    /// The provider named by the route, if any.
    pub fn provider(&self) -> Option<&str> {
        match self {
            Route::Provider { provider, .. } => Some(provider),
            Route::Engine { provider, .. } => provider.as_deref(),
        }
    }
}

/// The prefix of an engine route.
pub const ENGINE_PREFIX: &str = "elfgate:";

/// Resolves `model` to a route.
pub fn resolve(state: &AppState, model: &str) -> Result<Route, ApiError> {
    let Some(target) = state.config.aliases.get(model) else {
        return resolve_plain(state, model);
    };
    let routes = target.routes();
    let mut chain = routes.iter();
    let first = resolve_plain(state, chain.next().map_or("", String::as_str))?;
    match first {
        Route::Provider {
            provider, model, ..
        } => {
            // Only provider routes can follow: an engine's run is not one call to switch.
            let mut fallbacks = Vec::new();
            for r in chain {
                match resolve_plain(state, r)? {
                    Route::Provider {
                        provider, model, ..
                    } => fallbacks.push((provider, model)),
                    Route::Engine { .. } => {
                        return Err(ApiError::unknown_model(
                            r,
                            "an alias's fallback routes must be PROVIDER/MODEL",
                        ));
                    }
                }
            }
            Ok(Route::Provider {
                provider,
                model,
                fallbacks,
            })
        }
        engine => Ok(engine),
    }
}

fn resolve_plain(state: &AppState, model: &str) -> Result<Route, ApiError> {
    if let Some(rest) = model.strip_prefix(ENGINE_PREFIX) {
        let (engine, target) = match rest.split_once(':') {
            Some((e, t)) => (e, Some(t)),
            None => (rest, None),
        };
        let engine: EngineType =
            engine
                .parse()
                .map_err(|e: elfgate_core::engine_type::UnknownEngine| {
                    ApiError::unknown_model(model, &e.to_string())
                })?;
        if !state.dispatcher.has_engine(engine) {
            return Err(ApiError::unknown_model(
                model,
                &format!("engine '{engine}' is not available in this build"),
            ));
        }
        let (provider, model_name) = match target {
            None | Some("") => (None, None),
            Some(t) => {
                let (p, m) = provider_model(state, model, t)?;
                (Some(p), Some(m))
            }
        };
        return Ok(Route::Engine {
            engine,
            provider,
            model: model_name,
        });
    }
    let (provider, model_name) = provider_model(state, model, model)?;
    Ok(Route::Provider {
        provider,
        model: model_name,
        fallbacks: Vec::new(),
    })
}

/// Splits `PROVIDER/MODEL` (the model may hold more slashes) and checks the provider.
fn provider_model(
    state: &AppState,
    whole: &str,
    target: &str,
) -> Result<(String, String), ApiError> {
    let Some((provider, model)) = target.split_once('/') else {
        return Err(ApiError::unknown_model(
            whole,
            "name a configured provider and its model as PROVIDER/MODEL, an alias, or \
             elfgate:ENGINE (see GET /v1/models)",
        ));
    };
    if state.providers.resolve(Some(provider)).is_err() {
        return Err(ApiError::unknown_model(
            whole,
            &format!("'{provider}' is not a configured provider"),
        ));
    }
    if model.is_empty() {
        return Err(ApiError::unknown_model(whole, "the model name is empty"));
    }
    Ok((provider.to_string(), model.to_string()))
}
