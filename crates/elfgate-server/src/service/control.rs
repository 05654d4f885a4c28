//! The commands on a session other than a prompt: interrupt, read, delete, and a client's answer
//! to a permission request.

use super::access::authorize_session;
use super::command::Actor;
use crate::error::ApiError;
use crate::state::AppState;
use elfgate_api::{
    InterruptResponse, InterruptStatus, PermissionAnswered, PermissionBody, SessionStatus,
    SessionView,
};
use elfgate_core::{Access, FinishReason, Session, SessionId};
use std::time::Duration;

/// Interrupts a session's run; with `wait`, returns once it has ended (up to 30 s).
pub async fn interrupt(
    state: &AppState,
    actor: &Actor,
    session_id: SessionId,
    wait: bool,
) -> Result<InterruptResponse, ApiError> {
    tracing::debug!(%actor, %session_id, "interrupt");
    authorize_session(state, actor, session_id, Access::Steer).await?;
    let result = state.dispatcher.interrupt(session_id);
    let Some(run_id) = result.run_id else {
        return Ok(InterruptResponse {
            interrupted: false,
            run_id: None,
            status: InterruptStatus::Idle,
        });
    };
    let mut status = InterruptStatus::Interrupting;
    if wait
        && let Some(done) = result.done
        && tokio::time::timeout(Duration::from_secs(30), done.cancelled())
            .await
            .is_ok()
    {
        status = InterruptStatus::Interrupted;
    }
    Ok(InterruptResponse {
        interrupted: true,
        run_id: Some(run_id),
        status,
    })
}

/// One session with its live status.
pub async fn session_view(
    state: &AppState,
    actor: &Actor,
    session_id: SessionId,
) -> Result<SessionView, ApiError> {
    tracing::debug!(%actor, %session_id, "view session");
    let session = authorize_session(state, actor, session_id, Access::Read).await?;
    let spend = state.store.session_spend(session_id).await?;
    let mut view = SessionView {
        tokens: Some(spend.usage),
        cost_usd: spend.cost_usd,
        ..view(state, session)
    };
    if view.status == SessionStatus::Idle
        && state
            .store
            .last_run_finish(&session_id.to_string())
            .await?
            .as_deref()
            == Some(FinishReason::BudgetPaused.as_str())
    {
        view.status = SessionStatus::Paused;
    }
    Ok(view)
}

/// Adds the live status to a stored session.
pub fn view(state: &AppState, session: Session) -> SessionView {
    let active = state.dispatcher.active().get(session.id);
    SessionView {
        status: if active.is_some() {
            SessionStatus::Running
        } else {
            SessionStatus::Idle
        },
        active_run_id: active.as_ref().map(|a| a.run_id),
        queued_runs: active.map(|a| a.queued).unwrap_or(0),
        first_prompt: None,
        tokens: None,
        cost_usd: None,
        session,
    }
}

/// Deletes a session after stopping its run.
pub async fn delete_session(
    state: &AppState,
    actor: &Actor,
    session_id: SessionId,
) -> Result<(), ApiError> {
    tracing::debug!(%actor, %session_id, "delete session");
    authorize_session(state, actor, session_id, Access::Steer).await?;
    let Some(_mark) = state.sessions.begin_delete(session_id).await else {
        return Err(ApiError::Conflict(format!(
            "session '{session_id}' is already being deleted"
        )));
    };
    delete_stopped_session(state, session_id).await
}

async fn delete_stopped_session(state: &AppState, session_id: SessionId) -> Result<(), ApiError> {
    state.dispatcher.interrupt(session_id);
    // Wait for the running run and every cancelled queued run behind it: each still publishes its
    // `result` and `complete`, which must reach the log before the log is deleted.
    let active = state.dispatcher.active().clone();
    let all_ended = async {
        while let Some(run) = active.get(session_id) {
            run.done.cancelled().await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(30), all_ended)
        .await
        .is_err()
    {
        // Deleting under a run that still writes would lose its writes silently: refuse instead.
        return Err(ApiError::Conflict(
            "the session's run did not stop within 30 s; nothing was deleted".into(),
        ));
    }
    // The run's last events must be in the log before the log is deleted.
    state.dispatcher.hub().flush().await;
    state.store.delete_session(session_id).await?;
    state.dispatcher.hub().remove(session_id);
    state.permissions.forget_session(session_id);
    state.dispatcher.forget_session(session_id).await;
    Ok(())
}

/// Delivers a client's answer to a permission request a run of `session_id` is waiting on.
pub async fn answer_permission(
    state: &AppState,
    actor: &Actor,
    session_id: SessionId,
    request_id: String,
    body: PermissionBody,
) -> Result<PermissionAnswered, ApiError> {
    tracing::debug!(%actor, %session_id, %request_id, "answer permission");
    // Refused whichever the session: the refusal tells nothing of which sessions exist.
    super::scopes::check_answer(actor)?;
    use elfgate_tools::{PermissionAnswer, ResolveError};
    authorize_session(state, actor, session_id, Access::Steer).await?;
    // The run waiting here takes an answer only while this node holds the session's lease: a node
    // paused or cut off past it waits for its heartbeat's word, and a lost lease means another
    // node ended the run (this node's run stops, and the answer is not taken).
    if state.dispatcher.active().contains(session_id)
        && let Some(bus) = state.dispatcher.hub().get(session_id)
        && !bus.lease().settled().await
    {
        return Err(ApiError::Storage(elfgate_store::StoreError::Fenced(
            session_id.to_string(),
        )));
    }
    let PermissionBody {
        decision,
        scope,
        message,
    } = body;
    state
        .permissions
        .resolve(
            session_id,
            &request_id,
            PermissionAnswer {
                decision,
                scope,
                message,
            },
        )
        .map_err(|e| match e {
            ResolveError::NotFound(_) => ApiError::NotFound(e.to_string()),
            ResolveError::AlreadyDecided(_) => ApiError::Conflict(e.to_string()),
        })?;
    Ok(PermissionAnswered {
        request_id,
        decision,
        scope,
    })
}
