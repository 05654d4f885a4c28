//! One ordered follower of a session's events, for every reader of them in the daemon: the events
//! after the reader's cursor that it missed (from the bus's memory, the fleet owner's memory or
//! the log), then the live events of the session's bus, each seq once and in order.
//!
//! The SSE route frames what it hands on and the gateway translates it; they differ in what is
//! done when a reader falls more than the live channel holds behind, which is the [`OnLag`] of
//! its [`Policy`]: a client is sent `reset` and reloads from its cursor, the gateway reads the
//! missed events from the log and goes on (it owes its caller the whole run). The live path takes
//! each event as the bus published it (an `Arc`, never copied), and [`Follower::try_next`] lets a
//! reader gather what is already waiting without another await.

pub(crate) mod client;
mod remote;

use crate::event_frame::Framed;
use crate::state::AppState;
use elfgate_core::{EventRecord, EventType, SessionBus, SessionId};
use elfgate_store::StoredEvent;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::time::{Interval, MissedTickBehavior};

/// Events read from the log per query.
const LOG_PAGE: u32 = 1000;

/// One event of the session, as it reached the follower.
#[derive(Debug)]
pub(crate) enum Event {
    /// Published on this node's bus: typed, and serialized once for everyone.
    Live(Arc<EventRecord>),
    /// Read back from the log.
    Logged(StoredEvent),
    /// Relayed by the fleet node that runs the session, already framed for SSE.
    Relayed(Framed),
}

impl Event {
    /// Its seq.
    pub(crate) fn seq(&self) -> u64 {
        match self {
            Event::Live(e) => e.seq,
            Event::Logged(e) => e.seq,
            Event::Relayed(f) => f.seq,
        }
    }

    /// Whether it is a run's `complete`.
    pub(crate) fn is_complete(&self) -> bool {
        match self {
            Event::Live(e) => e.kind() == EventType::Complete,
            Event::Logged(e) => e.event_type == EventType::Complete,
            Event::Relayed(f) => f.complete,
        }
    }
}

/// What [`Follower::next`] has for its reader.
#[derive(Debug)]
pub(crate) enum Next {
    /// The next event.
    Event(Event),
    /// Every event missed before the reader came has been handed on; live ones follow (said once).
    CaughtUp,
    /// Nothing came for the policy's idle period.
    Idle,
    /// The events cannot go on without a gap: the reader reloads from this seq. Nothing follows.
    Reset(u64),
    /// The session's events ended here (its bus closed, or the daemon shuts down). Nothing follows.
    Closed,
}

/// What a reader that fell more than the live channel holds behind gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnLag {
    /// A [`Next::Reset`]: the reader reloads from its cursor.
    Reset,
    /// The missed events, read from the log (once it holds them), and then the live ones again.
    CatchUp,
}

/// How a reader follows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Policy {
    /// When it falls behind the live channel.
    pub on_lag: OnLag,
    /// Say [`Next::Idle`] after this long without anything to say.
    pub idle: Option<Duration>,
    /// End with [`Next::Closed`] when the daemon shuts down.
    pub ends_at_shutdown: bool,
}

/// Where the events missed before the live ones come from.
#[derive(Debug)]
pub(crate) enum Start {
    /// These, in order, read from memory.
    Queued(VecDeque<Event>),
    /// The log, after the cursor; `flushed`: everything published before the subscription is
    /// already in it (else the follower waits until it is).
    Log { flushed: bool },
}

/// Follows one session's events after a cursor. See the module's documentation.
pub(crate) struct Follower {
    state: AppState,
    session_id: SessionId,
    on_lag: OnLag,
    ends_at_shutdown: bool,
    rx: broadcast::Receiver<Arc<EventRecord>>,
    /// The seq of the last event handed on.
    last: u64,
    /// Events to hand on before anything else, in order.
    queue: VecDeque<Event>,
    /// The log is read before the live channel (`flushed` as in [`Start::Log`]).
    log: Option<bool>,
    caught_up: bool,
    /// The live channel dropped events for this reader.
    lagged: bool,
    /// A live event after a gap, seen while gathering: taken by the next [`Follower::next`].
    held: Option<Arc<EventRecord>>,
    ended: bool,
    idle: Option<Interval>,
    /// A fleet node: the events of runs other nodes make. None for a single node.
    remote: Option<remote::Remote>,
    /// Holds the session's bus open while followed (the gateway: its run's bus).
    bus: Option<Arc<SessionBus>>,
    /// Declared last so that it drops after `rx`: the subscription is gone when it runs.
    close: Option<client::CloseOnDrop>,
}

