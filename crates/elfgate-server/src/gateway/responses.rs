//! The Responses door's own steps between parsing and running: built-in tools checked against
//! the route's provider, and `previous_response_id` served from the stored session.

use super::responses_in::ResponsesInbound;
use super::route::Route;
use crate::error::ApiError;
use crate::state::AppState;
use elfgate_core::{ContentBlock, Role, RunId, SessionId};
use elfgate_llm::{LlmMessage, ProviderKind};

/// The built-in tools that mean "search the web", which other kinds' native search serves.
const WEB_SEARCH: [&str; 2] = ["web_search", "web_search_preview"];

/// The id of the response a run of a session gives: both ids, so that a later request's
/// `previous_response_id` finds the run without a lookup table.
pub fn response_id(session_id: SessionId, run_id: RunId) -> String {
    format!("resp_{session_id}_{run_id}")
}

/// The session and run a response id names.
fn parse_response_id(id: &str) -> Option<(SessionId, RunId)> {
    let (session, run) = id.strip_prefix("resp_")?.split_once('_')?;
    Some((
        crate::service::parse_session_id(session).ok()?,
        run.parse().ok()?,
    ))
}

/// Checks the request's built-in tools against the route: a Responses provider gets the
/// caller's `tools` as given (its built-in tools included); `web_search` on a provider kind that
/// searches itself becomes its native search; anything else is refused, naming the tool.
pub fn apply_builtin_tools(
    state: &AppState,
    route: &Route,
    r: &mut ResponsesInbound,
) -> Result<(), ApiError> {
    if r.builtin_tools.is_empty() {
        return Ok(());
    }
    let provider = match route {
        Route::Provider { provider, .. } => state
            .providers
            .resolve(Some(provider))
            .ok()
            .map(|(name, p)| (name, p.kind())),
        Route::Engine { .. } => None,
    };
    if let Some((_, ProviderKind::OpenaiResponses)) = provider
        && let Some(tools) = r.raw_tools.clone()
    {
        let mut fields = serde_json::Map::new();
        fields.insert("tools".into(), tools);
        r.inbound.request.passthrough = Some((ProviderKind::OpenaiResponses, fields));
        return Ok(());
    }
    for t in &r.builtin_tools {
        match provider {
            Some((_, kind)) if WEB_SEARCH.contains(&t.as_str()) && kind.searches_natively() => {
                r.inbound.request.native_search = true;
            }
            _ => {
                let on = match &provider {
                    Some((name, kind)) => format!("provider '{name}' ({kind})"),
                    None => "an engine route (the engine runs its own tools)".to_string(),
                };
                return Err(ApiError::invalid(
                    Some("tools".to_string()),
                    format!(
                        "'tools': the built-in tool '{t}' is not available on {on}; only \
                         function tools are (and web_search on openai-responses, anthropic and \
                         gemini providers)"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// With `previous_response_id`: the stored conversation up to that response goes before the
/// request's input, the call continues that response's session, and the new input is what the
/// session stores for the call. Returns the session to continue.
pub async fn continue_previous(
    state: &AppState,
    r: &mut ResponsesInbound,
) -> Result<Option<SessionId>, ApiError> {
    let Some(prev) = r.previous_response_id.clone() else {
        if r.input_is_new_turn {
            r.inbound.stored_input = stored_input(&r.inbound.request.messages);
        }
        return Ok(None);
    };
    let unknown = || {
        ApiError::NotFound(format!(
            "previous_response_id: no stored response '{prev}' (a response made with store: \
             false is not kept)"
        ))
    };
    let (session_id, run_id) = parse_response_id(&prev).ok_or_else(unknown)?;
    let messages = state.store.list_messages(session_id, 10_000).await?;
    let leaf = messages
        .iter()
        .rev()
        .find(|m| m.run_id == Some(run_id))
        .ok_or_else(unknown)?;
    let history = state.store.branch(session_id, leaf.id, 10_000).await?;
    if !r.input_is_new_turn {
        return Err(ApiError::invalid(
            Some("input".to_string()),
            "'input': with previous_response_id the input holds the new turn only (user \
             messages and function_call_output items); the earlier turns come from the stored \
             response",
        ));
    }
    r.inbound.stored_input = stored_input(&r.inbound.request.messages);
    let mut all: Vec<LlmMessage> = history
        .into_iter()
        .map(|m| LlmMessage {
            role: m.role,
            blocks: m.blocks,
        })
        .collect();
    all.append(&mut r.inbound.request.messages);
    r.inbound.prompt = super::openai_in::last_user_text(&all);
    r.inbound.request.messages = all;
    Ok(Some(session_id))
}

/// The new turn's blocks, as the session stores them: the function call outputs first (they
/// answer the stored calls), then the user's text and files. None when it is text alone (the
/// prompt is stored as usual).
fn stored_input(turn: &[LlmMessage]) -> Option<Vec<ContentBlock>> {
    let mut results = Vec::new();
    let mut rest = Vec::new();
    for m in turn {
        match m.role {
            Role::Tool => results.extend(m.blocks.iter().cloned()),
            Role::User => rest.extend(m.blocks.iter().cloned()),
            Role::Assistant | Role::System => {}
        }
    }
    if results.is_empty() && rest.iter().all(|b| matches!(b, ContentBlock::Text { .. })) {
        return None;
    }
    results.append(&mut rest);
    Some(results)
}
