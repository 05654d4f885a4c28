//! The Responses door's own steps between parsing and running: `previous_response_id` served
//! from the stored session, and what `store: false` keeps (built-in tools: `builtin_tools`).

use super::responses_in::ResponsesInbound;
use super::route::Route;
use super::run::{Continuation, check_continued};
use crate::error::ApiError;
use crate::service::Actor;
use crate::state::AppState;
use elfgate_core::{ContentBlock, Role, RunId, SessionId};
use elfgate_llm::LlmMessage;

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

/// The session `previous_response_id` names, when it is a response id (a run token may reach
/// its own session only: checked before anything of it is read).
pub fn previous_session(r: &ResponsesInbound) -> Option<SessionId> {
    parse_response_id(r.previous_response_id.as_deref()?).map(|(sid, _)| sid)
}

/// `store: false`: the call keeps nothing, and deletes nothing stored before it. A call that
/// continues a session (`previous_response_id`, `x-elfgate-session-id`) on a provider route runs
/// as a session of its own, deleted once answered: its request already holds the earlier turns
/// (the stored ones put before its input, or the caller's own history), so the continued session
/// is read and never written. An engine route's run continues its session's own history, which
/// only a kept run can: refused, 400 naming `store`.
pub async fn keep_nothing(
    state: &AppState,
    actor: &Actor,
    route: &Route,
    cont: &mut Continuation,
) -> Result<(), ApiError> {
    let Some(sid) = cont.session_id else {
        return Ok(());
    };
    match route {
        Route::Provider { .. } => {
            check_continued(state, actor, sid, elfgate_core::EngineType::Chat).await?;
            cont.session_id = None;
            Ok(())
        }
        Route::Engine { engine, .. } => Err(ApiError::invalid(
            Some("store".to_string()),
            format!(
                "'store': false cannot continue session '{sid}' on an engine route \
                 ({}{engine}): its run goes on from the session's stored history and is kept \
                 with it; send store: true, or start a new session (no previous_response_id \
                 or x-elfgate-session-id)",
                super::route::ENGINE_PREFIX
            ),
        )),
    }
}

/// With `previous_response_id`: the stored conversation up to that response goes before the
/// request's input, the call continues that response's session, and the new input is what the
/// session stores for the call. Returns the session to continue. A response of a session
/// `actor` may not see is unknown (404), as in the API.
pub async fn continue_previous(
    state: &AppState,
    actor: &Actor,
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
    let messages = match crate::service::list_messages(state, actor, session_id, 10_000).await {
        Ok(messages) => messages,
        Err(ApiError::NotFound(_)) => return Err(unknown()),
        Err(e) => return Err(e),
    };
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

/// Deletes a `store: false` call's session once its answer is over (or its caller gone): the
/// deletion waits for the run to end. Only ever a session the call created itself
/// ([`keep_nothing`] makes a continuing call a session of its own).
pub struct DeleteWhenDone {
    /// The daemon.
    pub state: AppState,
    /// The call's own session.
    pub session_id: SessionId,
}

impl Drop for DeleteWhenDone {
    fn drop(&mut self) {
        let state = self.state.clone();
        let id = self.session_id;
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = crate::service::delete_session(&state, &crate::service::Actor::Daemon, id).await {
                    tracing::warn!(session = %id, error = %e, "a store: false session was not deleted");
                }
            });
        }
    }
}