impl Follower {
    /// Follows the live events of `rx` after the events of `start`, all after `after`.
    pub(crate) fn new(
        state: AppState,
        session_id: SessionId,
        rx: broadcast::Receiver<Arc<EventRecord>>,
        after: u64,
        start: Start,
        policy: Policy,
    ) -> Self {
        let (queue, log) = match start {
            Start::Queued(queue) => (queue, None),
            Start::Log { flushed } => (VecDeque::new(), Some(flushed)),
        };
        let idle = policy.idle.map(|period| {
            let mut every = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            every.set_missed_tick_behavior(MissedTickBehavior::Delay);
            every
        });
        Follower {
            state,
            session_id,
            on_lag: policy.on_lag,
            ends_at_shutdown: policy.ends_at_shutdown,
            rx,
            last: after,
            queue,
            log,
            caught_up: false,
            lagged: false,
            held: None,
            ended: false,
            idle,
            remote: None,
            bus: None,
            close: None,
        }
    }

    /// Follows the session on an open bus after `after`: from the bus's memory when it still
    /// holds every event since, else from the log. None when the session has no open bus.
    pub(crate) fn on_open_bus(
        state: &AppState,
        session_id: SessionId,
        after: u64,
        policy: Policy,
    ) -> Option<Self> {
        let sub = state.dispatcher.hub().subscribe_after(session_id, after)?;
        let start = match sub.recent {
            Some(recent) => Start::Queued(recent.into_iter().map(Event::Live).collect()),
            None => Start::Log { flushed: false },
        };
        let mut f = Follower::new(state.clone(), session_id, sub.live, after, start, policy);
        f.bus = Some(sub.bus);
        Some(f)
    }

    /// The daemon's state.
    pub(crate) fn state(&self) -> &AppState {
        &self.state
    }

    /// The session followed.
    pub(crate) fn session_id(&self) -> SessionId {
        self.session_id
    }

    /// The next thing for the reader.
    pub(crate) async fn next(&mut self) -> Next {
        loop {
            if self.ended {
                return Next::Closed;
            }
            if let Some(e) = self.queue.pop_front() {
                self.last = e.seq();
                return Next::Event(e);
            }
            if let Some(flushed) = self.log.take() {
                if !self.read_log(flushed).await {
                    return self.reset();
                }
                continue;
            }
            if !self.caught_up {
                self.caught_up = true;
                return Next::CaughtUp;
            }
            if std::mem::take(&mut self.lagged) {
                match self.on_lag {
                    OnLag::Reset => return self.reset(),
                    OnLag::CatchUp => {
                        self.log = Some(false);
                        continue;
                    }
                }
            }
            if let Some(e) = self.held.take() {
                match self.take_live(e).await {
                    Some(next) => return next,
                    None => continue,
                }
            }
            let idle = async {
                match &mut self.idle {
                    Some(every) => every.tick().await,
                    None => std::future::pending().await,
                }
            };
            let bus_gone = self.remote.as_ref().is_some_and(|r| r.bus_gone);
            let (relayed, log_every) = remote::parts(self.remote.as_mut());
            tokio::select! {
                biased;
                m = remote::relayed(relayed) => {
                    if let Some(next) = self.take_relayed(m).await {
                        return next;
                    }
                }
                r = self.rx.recv(), if !bus_gone => match r {
                    Ok(e) => {
                        if let Some(next) = self.take_live(e).await {
                            return next;
                        }
                    }
                    Err(RecvError::Lagged(_)) => self.lagged = true,
                    Err(RecvError::Closed) => {
                        if !self.bus_closed().await {
                            self.ended = true;
                            return Next::Closed;
                        }
                    }
                },
                _ = self.state.shutdown.cancelled(), if self.ends_at_shutdown => {
                    self.ended = true;
                    return Next::Closed;
                }
                _ = remote::log_due(log_every) => self.read_remote_log().await,
                _ = idle => return Next::Idle,
            }
        }
    }

    /// The next event already at hand, without waiting: what is queued, else what waits in the
    /// live channel. None when there is none, or when something else must come first.
    pub(crate) fn try_next(&mut self) -> Option<Event> {
        if let Some(e) = self.queue.pop_front() {
            self.last = e.seq();
            return Some(e);
        }
        if self.log.is_some() || !self.caught_up || self.lagged || self.held.is_some() {
            return None;
        }
        match waiting(&mut self.rx, self.last) {
            Waiting::Next(e) => {
                self.last = e.seq;
                Some(Event::Live(e))
            }
            // Another node's events came before it: read from the log first, in `next`.
            Waiting::AfterGap(e) if self.remote.is_some() => {
                self.held = Some(e);
                None
            }
            // A single node's bus numbers without gaps.
            Waiting::AfterGap(e) => {
                self.last = e.seq;
                Some(Event::Live(e))
            }
            Waiting::Lagged => {
                self.lagged = true;
                None
            }
            Waiting::Nothing => None,
        }
    }

