//! The SSE stream of a session: replay from the log after the client's cursor, then live events,
//! with no gap and no duplicate. Subscribe first; take the events after the cursor from the bus's
//! memory when it still holds them all, else flush the log and read it; then drop live events
//! already replayed.

use crate::error::ApiError;
use crate::event_frame::{frame, push_frame};
use crate::service::open_follow_bus;
use crate::state::AppState;
use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use elfgate_core::{EventPayload, EventRecord, SessionId};
use elfgate_store::StoredEvent;
use futures_util::stream;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;
use tokio::time::{Interval, MissedTickBehavior};

/// Frames are gathered into writes of up to this many bytes when several are ready.
const COALESCE_BYTES: usize = 32 * 1024;

/// Events read from the log per query while replaying.
const REPLAY_PAGE: u32 = 1000;
/// A fleet node reads the log for a session another node runs after this long without an event
/// of it over NATS (NATS away, a lost last message, events an adopter wrote to the log).
const FOLLOW_LOG_EVERY: Duration = Duration::from_millis(200);

fn reset_frame(session_id: SessionId, from_seq: u64) -> Bytes {
    let reset = EventPayload::Reset { from_seq };
    // Not a logged event: it carries no id, so the client's Last-Event-ID stays at what it has.
    Bytes::from(format!(
        "event: {}\ndata: {}\n\n",
        reset.type_name(),
        reset.unlogged_json(session_id)
    ))
}

enum Phase {
    Replay,
    Live,
    Done,
}

/// Why [`coalesce`] stopped gathering frames.
#[derive(Debug, PartialEq, Eq)]
enum CoalesceEnd {
    /// Nothing more was waiting, or the write is full.
    Drained,
    /// A `complete` was added and the stream ends after it (`?until=complete`).
    Complete,
    /// The channel dropped events for this receiver. `try_recv` reports that once and then moves
    /// on to the oldest event it kept, so it must be acted on here: the next receive would return
    /// an event past the gap as if nothing were missing.
    Lagged,
}

/// Frames `first` (the caller has set `last` to its seq) and the events already waiting on `rx`
/// after it (up to `COALESCE_BYTES`), advancing `last` over those it takes.
fn coalesce(
    rx: &mut broadcast::Receiver<Arc<EventRecord>>,
    last: &mut u64,
    first: &EventRecord,
    until_complete: bool,
) -> (Bytes, CoalesceEnd) {
    let mut out = BytesMut::new();
    push_frame(&mut out, first.seq, first.event_type(), &first.json);
    if until_complete && first.event_type() == "complete" {
        return (out.freeze(), CoalesceEnd::Complete);
    }
    while out.len() < COALESCE_BYTES {
        match rx.try_recv() {
            Ok(e) if e.seq <= *last => continue,
            Ok(e) => {
                *last = e.seq;
                push_frame(&mut out, e.seq, e.event_type(), &e.json);
                if until_complete && e.event_type() == "complete" {
                    return (out.freeze(), CoalesceEnd::Complete);
                }
            }
            Err(broadcast::error::TryRecvError::Lagged(_)) => {
                return (out.freeze(), CoalesceEnd::Lagged);
            }
            Err(_) => break,
        }
    }
    (out.freeze(), CoalesceEnd::Drained)
}

struct Cursor {
    state: AppState,
    session_id: SessionId,
    /// The client's cursor when it connected.
    from: u64,
    /// Pending permission requests re-announced after the replay.
    reannounce: VecDeque<Bytes>,
    rx: broadcast::Receiver<Arc<EventRecord>>,
    last: u64,
    /// Replay frames ready to send, with their seq and whether they carry a `complete`.
    buffer: VecDeque<(u64, bool, Bytes)>,
    /// End the stream after the first `complete` sent (`?until=complete`).
    until_complete: bool,
    log_exhausted: bool,
    /// The live channel dropped events for this subscriber while frames were being gathered: the
    /// next frame is `reset`.
    lagged: bool,
    phase: Phase,
    keepalive: Interval,
    /// A fleet node: when the log is read next for the events of a session another node runs
    /// (their events do not pass through this node's bus); each event relayed over NATS puts it
    /// off. None for a single node.
    follow_log: Option<Interval>,
    /// A fleet node following a session another node runs: that node's events as it publishes
    /// them on NATS (subscribed before the log was read), through the one bounded subscription
    /// this node keeps per followed session.
    remote: Option<crate::fleet::follow::Following>,
    /// The owner of the session, whose relayed events alone are taken.
    owner: crate::fleet::owner::OwnerWatch,
    /// The last read of another node's run's log failed (said once in the daemon's log).
    log_failing: bool,
    /// The bus closed under this stream on a fleet node while the session lives on (this node's
    /// runs of it lost their lease and were muted): the stream follows the log from here.
    bus_gone: bool,
    /// Counts this client among the session's watchers while the stream lives.
    _watching: elfgate_core::Watching,
    /// Declared last so that it drops after `rx`: the subscription is gone when it runs.
    _close: CloseOnDrop,
}

