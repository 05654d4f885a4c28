//! A Responses caller's built-in tools (`web_search`, `file_search`, `code_interpreter`, …)
//! against the route. A built-in tool is offered to the model where the route can serve it and
//! left out where it cannot, with a notice (the answer's [`OMITTED_TOOLS_HEADER`] and a log
//! line): a client such as codex sends its built-in tools with every request whether or not the
//! model is meant to use them, so a tool the route lacks never fails the request.
//!
//! `web_search` is served as the provider's `builtin_web_search` says (`Config::
//! builtin_web_search`): by the provider itself (`native`), by the daemon's own search backend
//! (`local`: the model gets a function tool of that name whose calls the run answers itself), or
//! not at all (`omit`). A Responses provider gets its other built-in tools as given; other kinds
//! have none, and an engine route runs its own tools.

use super::responses_in::ResponsesInbound;
use super::route::Route;
use crate::config::BuiltinWebSearch;
use crate::state::AppState;
use axum::http::HeaderValue;
use axum::response::Response;
use elfgate_engines::chat::{SERVED_SEARCH, served_search_spec};
use elfgate_llm::ProviderKind;
use serde_json::{Value, json};

/// The answer's header naming the built-in tools left out of the request, comma-separated.
pub const OMITTED_TOOLS_HEADER: &str = "x-elfgate-omitted-tools";

/// The built-in tools that mean "search the web".
const WEB_SEARCH: [&str; 2] = ["web_search", "web_search_preview"];

/// Whether a raw Responses tool is a built-in web search.
fn is_web_search(tool: &Value) -> bool {
    tool.get("type")
        .and_then(Value::as_str)
        .is_some_and(|t| WEB_SEARCH.contains(&t))
}

/// Serves or leaves out each of the request's built-in tools on `route`; the names of those
/// left out (each once, in the request's order), which the answer's header and the log name.
pub fn apply(state: &AppState, route: &Route, r: &mut ResponsesInbound) -> Vec<String> {
    let mut omitted: Vec<String> = Vec::new();
    if r.builtin_tools.is_empty() {
        return omitted;
    }
    let provider = match route {
        Route::Provider { provider, .. } => state
            .providers
            .resolve(Some(provider))
            .ok()
            .map(|(name, p)| (name, p.kind())),
        Route::Engine { .. } => None,
    };
    let (why, kind) = match provider {
        None => {
            omitted.clone_from(&r.builtin_tools);
            ("an engine route runs its own tools".to_string(), None)
        }
        Some((name, kind)) => {
            let search = offer_web_search(state, &name, kind, r);
            if !search.served {
                omitted.extend(
                    r.builtin_tools
                        .iter()
                        .filter(|t| WEB_SEARCH.contains(&t.as_str()))
                        .cloned(),
                );
            }
            if kind != ProviderKind::OpenaiResponses {
                // Only a Responses provider has the other built-in tools.
                omitted.extend(
                    r.builtin_tools
                        .iter()
                        .filter(|t| !WEB_SEARCH.contains(&t.as_str()))
                        .cloned(),
                );
            }
            (
                format!("provider '{name}' ({kind}){}", search.why),
                Some(kind),
            )
        }
    };
    let mut seen = std::collections::HashSet::new();
    omitted.retain(|t| seen.insert(t.clone()));
    if !omitted.is_empty() {
        tracing::info!(
            model = %r.inbound.model,
            tools = %omitted.join(", "),
            provider_kind = kind.map(|k| k.to_string()).unwrap_or_default(),
            "built-in tools left out of a gateway request: {why}"
        );
    }
    omitted
}

/// How the request's `web_search` (if any) is offered on the provider.
struct SearchOffer {
    /// Whether the model gets a web search (the provider's or the daemon's).
    served: bool,
    /// Why not, for the log: empty when it is.
    why: String,
}

/// Offers the request's built-in `web_search` on provider `name` as its `builtin_web_search`
/// says, and hands a Responses provider its other built-in tools as given.
fn offer_web_search(
    state: &AppState,
    name: &str,
    kind: ProviderKind,
    r: &mut ResponsesInbound,
) -> SearchOffer {
    let wanted = r
        .builtin_tools
        .iter()
        .any(|t| WEB_SEARCH.contains(&t.as_str()));
    let mode = state.config.builtin_web_search(name, kind);
    // A function tool of the caller's by that name is the caller's to run: the daemon's search
    // is not put in its place.
    let shadowed = r
        .inbound
        .request
        .tools
        .iter()
        .any(|t| t.name == SERVED_SEARCH);
    let (served, why) = match mode {
        _ if !wanted => (false, String::new()),
        BuiltinWebSearch::Native => (true, String::new()),
        BuiltinWebSearch::Local if shadowed => (
            false,
            format!(": the request has a function tool named {SERVED_SEARCH} of its own"),
        ),
        BuiltinWebSearch::Local => (true, String::new()),
        BuiltinWebSearch::Omit if state.config.tools.web_search.is_none() => (
            false,
            ": it cannot search itself and no search backend is configured ([tools.web_search])"
                .to_string(),
        ),
        BuiltinWebSearch::Omit => (false, ": builtin_web_search = \"omit\"".to_string()),
    };
    let local = wanted && served && mode == BuiltinWebSearch::Local;
    if kind == ProviderKind::OpenaiResponses {
        if let Some(Value::Array(mut tools)) = r.raw_tools.clone() {
            if mode != BuiltinWebSearch::Native {
                tools.retain(|t| !is_web_search(t));
            }
            if local {
                let spec = served_search_spec();
                tools.push(json!({"type": "function", "name": spec.name,
                                  "description": spec.description,
                                  "parameters": spec.input_schema}));
            }
            let mut fields = serde_json::Map::new();
            fields.insert("tools".into(), Value::Array(tools));
            r.inbound.request.passthrough = Some((ProviderKind::OpenaiResponses, fields));
        }
    } else if wanted && served && mode == BuiltinWebSearch::Native {
        r.inbound.request.native_search = true;
    }
    if local {
        r.inbound.request.tools.push(served_search_spec());
        r.inbound.served_search = true;
    }
    SearchOffer {
        served: wanted && served,
        why,
    }
}

/// The answer with the notice of the built-in tools the request's route left out, if any.
pub fn with_notice(mut resp: Response, omitted: &[String]) -> Response {
    if !omitted.is_empty()
        && let Ok(v) = HeaderValue::from_str(&omitted.join(", "))
    {
        resp.headers_mut().insert(OMITTED_TOOLS_HEADER, v);
    }
    resp
}