    /// Ends the follower with a reset from the event after the last one handed on.
    fn reset(&mut self) -> Next {
        self.ended = true;
        Next::Reset(self.last + 1)
    }

    /// A live event: handed on when it is the next one, after the logged events before it when
    /// there is a gap (a fleet node whose bus numbers on from another node's run).
    async fn take_live(&mut self, e: Arc<EventRecord>) -> Option<Next> {
        if e.seq <= self.last {
            return None;
        }
        if e.seq > self.last + 1 && self.remote.is_some() {
            if !self.read_log_before(e.seq).await {
                return Some(self.reset());
            }
            self.queue.push_back(Event::Live(e));
            return None;
        }
        self.last = e.seq;
        Some(Next::Event(Event::Live(e)))
    }

    /// Queues a page of the log after the last event (after waiting until the log holds every
    /// event published so far, unless `flushed`); whether it could be read. A full page leaves
    /// the next one to read.
    async fn read_log(&mut self, flushed: bool) -> bool {
        if !flushed {
            self.wait_for_log().await;
        }
        match self
            .state
            .store
            .events_after(self.session_id, self.last, LOG_PAGE)
            .await
        {
            Ok(page) => {
                if page.len() >= LOG_PAGE as usize {
                    self.log = Some(true);
                }
                self.queue.extend(page.into_iter().map(Event::Logged));
                true
            }
            Err(e) => {
                tracing::warn!(session = %self.session_id, error = %e, "reading the session's log failed");
                false
            }
        }
    }

    /// Waits until every event published so far is in the log. While the log cannot be written,
    /// what it holds stops short of what was published: waited for (the writer retries), so that
    /// nothing is skipped.
    async fn wait_for_log(&self) {
        let mut pause = Duration::from_millis(50);
        while !self.state.dispatcher.hub().flush().await {
            if self.state.is_shutting_down() {
                // The writer may have stopped: what the log holds is all there is.
                break;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }
}

/// What waits in a live channel after the event `last`.
#[derive(Debug)]
enum Waiting {
    /// The next event.
    Next(Arc<EventRecord>),
    /// An event after a gap.
    AfterGap(Arc<EventRecord>),
    /// The channel dropped events for this receiver. `try_recv` reports that once and then moves
    /// on to the oldest event it kept: the next receive would return an event past the gap as if
    /// nothing were missing, so it must be acted on.
    Lagged,
    /// Nothing yet (or the channel closed: the next `recv` says so).
    Nothing,
}

/// The first event waiting in `rx` after `last` (those up to it are dropped).
fn waiting(rx: &mut broadcast::Receiver<Arc<EventRecord>>, last: u64) -> Waiting {
    loop {
        match rx.try_recv() {
            Ok(e) if e.seq <= last => continue,
            Ok(e) if e.seq > last + 1 => return Waiting::AfterGap(e),
            Ok(e) => return Waiting::Next(e),
            Err(TryRecvError::Lagged(_)) => return Waiting::Lagged,
            Err(_) => return Waiting::Nothing,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use elfgate_core::EventPayload;

    fn note(seq: u64) -> Arc<EventRecord> {
        Arc::new(EventRecord::build(
            SessionId::new(),
            seq,
            None,
            EventPayload::Processing {
                message: format!("n{seq}"),
            },
        ))
    }

    fn seq_of(w: Waiting) -> (&'static str, u64) {
        match w {
            Waiting::Next(e) => ("next", e.seq),
            Waiting::AfterGap(e) => ("gap", e.seq),
            Waiting::Lagged => ("lagged", 0),
            Waiting::Nothing => ("nothing", 0),
        }
    }

    #[test]
    fn what_waits_skips_what_was_handed_on_and_tells_a_gap() {
        let (tx, mut rx) = broadcast::channel(16);
        for seq in [2, 3, 4, 6] {
            tx.send(note(seq)).unwrap();
        }
        // 2 and 3 came from memory or the log already.
        assert_eq!(seq_of(waiting(&mut rx, 3)), ("next", 4));
        assert_eq!(seq_of(waiting(&mut rx, 4)), ("gap", 6));
        assert_eq!(seq_of(waiting(&mut rx, 6)), ("nothing", 0));
    }

    #[test]
    fn a_lag_is_reported_not_skipped() {
        let (tx, mut rx) = broadcast::channel(4);
        tx.send(note(1)).unwrap();
        assert_eq!(seq_of(waiting(&mut rx, 0)), ("next", 1));
        // Ten more than the channel keeps: this receiver loses some.
        for seq in 2..=11 {
            tx.send(note(seq)).unwrap();
        }
        assert_eq!(seq_of(waiting(&mut rx, 1)), ("lagged", 0));
    }
}