/// Closes the session's bus 2 s after its last subscriber leaves, if the session is idle then.
struct CloseOnDrop {
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

impl Cursor {
    /// Pending permission requests whose `permissionRequest` event the client's cursor had already
    /// passed (so the replay did not carry it) are sent again, as frames without an `id` so that
    /// the client's Last-Event-ID does not move back. Requests replayed or published later reach the
    /// client as ordinary events.
    fn queue_reannouncements(&mut self) {
        for p in self.state.permissions.pending_for(self.session_id) {
            if p.record.seq <= self.from {
                let mut s = String::with_capacity(p.record.json.len() + 48);
                s.push_str("event: permissionRequest\ndata: ");
                s.push_str(&p.record.json);
                s.push_str("\n\n");
                self.reannounce.push_back(Bytes::from(s));
            }
        }
    }

    /// The frame of `first` followed by the frames of events already waiting in the channel, so
    /// that a burst of deltas leaves in one write. A lag seen meanwhile is kept for the next frame
    /// (a `reset`).
    fn coalesce_live(&mut self, first: &EventRecord) -> Bytes {
        let (out, end) = coalesce(&mut self.rx, &mut self.last, first, self.until_complete);
        match end {
            CoalesceEnd::Complete => self.phase = Phase::Done,
            CoalesceEnd::Lagged => self.lagged = true,
            CoalesceEnd::Drained => {}
        }
        out
    }

    /// Whether a message relayed on the session's subject is signed by the fleet and comes from
    /// the node that owns the session (dropped and counted otherwise).
    async fn is_from_owner(&mut self, msg: &async_nats::Message) -> bool {
        let Some(fleet) = self.state.fleet.clone() else {
            return false;
        };
        match fleet.verified(msg) {
            Some(sender) => {
                self.owner
                    .owned_by(&fleet, &sender.node, &msg.subject)
                    .await
            }
            None => false,
        }
    }

    /// An event another node relayed: queued when it is the next one, after the logged events
    /// before it when there is a gap (a lost or early message). When the log does not have them
    /// yet, it waits for the next read of the log, which brings it too: nothing is skipped.
    async fn take_relayed(&mut self, payload: &Bytes) {
        let Some(e) = crate::event_frame::single_frame(payload) else {
            return;
        };
        // The bus carries the session: no need to read the log while it does.
        if let Some(every) = &mut self.follow_log {
            every.reset();
        }
        if e.seq <= self.last {
            return;
        }
        if e.seq > self.last + 1 && !self.fill_from_owner(e.seq).await {
            // The owner did not answer: from the log, or at the next read of it.
            if self.read_log_before(e.seq).await.is_err() {
                return;
            }
        }
        let next = self.buffer.back().map_or(self.last, |(seq, _, _)| *seq) + 1;
        if e.seq == next {
            self.buffer.push_back((e.seq, e.complete, e.frame));
        }
        if !self.buffer.is_empty() {
            self.log_exhausted = true;
            self.phase = Phase::Replay;
        }
    }

    /// Queues the events after the cursor and before `before` from the memory of the node that
    /// runs the session; whether it had them all.
    async fn fill_from_owner(&mut self, before: u64) -> bool {
        let Some(fleet) = self.state.fleet.clone() else {
            return false;
        };
        let after = self.buffer.back().map_or(self.last, |(seq, _, _)| *seq);
        // The node whose event showed the gap, found to own the session just before.
        let Some(owner) = self.owner.owner().map(str::to_string) else {
            return false;
        };
        let Some(events) = fleet.recent_events(self.session_id, after, &owner).await else {
            return false;
        };
        let mut next = after + 1;
        for e in events
            .into_iter()
            .filter(|e| e.seq > after && e.seq < before)
        {
            if e.seq != next {
                return false;
            }
            self.buffer.push_back((e.seq, e.complete, e.frame));
            next += 1;
        }
        next == before
    }

