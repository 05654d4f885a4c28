//! Opening a session's bus: for a follower (which numbers nothing) and for a run of this node
//! (which reserves seqs and is guarded by the session's lease in a fleet).

use crate::error::ApiError;
use crate::state::AppState;
use elfgate_core::{SessionBus, SessionId};
use std::sync::Arc;

/// The session's bus, opened at the current last seq if none is open.
pub async fn open_bus(
    state: &AppState,
    session_id: SessionId,
) -> Result<Arc<SessionBus>, ApiError> {
    let hub = state.dispatcher.hub();
    if let Some(bus) = hub.get(session_id) {
        return Ok(bus);
    }
    flush_before_open(state).await?;
    let (last, reserved) = state.store.open_seq_range(session_id).await?;
    Ok(hub.open(session_id, last, reserved))
}

/// Before a bus is opened from the log: a bus closed moments ago may still have events and its
/// release on their way to the log. While the log cannot be written, the seqs read back could be
/// below events not yet written: refused, rather than numbered twice.
async fn flush_before_open(state: &AppState) -> Result<(), ApiError> {
    if state.dispatcher.hub().flush().await {
        Ok(())
    } else {
        Err(ApiError::Storage(elfgate_store::StoreError::LogBehind(
            "events wait to be written".into(),
        )))
    }
}

/// The bus a client follows the session on. On a fleet node it reserves no seqs (it publishes
/// nothing unless this node runs the session, and then [`open_run_bus`] reserves): a follower's
/// reservation would make the next owner's numbering jump.
pub async fn open_follow_bus(
    state: &AppState,
    session_id: SessionId,
) -> Result<Arc<SessionBus>, ApiError> {
    if state.fleet.is_none() {
        return open_bus(state, session_id).await;
    }
    let hub = state.dispatcher.hub();
    if let Some(bus) = hub.get(session_id) {
        return Ok(bus);
    }
    flush_before_open(state).await?;
    let logged = state.store.last_seq(session_id).await?;
    Ok(hub.open(session_id, logged, logged))
}

/// The bus a run of this node publishes on. On a fleet node, a bus opened earlier by a follower of
/// another node's run numbers from where the log stood then: when the log has gone past it (the
/// other node's events), it is moved above what the log and the reservation hold now, so that no
/// seq is handed out twice. A bus that numbered the session's last events itself stays as it is.
pub(crate) async fn open_run_bus(
    state: &AppState,
    session_id: SessionId,
) -> Result<Arc<SessionBus>, ApiError> {
    // A bus whose runs lost the session to another node publishes nothing more: a new run
    // numbers from the log, on a bus of its own.
    if state
        .dispatcher
        .hub()
        .get(session_id)
        .is_some_and(|b| b.lease().is_lost())
    {
        state.dispatcher.hub().remove(session_id);
    }
    let existed = state.dispatcher.hub().get(session_id).is_some();
    let bus = open_bus(state, session_id).await?;
    // A bus of this node's active run numbers on as it is (a queued prompt).
    if existed
        && state.fleet.is_some()
        && !state.dispatcher.active().contains(session_id)
        && state.store.last_seq(session_id).await? > bus.last_seq()
    {
        let (last, reserved) = state.store.open_seq_range(session_id).await?;
        bus.rebase(last, reserved);
    }
    guard_by_lease(state, &bus);
    Ok(bus)
}

/// Guards what a run of this node does for the session by the lease it claimed when the run was
/// stored (a fleet node; nothing on a single node): see `elfgate_core::lease`.
pub(crate) fn guard_by_lease(state: &AppState, bus: &SessionBus) {
    if let Some(fleet) = &state.fleet {
        bus.hold_lease(fleet.store.lease_guard(bus.session_id()));
    }
}
