//! The commands that read what a session stored: the list of sessions, a session's messages and
//! blocked calls, one of its runs. Each is given by an [`Actor`] as the other commands are, so
//! that a read can later be scoped to its caller without changing its signature.

use super::access::{authorize_session, sessions_seen};
use super::command::Actor;
use super::control::view;
use crate::error::ApiError;
use crate::state::AppState;
use elfgate_api::{SessionList, SessionView};
use elfgate_core::{Access, AuditRecord, Message, Run, RunId, SessionId};

/// A page of sessions, newest first, from after `cursor`, each with its live status and first
/// prompt.
pub async fn list_sessions(
    state: &AppState,
    actor: &Actor,
    limit: u32,
    cursor: Option<SessionId>,
) -> Result<SessionList, ApiError> {
    tracing::debug!(%actor, "list sessions");
    let mut page = state
        .store
        .list_sessions(sessions_seen(actor), limit, cursor)
        .await?;
    Ok(SessionList {
        sessions: page
            .sessions
            .into_iter()
            .map(|s| {
                let first_prompt = page.first_prompts.remove(&s.id);
                SessionView {
                    first_prompt,
                    ..view(state, s)
                }
            })
            .collect(),
        next_cursor: page.next_cursor,
    })
}

/// A stored session's messages, oldest first, at most `limit`.
pub async fn list_messages(
    state: &AppState,
    actor: &Actor,
    session_id: SessionId,
    limit: u32,
) -> Result<Vec<Message>, ApiError> {
    tracing::debug!(%actor, %session_id, "list messages");
    authorize_session(state, actor, session_id, Access::Read).await?;
    Ok(state.store.list_messages(session_id, limit).await?)
}

/// The latest `limit` calls a gate blocked in a stored session, oldest first.
pub async fn list_audit(
    state: &AppState,
    actor: &Actor,
    session_id: SessionId,
    limit: u32,
) -> Result<Vec<AuditRecord>, ApiError> {
    tracing::debug!(%actor, %session_id, "list audit");
    authorize_session(state, actor, session_id, Access::Read).await?;
    Ok(state.store.list_audit(session_id, limit).await?)
}

/// One run of a session.
pub async fn get_run(
    state: &AppState,
    actor: &Actor,
    session_id: SessionId,
    run_id: RunId,
) -> Result<Run, ApiError> {
    tracing::debug!(%actor, %session_id, %run_id, "get run");
    authorize_session(state, actor, session_id, Access::Read).await?;
    let mut run = state
        .store
        .get_run(session_id, run_id)
        .await?
        .ok_or_else(|| {
            ApiError::NotFound(format!("unknown run '{run_id}' in session '{session_id}'"))
        })?;
    run.cost_usd = state.store.run_spend(run_id).await?.cost_usd;
    Ok(run)
}
