//! The per-session event bus: assigns sequence numbers, hands each event to the log writer, and fans it
//! out to live subscribers.
//!
//! Publishing never waits: the log writer gets the event over an unbounded channel and writes in batches
//! off the hot path, and subscribers get it from a bounded broadcast channel. A subscriber that falls
//! more than the channel's capacity behind is told to reset instead of slowing anyone down.

use crate::event::{EventPayload, EventRecord};
use crate::ids::{RunId, SessionId};
use crate::metrics::Metrics;
use dashmap::DashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{broadcast, mpsc, oneshot};

/// Work for the event log writer.
#[derive(Debug)]
pub enum LogCommand {
    /// Append this event.
    Append(Arc<EventRecord>),
    /// Answer once every event sent before this command is durable.
    Flush(oneshot::Sender<()>),
}

/// The sending side of the event log writer.
pub type LogSender = mpsc::UnboundedSender<LogCommand>;

/// How many events a live subscriber may lag behind before it is reset.
pub const SUBSCRIBER_BUFFER: usize = 1024;

/// One session's bus.
#[derive(Debug)]
pub struct SessionBus {
    session_id: SessionId,
    next_seq: Mutex<u64>,
    live: broadcast::Sender<Arc<EventRecord>>,
    log: LogSender,
    metrics: Arc<Metrics>,
}

impl SessionBus {
    fn new(session_id: SessionId, last_seq: u64, log: LogSender, metrics: Arc<Metrics>) -> Self {
        let (live, _) = broadcast::channel(SUBSCRIBER_BUFFER);
        SessionBus {
            session_id,
            next_seq: Mutex::new(last_seq + 1),
            live,
            log,
            metrics,
        }
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
        let mut next = self.next_seq.lock().unwrap_or_else(|p| p.into_inner());
        let seq = *next;
        *next += 1;
        let record = Arc::new(EventRecord::build(self.session_id, seq, run_id, payload));
        // A closed log channel means the daemon is shutting down; the event is still fanned out.
        let _ = self.log.send(LogCommand::Append(record.clone()));
        let _ = self.live.send(record.clone());
        self.metrics.event_published();
        let out = then();
        drop(next);
        (record, out)
    }

    /// Subscribes to live events. Subscribe before reading the log so that nothing falls in between.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<EventRecord>> {
        self.live.subscribe()
    }

    /// The seq the last published event got (0 when none).
    pub fn last_seq(&self) -> u64 {
        *self.next_seq.lock().unwrap_or_else(|p| p.into_inner()) - 1
    }

    /// How many live subscribers there are.
    pub fn subscriber_count(&self) -> usize {
        self.live.receiver_count()
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

    /// The bus of a session, opened with `last_seq` (the highest stored seq) if none is open.
    /// Callers read `last_seq` after [`EventHub::flush`] so that it is current.
    pub fn open(&self, session_id: SessionId, last_seq: u64) -> Arc<SessionBus> {
        self.buses
            .entry(session_id)
            .or_insert_with(|| {
                Arc::new(SessionBus::new(
                    session_id,
                    last_seq,
                    self.log.clone(),
                    self.metrics.clone(),
                ))
            })
            .clone()
    }

    /// Subscribes to an open bus while holding the map entry, so that the bus cannot be closed
    /// between lookup and subscription.
    pub fn subscribe(
        &self,
        session_id: SessionId,
    ) -> Option<(Arc<SessionBus>, broadcast::Receiver<Arc<EventRecord>>)> {
        self.buses
            .get(&session_id)
            .map(|b| (b.clone(), b.subscribe()))
    }

    /// Closes a session's bus if nobody listens; `still_busy` is checked under the map lock.
    pub fn close_if_idle(&self, session_id: SessionId, still_busy: impl Fn() -> bool) {
        self.buses.remove_if(&session_id, |_, b| {
            b.subscriber_count() == 0 && !still_busy()
        });
    }

    /// Forgets a session's bus (the session was deleted).
    pub fn remove(&self, session_id: SessionId) {
        self.buses.remove(&session_id);
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
