//! Following a session for a client (the SSE route): the session must exist, the events after
//! the client's cursor come from the memory of this node's bus or of the fleet node that runs
//! the session, else from the log (refused while the log cannot be written, rather than served
//! with a gap), and a client that falls behind is sent `reset`.

use super::{Event, Follower, OnLag, Policy, Start};
use crate::error::ApiError;
use crate::fleet::owner::OwnerWatch;
use crate::service::open_follow_bus;
use crate::state::AppState;
use elfgate_core::{SessionId, Watching};
use std::collections::VecDeque;
use std::time::Duration;

/// A client's follower, opened.
pub(crate) struct ClientFollow {
    /// The follower.
    pub follower: Follower,
    /// The client's cursor is past every event the session had: it must reload from the start.
    pub cursor_ahead: bool,
    /// Counts the client among the session's watchers while it follows: a gateway run's
    /// permission requests are asked while one does (see PermissionAnswers::WatchersOnly).
    pub watching: Watching,
}

/// Closes the session's bus 2 s after its last subscriber leaves, if the session is idle then.
pub(crate) struct CloseOnDrop {
    state: AppState,
    session_id: SessionId,
}

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        let active = self.state.dispatcher.active().clone();
        let hub = self.state.dispatcher.hub().clone();
        let id = self.session_id;
        // Like after a run, the bus is kept a moment: a client that follows one run at a time
        // (`until=complete`, then a new prompt) finds it open instead of reopening the session.
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    tokio::time::sleep(elfgate_core::dispatcher::IDLE_BUS_GRACE).await;
                    hub.close_if_idle(id, || active.contains(id));
                });
            }
            Err(_) => hub.close_if_idle(id, || active.contains(id)),
        }
    }
}

/// Opens the following of a session for a client whose cursor is `after` (0: from the start).
pub(crate) async fn open(
    state: AppState,
    session_id: SessionId,
    after: u64,
) -> Result<ClientFollow, ApiError> {
    // A session another node runs: its events come over NATS. Subscribed before anything is
    // read (the owner's memory or the log, below), so that nothing published in between is
    // missed.
    let relayed = match &state.fleet {
        Some(fleet) if !state.dispatcher.active().contains(session_id) => fleet
            .follow(session_id)
            .await
            .map_err(|e| tracing::warn!(error = %e, "cannot follow a session over NATS"))
            .ok(),
        _ => None,
    };
    // Its events after the cursor from the owner's memory: while it runs the session, the first
    // frames need neither the database nor the owner's log writes (which linger). Only when no
    // node answers (nobody runs it, or its memory no longer reaches the cursor) is the log read.
    let mut owner = OwnerWatch::new(session_id);
    let from_owner = match (&state.fleet, &relayed) {
        (Some(fleet), Some(_)) => {
            fleet
                .events_from_owner(session_id, after)
                .await
                .map(|(node, events)| {
                    // The owner just answered: its next events need no look-up of the lease.
                    owner = OwnerWatch::heard_from(session_id, node);
                    events
                })
        }
        _ => None,
    };
    // An open bus, or an owner's answer, means a live session: no need to ask the database.
    if from_owner.is_none()
        && state.dispatcher.hub().get(session_id).is_none()
        && state.store.get_session(session_id).await?.is_none()
    {
        return Err(ApiError::NotFound(format!(
            "unknown session '{session_id}'"
        )));
    }
    // Made before the subscription so that it drops after it: a client that goes away at any
    // point (also while the log flushes) lets the bus close.
    let close = CloseOnDrop {
        state: state.clone(),
        session_id,
    };
    // Subscribe before reading the log; retry if the bus was closed between open and subscribe.
    // The owner's newest seq: this node's bus for the session (it publishes nothing on it unless
    // it runs the session later) numbers from there, as it would from the log.
    let owner_last = from_owner
        .as_ref()
        .map(|events| events.last().map_or(after, |e| e.seq));
    let sub = loop {
        match owner_last {
            Some(last) => {
                state.dispatcher.hub().open(session_id, last, last);
            }
            None => {
                open_follow_bus(&state, session_id).await?;
            }
        }
        if let Some(sub) = state.dispatcher.hub().subscribe_after(session_id, after) {
            break sub;
        }
    };
    let start = match (from_owner, sub.recent) {
        // The owner's memory holds every event after the cursor: no log read.
        (Some(events), _) => Start::Queued(
            events
                .into_iter()
                .filter(|e| e.seq > after)
                .map(Event::Relayed)
                .collect::<VecDeque<_>>(),
        ),
        // The bus still holds every event after the cursor: no log read, no flush.
        (None, Some(recent)) => Start::Queued(recent.into_iter().map(Event::Live).collect()),
        (None, None) => {
            // Everything published before the subscription is now in the log; unless it cannot
            // be written now, when a replay would skip the events still waiting: refused
            // (503, Retry-After) rather than served with a gap.
            if !state.dispatcher.hub().flush().await {
                return Err(ApiError::Storage(elfgate_store::StoreError::LogBehind(
                    "events wait to be written".into(),
                )));
            }
            Start::Log { flushed: true }
        }
    };
    // A cursor past what this node has seen is no error when another node runs the session: the
    // client read it there (its newest events may not be in the log yet) and now reconnects here.
    // The owner's memory is the newest there is: a cursor past it is wrong everywhere.
    let known_last = owner_last.unwrap_or(sub.last_seq);
    let cursor_from_elsewhere = match &state.fleet {
        _ if owner_last.is_some() => false,
        Some(fleet) if after > sub.last_seq => matches!(
            fleet.store.session_owner(session_id).await,
            Ok(Some(owner)) if *owner != *fleet.node_id
        ),
        _ => false,
    };
    let watching = sub.bus.watch();
    let policy = Policy {
        on_lag: OnLag::Reset,
        idle: Some(Duration::from_secs(
            state.config.server.keepalive_secs.max(1),
        )),
        ends_at_shutdown: true,
    };
    let clustered = state.config.cluster.is_some();
    // The bus itself is not held: on a fleet node, its closing tells that this node's runs of the
    // session were muted.
    let mut follower = Follower::new(state, session_id, sub.live, after, start, policy);
    if clustered {
        follower.with_remote(relayed, owner);
    }
    follower.close = Some(close);
    Ok(ClientFollow {
        follower,
        cursor_ahead: after > known_last && !cursor_from_elsewhere,
        watching,
    })
}
