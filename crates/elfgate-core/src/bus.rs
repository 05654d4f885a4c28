//! The per-session event bus: assigns sequence numbers, hands each event to the log writer (over
//! the queue of [`crate::log_queue`]), and fans it out to live subscribers.
//!
//! Subscribers get events from a bounded broadcast channel. A subscriber that falls more than the
//! channel's capacity behind is told to reset instead of slowing anyone down. A log writer that
//! falls behind does slow the publishers down: once its queue is full, `publish` waits for room
//! before the event gets its seq, so that no durable event is dropped and memory stays bounded.
//! Only a caller that cannot wait (a synchronous callback) publishes past the bound, with
//! [`SessionBus::publish_now`].
//!
//! Because an event is fanned out before it is durable, a crash can lose events that a client has
//! already seen. So that their seqs are never handed out again, a bus works inside a seq range it has
//! reserved durably in advance (`SEQ_RESERVE_BLOCK` at a time, extended through the log writer when half
//! used); after a crash, numbering resumes above the reservation. A bus closed cleanly releases the
//! unused part of its range.

use crate::event::{EventPayload, EventRecord};
use crate::ids::{RunId, SessionId};
use crate::lease::LeaseGuard;
use crate::log_queue::{LogCommand, LogQueueFull, LogRoom, LogSender};
use crate::metrics::Metrics;
use crate::sync::lock;
use dashmap::DashMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

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
    /// The lease of the run publishing (a fleet node): see [`SessionBus::hold_lease`].
    lease: LeaseGuard,
}

/// One session's bus.
#[derive(Debug)]
pub struct SessionBus {
    session_id: SessionId,
    state: Mutex<SeqState>,
    live: broadcast::Sender<Arc<EventRecord>>,
    log: LogSender,
    metrics: Arc<Metrics>,
    /// Clients following the session's event stream (see [`SessionBus::watch`]).
    watchers: Arc<AtomicUsize>,
    /// Where every published event is also handed, in order (a fleet node's NATS publisher).
    relay: Option<EventRelay>,
}

/// A bounded queue that receives every event a hub's buses publish, in publication order (a
/// fleet node relays them to the nodes that follow its sessions). When it is full the event is
/// not queued: a follower finds the gap and reads it from the log.
pub type EventRelay = tokio::sync::mpsc::Sender<Arc<EventRecord>>;

/// A client following a session's events, counted while this lives (see [`SessionBus::watch`]).
#[derive(Debug)]
pub struct Watching(Arc<AtomicUsize>);

