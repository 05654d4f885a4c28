//! The per-session event bus: assigns sequence numbers, hands each event to the log writer, and fans it
//! out to live subscribers.
//!
//! Publishing never waits: the log writer gets the event over an unbounded channel and writes in batches
//! off the hot path, and subscribers get it from a bounded broadcast channel. A subscriber that falls
//! more than the channel's capacity behind is told to reset instead of slowing anyone down.
//!
//! Because an event is fanned out before it is durable, a crash can lose events that a client has
//! already seen. So that their seqs are never handed out again, a bus works inside a seq range it has
//! reserved durably in advance (`SEQ_RESERVE_BLOCK` at a time, extended through the log writer when half
//! used); after a crash, numbering resumes above the reservation. A bus closed cleanly releases the
//! unused part of its range.

use crate::event::{EventPayload, EventRecord};
use crate::ids::{RunId, SessionId};
use crate::metrics::Metrics;
use dashmap::DashMap;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::sync::{broadcast, mpsc, oneshot};

/// Work for the event log writer, executed in order.
#[derive(Debug)]
pub enum LogCommand {
    /// Append this event.
    Append(Arc<EventRecord>),
    /// Record that seqs up to `upto` may be in use for this session.
    Reserve {
        /// The session.
        session_id: SessionId,
        /// Highest seq that may be handed out.
        upto: u64,
    },
    /// The session's bus closed cleanly at `last`: its reservation shrinks back to it.
    Release {
        /// The session.
        session_id: SessionId,
        /// The last seq handed out.
        last: u64,
    },
    /// Answer once every command sent before this one is durable.
    Flush(oneshot::Sender<()>),
}

/// The sending side of the event log writer.
pub type LogSender = mpsc::UnboundedSender<LogCommand>;

/// How many events a live subscriber may lag behind before it is reset.
pub const SUBSCRIBER_BUFFER: usize = 1024;

/// How many seqs a bus reserves at a time.
pub const SEQ_RESERVE_BLOCK: u64 = 4096;

/// How many recent events a bus keeps in memory, so that a client connecting to a live session
/// is served without touching the log.
pub const RECENT_EVENTS: usize = 512;

#[derive(Debug)]
struct SeqState {
    next: u64,
    reserved: u64,
    recent: VecDeque<Arc<EventRecord>>,
}

/// One session's bus.
#[derive(Debug)]
pub struct SessionBus {
    session_id: SessionId,
    state: Mutex<SeqState>,
    live: broadcast::Sender<Arc<EventRecord>>,
    log: LogSender,
    metrics: Arc<Metrics>,
}

/// What a subscriber gets: live events from now on, and the events after its cursor that the bus
/// still holds in memory (None when the log must be read).
#[derive(Debug)]
pub struct Subscription {
    /// The bus.
    pub bus: Arc<SessionBus>,
    /// Live events published after the subscription.
    pub live: broadcast::Receiver<Arc<EventRecord>>,
    /// Events after the cursor, from memory, when memory covers them all.
    pub recent: Option<Vec<Arc<EventRecord>>>,
    /// The last seq published at subscription time.
    pub last_seq: u64,
}