    /// Queues the logged events after the cursor and before `before` (one page). On a failure
    /// the caller decides: wait for the next read, or end the stream with the `reset` returned.
    async fn read_log_before(&mut self, before: u64) -> Result<(), Bytes> {
        let after = self.buffer.back().map_or(self.last, |(seq, _, _)| *seq);
        match self
            .state
            .store
            .events_after(self.session_id, after, REPLAY_PAGE)
            .await
        {
            Ok(page) => {
                if std::mem::take(&mut self.log_failing) {
                    tracing::info!("the log of another node's run can be read again");
                }
                self.buffer
                    .extend(
                        page.into_iter()
                            .filter(|e| e.seq < before)
                            .map(|e: StoredEvent| {
                                let complete = e.event_type == "complete";
                                (e.seq, complete, frame(e.seq, &e.event_type, &e.json))
                            }),
                    );
                Ok(())
            }
            Err(e) => {
                if !std::mem::replace(&mut self.log_failing, true) {
                    tracing::warn!(error = %e, "reading the log of another node's run failed; \
                        read again at the next poll, events from the bus wait for it");
                }
                Err(reset_frame(self.session_id, self.last + 1))
            }
        }
    }

    async fn next_frame(&mut self) -> Option<Bytes> {
        loop {
            match self.phase {
                Phase::Done => return None,
                Phase::Replay => {
                    if let Some((seq, complete, f)) = self.buffer.pop_front() {
                        self.last = seq;
                        let ends = complete && self.until_complete;
                        if ends {
                            self.phase = Phase::Done;
                        }
                        if self.buffer.is_empty() || ends {
                            return Some(f);
                        }
                        // Send replayed frames in large writes rather than one write per event.
                        let mut out = BytesMut::with_capacity(COALESCE_BYTES);
                        out.extend_from_slice(&f);
                        while out.len() < COALESCE_BYTES {
                            let Some((seq, complete, f)) = self.buffer.pop_front() else {
                                break;
                            };
                            self.last = seq;
                            out.extend_from_slice(&f);
                            if complete && self.until_complete {
                                self.phase = Phase::Done;
                                break;
                            }
                        }
                        return Some(out.freeze());
                    }
                    if self.log_exhausted {
                        self.phase = Phase::Live;
                        self.queue_reannouncements();
                        continue;
                    }
                    match self
                        .state
                        .store
                        .events_after(self.session_id, self.last, REPLAY_PAGE)
                        .await
                    {
                        Ok(page) => {
                            self.log_exhausted = page.len() < REPLAY_PAGE as usize;
                            self.buffer.extend(page.into_iter().map(|e: StoredEvent| {
                                let complete = e.event_type == "complete";
                                (e.seq, complete, frame(e.seq, &e.event_type, &e.json))
                            }));
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "replay failed");
                            self.phase = Phase::Done;
                            return Some(reset_frame(self.session_id, self.last + 1));
                        }
                    }
                }
                Phase::Live => {
                    if self.lagged {
                        self.phase = Phase::Done;
                        return Some(reset_frame(self.session_id, self.last + 1));
                    }
                    if let Some(f) = self.reannounce.pop_front() {
                        return Some(f);
                    }
                    let shutdown = self.state.shutdown.clone();
                    let follow_log = async {
                        match &mut self.follow_log {
                            Some(every) => every.tick().await,
                            None => std::future::pending().await,
                        }
                    };
                    let remote = async {
                        match &mut self.remote {
                            Some(sub) => sub.next().await,
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        biased;
                        m = remote => {
                            match m {
                                Ok(m) => {
                                    if self.is_from_owner(&m).await {
                                        self.take_relayed(&m.payload).await;
                                    }
                                }
                                // Too far behind, as on the owner: the client reloads from its
                                // cursor.
                                Err(broadcast::error::RecvError::Lagged(missed)) => {
                                    if let Some(fleet) = &self.state.fleet {
                                        fleet.follower_lagged(self.session_id, missed);
                                    }
                                    self.phase = Phase::Done;
                                    return Some(reset_frame(self.session_id, self.last + 1));
                                }
                                // NATS closed the subscription for good: the log remains.
                                Err(broadcast::error::RecvError::Closed) => self.remote = None,
                            }
                            continue;
                        }
                        r = self.rx.recv(), if !self.bus_gone => match r {
                            Ok(e) if e.seq <= self.last => continue,
                            // Events of another node's run came before this one: from the log
                            // first, so that nothing is skipped.
                            Ok(e) if self.follow_log.is_some() && e.seq > self.last + 1 => {
                                if let Err(f) = self.read_log_before(e.seq).await {
                                    self.phase = Phase::Done;
                                    return Some(f);
                                }
                                self.buffer.push_back((
                                    e.seq,
                                    e.event_type() == "complete",
                                    frame(e.seq, e.event_type(), &e.json),
                                ));
                                self.log_exhausted = true;
                                self.phase = Phase::Replay;
                                continue;
                            }
                            Ok(e) => {
                                self.last = e.seq;
                                return Some(self.coalesce_live(&e));
                            }
                            Err(broadcast::error::RecvError::Lagged(_)) => {
                                // Too far behind: tell the client to reload from its cursor.
                                self.phase = Phase::Done;
                                return Some(reset_frame(self.session_id, self.last + 1));
                            }
                            Err(broadcast::error::RecvError::Closed) => {
                                if self.follow_log.is_some()
                                    && matches!(
                                        self.state.store.get_session(self.session_id).await,
                                        Ok(Some(_))
                                    )
                                {
                                    // Another node runs the session now, or will: what it does
                                    // reaches the log, read at each tick.
                                    self.bus_gone = true;
                                    continue;
                                }
                                return None;
                            }
                        },
                        _ = shutdown.cancelled() => return None,
                        _ = follow_log => {
                            // A run of this node publishes on the bus, ahead of the log (not
                            // on the bus this stream had, if gone).
                            if !self.bus_gone
                                && self.state.dispatcher.active().contains(self.session_id)
                            {
                                continue;
                            }
                            // A failed read (the database away) is read again at the next
                            // tick; the bus's events wait for it rather than leave a gap.
                            let _ = self.read_log_before(u64::MAX).await;
                            if !self.buffer.is_empty() {
                                self.log_exhausted = true;
                                self.phase = Phase::Replay;
                            }
                            continue;
                        }
                        _ = self.keepalive.tick() => return Some(Bytes::from_static(b": keep-alive\n\n")),
                    }
                }
            }
        }
    }
}

/// Opens the stream of a session after `after` (0 replays everything); with `until_complete`, the
/// stream ends after the first `complete` it sends.
pub async fn session_events(
    state: AppState,
    session_id: SessionId,
    after: u64,
    until_complete: bool,
) -> Result<Response, ApiError> {
    // A session another node runs: its events come over NATS. Subscribed before anything is
    // read (the owner's memory or the log, below), so that nothing published in between is
    // missed.
    let remote = match &state.fleet {
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
    let mut owner = crate::fleet::owner::OwnerWatch::new(session_id);
    let from_owner = match (&state.fleet, &remote) {
        (Some(fleet), Some(_)) => {
            fleet
                .events_from_owner(session_id, after)
                .await
                .map(|(node, events)| {
                    // The owner just answered: its next events need no look-up of the lease.
                    owner = crate::fleet::owner::OwnerWatch::heard_from(session_id, node);
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
    // Declared before the subscription so that it drops after it: a client that goes away at any
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
    let mut buffer = VecDeque::new();
    let log_exhausted = match (from_owner, sub.recent) {
        // The owner's memory holds every event after the cursor: no log read.
        (Some(events), _) => {
            buffer.extend(
                events
                    .into_iter()
                    .filter(|e| e.seq > after)
                    .map(|e| (e.seq, e.complete, e.frame)),
            );
            true
        }
        // The bus still holds every event after the cursor: no log read, no flush.
        (None, Some(recent)) => {
            buffer.extend(recent.iter().map(|e| {
                let complete = e.event_type() == "complete";
                (e.seq, complete, frame(e.seq, e.event_type(), &e.json))
            }));
            true
        }
        (None, None) => {
            // Everything published before the subscription is now in the log; unless it cannot
            // be written now, when a replay would skip the events still waiting: refused
            // (503, Retry-After) rather than served with a gap.
            if !state.dispatcher.hub().flush().await {
                return Err(ApiError::Storage(elfgate_store::StoreError::LogBehind(
                    "events wait to be written".into(),
                )));
            }
            false
        }
    };
    let period = Duration::from_secs(state.config.server.keepalive_secs.max(1));
    let mut keepalive = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    keepalive.set_missed_tick_behavior(MissedTickBehavior::Delay);
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
    let follow_log = state.config.cluster.as_ref().map(|_| {
        // Not at once: the stream has just read what there was (from the owner or the log).
        let mut every = tokio::time::interval_at(
            tokio::time::Instant::now() + FOLLOW_LOG_EVERY,
            FOLLOW_LOG_EVERY,
        );
        every.set_missed_tick_behavior(MissedTickBehavior::Delay);
        every
    });
    let mut cursor = Cursor {
        state,
        session_id,
        from: after,
        reannounce: VecDeque::new(),
        rx: sub.live,
        last: after,
        buffer,
        until_complete,
        log_exhausted,
        lagged: false,
        phase: Phase::Replay,
        keepalive,
        follow_log,
        remote,
        owner,
        log_failing: false,
        bus_gone: false,
        // A client follows the session from here on: a gateway run's permission requests are
        // asked while one does (see PermissionAnswers::WatchersOnly).
        _watching: sub.bus.watch(),
        _close: close,
    };
    let mut first = None;
    if after > known_last && !cursor_from_elsewhere {
        // The client claims events this session never had: it must reload.
        cursor.phase = Phase::Done;
        first = Some(reset_frame(session_id, 1));
    }
    let body = stream::unfold((cursor, first), |(mut cursor, first)| async move {
        if let Some(f) = first {
            return Some((Ok::<_, Infallible>(f), (cursor, None)));
        }
        cursor.next_frame().await.map(|f| (Ok(f), (cursor, None)))
    });
    let mut resp = Response::new(Body::from_stream(body));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: u64, payload: &EventPayload) -> Arc<EventRecord> {
        Arc::new(EventRecord::build(
            SessionId::new(),
            seq,
            None,
            payload.clone(),
        ))
    }

    fn note(seq: u64) -> Arc<EventRecord> {
        event(
            seq,
            &EventPayload::Processing {
                message: format!("n{seq}"),
            },
        )
    }

    fn seqs(frames: &Bytes) -> Vec<u64> {
        std::str::from_utf8(frames)
            .unwrap()
            .lines()
            .filter_map(|l| l.strip_prefix("id: "))
            .map(|v| v.parse().unwrap())
            .collect()
    }

    #[test]
    fn a_reset_frame_carries_the_type_the_session_and_the_cursor_and_no_id() {
        let s = SessionId::new();
        assert_eq!(
            reset_frame(s, 42),
            format!(
                "event: reset\ndata: {{\"type\":\"reset\",\"sessionId\":\"{s}\",\"fromSeq\":42}}\n\n"
            )
        );
    }

    #[test]
    fn gathers_what_is_waiting_and_stops_at_complete() {
        let (tx, mut rx) = broadcast::channel(16);
        for seq in 2..=3 {
            tx.send(note(seq)).unwrap();
        }
        tx.send(event(
            4,
            &EventPayload::Complete {
                finish_reason: elfgate_core::FinishReason::Stop,
            },
        ))
        .unwrap();
        tx.send(note(5)).unwrap();
        let mut last = 1;
        let (out, end) = coalesce(&mut rx, &mut last, &note(1), true);
        assert_eq!(
            (seqs(&out), end, last),
            (vec![1, 2, 3, 4], CoalesceEnd::Complete, 4)
        );
        // What follows the complete is left for the next write.
        let five = rx.try_recv().unwrap();
        // As in the stream: the caller has moved `last` to the event it received.
        last = five.seq;
        let (out, end) = coalesce(&mut rx, &mut last, &five, true);
        assert_eq!((seqs(&out), end, last), (vec![5], CoalesceEnd::Drained, 5));
    }

    #[test]
    fn a_lag_while_gathering_is_reported_not_skipped() {
        let (tx, mut rx) = broadcast::channel(4);
        tx.send(note(1)).unwrap();
        let first = rx.try_recv().unwrap();
        // Ten more than the channel keeps: this receiver loses some.
        for seq in 2..=11 {
            tx.send(note(seq)).unwrap();
        }
        let mut last = first.seq;
        let (out, end) = coalesce(&mut rx, &mut last, &first, false);
        assert_eq!(end, CoalesceEnd::Lagged);
        assert_eq!((seqs(&out), last), (vec![1], 1));
    }
}