impl Drop for Watching {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
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
        relay: Option<EventRelay>,
    ) -> Self {
        let (live, _) = broadcast::channel(SUBSCRIBER_BUFFER);
        SessionBus {
            session_id,
            state: Mutex::new(SeqState {
                next: last_seq + 1,
                reserved,
                recent: VecDeque::with_capacity(RECENT_EVENTS),
                lease: LeaseGuard::unguarded(),
            }),
            live,
            log,
            metrics,
            watchers: Arc::new(AtomicUsize::new(0)),
            relay,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SeqState> {
        lock(&self.state)
    }

    /// Moves the numbering above `last_seq` (and the reservation up to `reserved`) when it is
    /// behind: events numbered elsewhere (another node of a fleet ran the session while this bus
    /// only followed it) reached the log meanwhile. The events kept in memory no longer cover
    /// every seq after them, so they are dropped: a subscriber then reads the log.
    pub fn rebase(&self, last_seq: u64, reserved: u64) {
        let mut st = self.lock();
        if last_seq + 1 > st.next {
            st.next = last_seq + 1;
            st.recent.clear();
        }
        st.reserved = st.reserved.max(reserved);
    }

    /// Guards what is published from now on by the session's lease (a fleet node's run): an event
    /// waits while the lease may have lapsed until the heartbeat says whether it is still this
    /// node's, and once it is lost nothing more is published (not to clients, the log nor the
    /// bus between nodes): another node has ended the session's runs.
    pub fn hold_lease(&self, lease: LeaseGuard) {
        self.lock().lease = lease;
    }

    /// The lease guarding the session's runs on this node (see [`Self::hold_lease`]).
    pub fn lease(&self) -> LeaseGuard {
        self.lock().lease.clone()
    }

    /// The session this bus serves.
    pub fn session_id(&self) -> SessionId {
        self.session_id
    }

    /// Publishes an event: assigns its seq, queues it for the log, and fans it out. Waits, before
    /// anything else, while the log queue is full; a call dropped meanwhile publishes nothing.
    pub async fn publish(&self, run_id: Option<RunId>, payload: EventPayload) -> Arc<EventRecord> {
        self.publish_then(run_id, payload, || ()).await.0
    }

    /// Publishes an event and runs `then` before any later event can be published, so that a state
    /// change made in `then` (e.g. freeing the session for a new run) is ordered after this event.
    pub async fn publish_then<R>(
        &self,
        run_id: Option<RunId>,
        payload: EventPayload,
        then: impl FnOnce() -> R,
    ) -> (Arc<EventRecord>, R) {
        let lease = self.lease();
        if !lease.may_act() {
            // Lost or not: settled before the event gets a seq (a lost lease mutes it below).
            lease.settled().await;
        }
        let room = match self.log.try_room() {
            Ok(room) => room,
            Err(LogQueueFull) => {
                self.metrics.log_queue_wait();
                self.log.room().await
            }
        };
        self.publish_in(room, run_id, payload, then)
    }

    /// Publishes an event without waiting, for a caller that cannot wait (a synchronous callback).
    /// If the log queue is full the event goes past its bound rather than be dropped.
    pub fn publish_now(&self, run_id: Option<RunId>, payload: EventPayload) -> Arc<EventRecord> {
        let room = self.log.try_room().unwrap_or_else(|LogQueueFull| {
            self.metrics.log_queue_overflow();
            self.log.over_bound()
        });
        self.publish_in(room, run_id, payload, || ()).0
    }

    fn publish_in<R>(
        &self,
        room: LogRoom<'_>,
        run_id: Option<RunId>,
        payload: EventPayload,
        then: impl FnOnce() -> R,
    ) -> (Arc<EventRecord>, R) {
        // The lock is held only for this synchronous block, never across an await (room in the log
        // queue was taken before); it keeps seq order equal to log order and to fan-out order.
        let mut st = self.lock();
        if st.lease.is_lost() {
            // Another node took the session over and ended its runs: this node's runs say nothing
            // more, to anyone (the log would refuse it anyway).
            let record = Arc::new(EventRecord::build(
                self.session_id,
                st.next,
                run_id,
                payload,
            ));
            drop(room);
            let out = then();
            drop(st);
            return (record, out);
        }
        let seq = st.next;
        st.next += 1;
        if seq + SEQ_RESERVE_BLOCK / 2 >= st.reserved {
            st.reserved = seq.max(st.reserved) + SEQ_RESERVE_BLOCK;
            self.log.control(LogCommand::Reserve {
                session_id: self.session_id,
                upto: st.reserved,
            });
        }
        let record = Arc::new(EventRecord::build(self.session_id, seq, run_id, payload));
        // A stopped writer means the daemon is shutting down; the event is still fanned out.
        room.append(record.clone());
        let _ = self.live.send(record.clone());
        if let Some(relay) = &self.relay {
            // Full: dropped here, read from the log by whoever follows (see EventRelay).
            let _ = relay.try_send(record.clone());
        }
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

    /// Counts a client that follows the session's events (an SSE stream) while the guard lives.
    /// The daemon's own followers (a gateway call relaying its run) are not counted: the count
    /// says whether anyone could answer a permission request.
    pub fn watch(&self) -> Watching {
        self.watchers.fetch_add(1, Ordering::AcqRel);
        Watching(self.watchers.clone())
    }

    /// How many clients follow the session's events now.
    pub fn watchers(&self) -> usize {
        self.watchers.load(Ordering::Acquire)
    }

    /// How many live subscribers there are.
    pub fn subscriber_count(&self) -> usize {
        self.live.receiver_count()
    }

    fn release(&self) {
        let last = self.last_seq();
        self.log.control(LogCommand::Release {
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
    relay: Option<EventRelay>,
}

impl EventHub {
    /// A hub whose events go to `log`.
    pub fn new(log: LogSender, metrics: Arc<Metrics>) -> Self {
        Self::with_relay(log, metrics, None)
    }

    /// A hub whose events go to `log` and, each as it is published, to `relay`.
    pub fn with_relay(log: LogSender, metrics: Arc<Metrics>, relay: Option<EventRelay>) -> Self {
        EventHub {
            buses: Arc::new(DashMap::new()),
            log,
            metrics,
            relay,
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
                    self.relay.clone(),
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
        self.log.flush().await
    }

    /// How many log commits have failed so far (see [`LogSender::failed_writes`]).
    pub fn log_failed_writes(&self) -> u64 {
        self.log.failed_writes()
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

    /// Publishes an event of this run (see [`SessionBus::publish`]).
    pub async fn emit(&self, payload: EventPayload) -> Arc<EventRecord> {
        self.bus.publish(Some(self.run_id), payload).await
    }

    /// How many clients follow the session's events (see [`SessionBus::watch`]).
    pub fn watchers(&self) -> usize {
        self.bus.watchers()
    }

    /// Publishes an event of this run without waiting, from a synchronous callback (see
    /// [`SessionBus::publish_now`]).
    pub fn emit_now(&self, payload: EventPayload) -> Arc<EventRecord> {
        self.bus.publish_now(Some(self.run_id), payload)
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
    use crate::log_queue::{LOG_QUEUE_EVENTS, LogReceiver, log_channel};

    fn hub() -> (EventHub, LogReceiver) {
        let (tx, rx) = log_channel(LOG_QUEUE_EVENTS);
        (EventHub::new(tx, Arc::new(Metrics::default())), rx)
    }

    fn note(i: usize) -> EventPayload {
        EventPayload::Processing {
            message: format!("n{i}"),
        }
    }

    #[tokio::test]
    async fn seqs_continue_after_the_given_last_and_reservations_run_ahead() {
        let (hub, mut rx) = hub();
        let s = SessionId::new();
        let bus = hub.open(s, 41, 41 + SEQ_RESERVE_BLOCK);
        let first = bus.publish(None, note(0)).await;
        assert_eq!(first.seq, 42);
        let mut reserved_upto = 41 + SEQ_RESERVE_BLOCK;
        for i in 1..(SEQ_RESERVE_BLOCK as usize) {
            let e = bus.publish(None, note(i)).await;
            assert!(
                e.seq < reserved_upto,
                "seq {} handed out beyond the reservation",
                e.seq
            );
            while let Some(cmd) = rx.try_recv() {
                if let LogCommand::Reserve { upto, .. } = cmd {
                    assert!(upto > reserved_upto);
                    reserved_upto = upto;
                }
            }
        }
        assert_eq!(bus.last_seq(), 41 + SEQ_RESERVE_BLOCK);
    }

    #[tokio::test]
    async fn subscribe_after_serves_recent_events_from_memory_or_asks_for_the_log() {
        let (hub, _rx) = hub();
        let s = SessionId::new();
        let bus = hub.open(s, 0, SEQ_RESERVE_BLOCK);
        for i in 0..10 {
            bus.publish(None, note(i)).await;
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
            bus.publish(None, note(i)).await;
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

    #[tokio::test]
    async fn a_subscriber_that_falls_behind_is_told_it_lagged() {
        let (hub, _rx) = hub();
        let s = SessionId::new();
        let bus = hub.open(s, 0, SEQ_RESERVE_BLOCK);
        let mut sub = hub.subscribe_after(s, 0).expect("open bus");
        for i in 0..(SUBSCRIBER_BUFFER + 10) {
            bus.publish(None, note(i)).await;
        }
        assert!(matches!(
            sub.live.try_recv(),
            Err(broadcast::error::TryRecvError::Lagged(_))
        ));
    }

    #[tokio::test]
    async fn a_bus_someone_still_holds_stays_open() {
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

    #[tokio::test]
    async fn an_idle_bus_closes_and_releases_its_reservation() {
        let (hub, mut rx) = hub();
        let s = SessionId::new();
        let bus = hub.open(s, 0, SEQ_RESERVE_BLOCK);
        bus.publish(None, note(0)).await;
        drop(bus);
        hub.close_if_idle(s, || false);
        assert!(hub.get(s).is_none());
        let mut released = None;
        while let Some(cmd) = rx.try_recv() {
            if let LogCommand::Release { last, .. } = cmd {
                released = Some(last);
            }
        }
        assert_eq!(released, Some(1));
    }

    /// A bus over a log queue of `bound` events whose writer reads only when the test says so.
    fn stalled_writer(bound: usize) -> (Arc<SessionBus>, LogReceiver, Arc<Metrics>) {
        let (tx, rx) = log_channel(bound);
        let metrics = Arc::new(Metrics::default());
        let hub = EventHub::new(tx, metrics.clone());
        (
            hub.open(SessionId::new(), 0, SEQ_RESERVE_BLOCK),
            rx,
            metrics,
        )
    }

    fn logged_seqs(rx: &mut LogReceiver) -> Vec<u64> {
        let mut seqs = Vec::new();
        while let Some(cmd) = rx.try_recv() {
            if let LogCommand::Append(e) = cmd {
                seqs.push(e.seq);
            }
        }
        seqs
    }

    fn poll_once<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> std::task::Poll<F::Output> {
        f.poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
    }

    #[tokio::test]
    async fn a_full_log_queue_holds_the_publisher_until_the_writer_takes_an_event() {
        let (bus, mut rx, metrics) = stalled_writer(4);
        let mut sub = bus.subscribe_after(0);
        for i in 0..4 {
            bus.publish(None, note(i)).await;
        }
        let payload = note(4);
        let mut fifth = std::pin::pin!(bus.publish(None, payload));
        assert!(poll_once(fifth.as_mut()).is_pending());
        assert!(poll_once(fifth.as_mut()).is_pending());
        // Waiting, it has taken no seq and reached nobody.
        assert_eq!(bus.last_seq(), 4);
        for seq in 1..=4 {
            assert_eq!(sub.live.try_recv().map(|e| e.seq), Ok(seq));
        }
        assert!(sub.live.try_recv().is_err());
        assert!(matches!(rx.try_recv(), Some(LogCommand::Append(e)) if e.seq == 1));
        let std::task::Poll::Ready(fifth) = poll_once(fifth.as_mut()) else {
            panic!("the publisher still waits though the writer took an event");
        };
        assert_eq!(fifth.seq, 5);
        assert_eq!(sub.live.try_recv().map(|e| e.seq), Ok(5));
        // Nothing lost, nothing reordered.
        assert_eq!(logged_seqs(&mut rx), [2, 3, 4, 5]);
        assert!(
            metrics
                .render_prometheus(0)
                .contains("elfgate_log_queue_waits_total 1\n")
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn publishers_held_by_a_slow_writer_lose_nothing_and_keep_their_order() {
        let (tx, mut rx) = log_channel(3);
        let hub = EventHub::new(tx, Arc::new(Metrics::default()));
        let sessions: Vec<SessionId> = (0..4).map(|_| SessionId::new()).collect();
        let per_session = 200;
        let publishers: Vec<_> = sessions
            .iter()
            .map(|&s| {
                let bus = hub.open(s, 0, SEQ_RESERVE_BLOCK);
                tokio::spawn(async move {
                    for i in 0..per_session {
                        bus.publish(None, note(i)).await;
                    }
                })
            })
            .collect();
        let mut logged: std::collections::HashMap<SessionId, Vec<u64>> = Default::default();
        let mut n = 0;
        while n < sessions.len() * per_session {
            // A guard, not a synchronization: a lost event fails the test instead of hanging it.
            let cmd = tokio::time::timeout(std::time::Duration::from_secs(30), rx.recv())
                .await
                .expect("an event never reached the log")
                .expect("the queue closed");
            if let LogCommand::Append(e) = cmd {
                logged.entry(e.session_id).or_default().push(e.seq);
                n += 1;
            }
            tokio::task::yield_now().await;
        }
        for p in publishers {
            p.await.unwrap();
        }
        for s in sessions {
            assert_eq!(logged[&s], (1..=per_session as u64).collect::<Vec<_>>());
        }
        assert!(rx.try_recv().is_none());
    }

    #[tokio::test]
    async fn a_publisher_that_cannot_wait_goes_past_the_bound_without_widening_it() {
        let (bus, mut rx, metrics) = stalled_writer(1);
        bus.publish(None, note(0)).await;
        assert_eq!(bus.publish_now(None, note(1)).seq, 2);
        assert!(
            metrics
                .render_prometheus(0)
                .contains("elfgate_log_queue_overflows_total 1\n")
        );
        assert_eq!(logged_seqs(&mut rx), [1, 2]);
        // The bound is one event again, not two.
        bus.publish(None, note(2)).await;
        let payload = note(3);
        let mut next = std::pin::pin!(bus.publish(None, payload));
        assert!(poll_once(next.as_mut()).is_pending());
        assert_eq!(logged_seqs(&mut rx), [3]);
        assert!(poll_once(next.as_mut()).is_ready());
    }

    #[tokio::test]
    async fn publishers_waiting_for_a_writer_that_stopped_go_on() {
        let (bus, rx, _) = stalled_writer(1);
        let mut sub = bus.subscribe_after(0);
        bus.publish(None, note(0)).await;
        let payload = note(1);
        let mut second = std::pin::pin!(bus.publish(None, payload));
        assert!(poll_once(second.as_mut()).is_pending());
        drop(rx);
        assert!(poll_once(second.as_mut()).is_ready());
        // Still fanned out, as during shutdown.
        assert_eq!(sub.live.try_recv().map(|e| e.seq), Ok(1));
        assert_eq!(sub.live.try_recv().map(|e| e.seq), Ok(2));
    }
}