impl SessionBus {
    fn new(
        session_id: SessionId,
        last_seq: u64,
        reserved: u64,
        log: LogSender,
        metrics: Arc<Metrics>,
    ) -> Self {
        let (live, _) = broadcast::channel(SUBSCRIBER_BUFFER);
        SessionBus {
            session_id,
            state: Mutex::new(SeqState {
                next: last_seq + 1,
                reserved,
                recent: VecDeque::with_capacity(RECENT_EVENTS),
            }),
            live,
            log,
            metrics,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SeqState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The session this bus serves.
    pub fn session_id(&self) -> SessionId {
        self.session_id
    }

    /// Publishes an event: assigns its seq, queues it for the log, and fans it out.
    pub fn publish(&self, run_id: Option<RunId>, payload: &EventPayload) -> Arc<EventRecord> {
        self.publish_then(run_id, payload, || ()).0
    }

    /// Publishes an event and runs `then` before any later event can be published, so that a state
    /// change made in `then` (e.g. freeing the session for a new run) is ordered after this event.
    pub fn publish_then<R>(
        &self,
        run_id: Option<RunId>,
        payload: &EventPayload,
        then: impl FnOnce() -> R,
    ) -> (Arc<EventRecord>, R) {
        // The lock is held only for this synchronous block, never across an await; it keeps seq order
        // equal to log order and to fan-out order.
        let mut st = self.lock();
        let seq = st.next;
        st.next += 1;
        if seq + SEQ_RESERVE_BLOCK / 2 >= st.reserved {
            st.reserved = seq.max(st.reserved) + SEQ_RESERVE_BLOCK;
            let _ = self.log.send(LogCommand::Reserve {
                session_id: self.session_id,
                upto: st.reserved,
            });
        }
        let record = Arc::new(EventRecord::build(self.session_id, seq, run_id, payload));
        // A closed log channel means the daemon is shutting down; the event is still fanned out.
        let _ = self.log.send(LogCommand::Append(record.clone()));
        let _ = self.live.send(record.clone());
        if st.recent.len() == RECENT_EVENTS {
            st.recent.pop_front();
        }
        st.recent.push_back(record.clone());
        self.metrics.event_published();
        let out = then();
        drop(st);
        (record, out)
    }

    /// Subscribes to live events and takes, atomically with it, the in-memory events after `after`.
    pub fn subscribe_after(self: &Arc<Self>, after: u64) -> Subscription {
        let st = self.lock();
        let live = self.live.subscribe();
        let last_seq = st.next - 1;
        let covered = match st.recent.front() {
            Some(first) => after.saturating_add(1) >= first.seq,
            None => after >= last_seq,
        };
        let recent = covered.then(|| {
            st.recent
                .iter()
                .filter(|e| e.seq > after)
                .cloned()
                .collect()
        });
        Subscription {
            bus: self.clone(),
            live,
            recent,
            last_seq,
        }
    }

    /// The seq the last published event got (0 when none).
    pub fn last_seq(&self) -> u64 {
        self.lock().next - 1
    }

    /// How many live subscribers there are.
    pub fn subscriber_count(&self) -> usize {
        self.live.receiver_count()
    }

    fn release(&self) {
        let last = self.last_seq();
        let _ = self.log.send(LogCommand::Release {
            session_id: self.session_id,
            last,
        });
    }
}

/// All sessions' buses.
#[derive(Debug, Clone)]
pub struct EventHub {
    buses: Arc<DashMap<SessionId, Arc<SessionBus>>>,
    log: LogSender,
    metrics: Arc<Metrics>,
}

impl EventHub {
    /// A hub whose events go to `log`.
    pub fn new(log: LogSender, metrics: Arc<Metrics>) -> Self {
        EventHub {
            buses: Arc::new(DashMap::new()),
            log,
            metrics,
        }
    }

    /// The bus of a session if one is open.
    pub fn get(&self, session_id: SessionId) -> Option<Arc<SessionBus>> {
        self.buses.get(&session_id).map(|b| b.clone())
    }

    /// The bus of a session; if none is open, opens one that continues after `last_seq` inside a
    /// durable reservation up to `reserved`. Callers read `last_seq` after [`EventHub::flush`] as the
    /// larger of the highest logged seq and the stored reservation, and store `reserved` first.
    pub fn open(&self, session_id: SessionId, last_seq: u64, reserved: u64) -> Arc<SessionBus> {
        self.buses
            .entry(session_id)
            .or_insert_with(|| {
                Arc::new(SessionBus::new(
                    session_id,
                    last_seq,
                    reserved,
                    self.log.clone(),
                    self.metrics.clone(),
                ))
            })
            .clone()
    }

    /// Subscribes to an open bus while holding the map entry, so that the bus cannot be closed
    /// between lookup and subscription.
    pub fn subscribe_after(&self, session_id: SessionId, after: u64) -> Option<Subscription> {
        self.buses
            .get(&session_id)
            .map(|b| b.subscribe_after(after))
    }

    /// Closes a session's bus if nobody holds it: no subscriber, no run (`still_busy` is checked
    /// under the map lock), and no other reference (a run being admitted, a task about to publish).
    /// The release of its reservation is queued before the removal is visible, so a later reopen's
    /// flush finds it written.
    pub fn close_if_idle(&self, session_id: SessionId, still_busy: impl Fn() -> bool) {
        self.buses.remove_if(&session_id, |_, b| {
            let idle = Arc::strong_count(b) == 1 && b.subscriber_count() == 0 && !still_busy();
            if idle {
                b.release();
            }
            idle
        });
    }

    /// Forgets a session's bus (the session was deleted).
    pub fn remove(&self, session_id: SessionId) {
        self.buses.remove(&session_id);
    }

    /// Releases every open bus's reservation (clean shutdown); follow with [`EventHub::flush`].
    pub fn release_all(&self) {
        for b in self.buses.iter() {
            b.release();
        }
    }

    /// Waits until every event published so far is durable in the log.
    pub async fn flush(&self) -> bool {
        let (tx, rx) = oneshot::channel();
        if self.log.send(LogCommand::Flush(tx)).is_err() {
            return false;
        }
        rx.await.is_ok()
    }

    /// How many buses are open.
    pub fn open_count(&self) -> usize {
        self.buses.len()
    }
}

/// What an engine uses to report: the session's bus bound to one run.
#[derive(Debug, Clone)]
pub struct EventEmitter {
    bus: Arc<SessionBus>,
    run_id: RunId,
}

impl EventEmitter {
    /// An emitter for `run_id` on `bus`.
    pub fn new(bus: Arc<SessionBus>, run_id: RunId) -> Self {
        EventEmitter { bus, run_id }
    }

    /// Publishes an event of this run.
    pub fn emit(&self, payload: EventPayload) -> Arc<EventRecord> {
        self.bus.publish(Some(self.run_id), &payload)
    }

    /// The run this emitter reports for.
    pub fn run_id(&self) -> RunId {
        self.run_id
    }

    /// The underlying bus.
    pub fn bus(&self) -> &Arc<SessionBus> {
        &self.bus
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SessionId;

    fn hub() -> (EventHub, mpsc::UnboundedReceiver<LogCommand>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (EventHub::new(tx, Arc::new(Metrics::default())), rx)
    }

    fn note(i: usize) -> EventPayload {
        EventPayload::Processing {
            message: format!("n{i}"),
        }
    }

    #[test]
    fn seqs_continue_after_the_given_last_and_reservations_run_ahead() {
        let (hub, mut rx) = hub();
        let s = SessionId::new();
        let bus = hub.open(s, 41, 41 + SEQ_RESERVE_BLOCK);
        let first = bus.publish(None, &note(0));
        assert_eq!(first.seq, 42);
        let mut reserved_upto = 41 + SEQ_RESERVE_BLOCK;
        for i in 1..(SEQ_RESERVE_BLOCK as usize) {
            let e = bus.publish(None, &note(i));
            assert!(
                e.seq < reserved_upto,
                "seq {} handed out beyond the reservation",
                e.seq
            );
            while let Ok(cmd) = rx.try_recv() {
                if let LogCommand::Reserve { upto, .. } = cmd {
                    assert!(upto > reserved_upto);
                    reserved_upto = upto;
                }
            }
        }
        assert_eq!(bus.last_seq(), 41 + SEQ_RESERVE_BLOCK);
    }

    #[test]
    fn subscribe_after_serves_recent_events_from_memory_or_asks_for_the_log() {
        let (hub, _rx) = hub();
        let s = SessionId::new();
        let bus = hub.open(s, 0, SEQ_RESERVE_BLOCK);
        for i in 0..10 {
            bus.publish(None, &note(i));
        }
        let sub = hub.subscribe_after(s, 4).expect("open bus");
        let seqs: Vec<u64> = sub
            .recent
            .expect("in memory")
            .iter()
            .map(|e| e.seq)
            .collect();
        assert_eq!(seqs, (5..=10).collect::<Vec<_>>());
        assert_eq!(sub.last_seq, 10);
        // Past what memory holds, the caller must read the log.
        for i in 0..RECENT_EVENTS {
            bus.publish(None, &note(i));
        }
        assert!(
            hub.subscribe_after(s, 2)
                .expect("open bus")
                .recent
                .is_none()
        );
        // A caught-up cursor needs nothing.
        let sub = hub.subscribe_after(s, bus.last_seq()).expect("open bus");
        assert_eq!(sub.recent.map(|r| r.len()), Some(0));
    }

    #[test]
    fn a_subscriber_that_falls_behind_is_told_it_lagged() {
        let (hub, _rx) = hub();
        let s = SessionId::new();
        let bus = hub.open(s, 0, SEQ_RESERVE_BLOCK);
        let mut sub = hub.subscribe_after(s, 0).expect("open bus");
        for i in 0..(SUBSCRIBER_BUFFER + 10) {
            bus.publish(None, &note(i));
        }
        assert!(matches!(
            sub.live.try_recv(),
            Err(broadcast::error::TryRecvError::Lagged(_))
        ));
    }

    #[test]
    fn a_bus_someone_still_holds_stays_open() {
        let (hub, _rx) = hub();
        let s = SessionId::new();
        let held = hub.open(s, 0, SEQ_RESERVE_BLOCK);
        hub.close_if_idle(s, || false);
        assert!(
            hub.get(s).is_some(),
            "closed while a run was about to publish on it"
        );
        drop(held);
        hub.close_if_idle(s, || true);
        assert!(hub.get(s).is_some(), "closed while the session was busy");
        hub.close_if_idle(s, || false);
        assert!(hub.get(s).is_none());
    }

    #[test]
    fn an_idle_bus_closes_and_releases_its_reservation() {
        let (hub, mut rx) = hub();
        let s = SessionId::new();
        let bus = hub.open(s, 0, SEQ_RESERVE_BLOCK);
        bus.publish(None, &note(0));
        drop(bus);
        hub.close_if_idle(s, || false);
        assert!(hub.get(s).is_none());
        let mut released = None;
        while let Ok(cmd) = rx.try_recv() {
            if let LogCommand::Release { last, .. } = cmd {
                released = Some(last);
            }
        }
        assert_eq!(released, Some(1));
    }
}
