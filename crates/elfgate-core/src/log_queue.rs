//! The queue from the session buses to the event log writer: bounded in events
//! (`[storage] log_queue_events`), so that a writer that falls behind makes publishers wait for
//! room ([`LogSender::room`]) instead of growing memory; the writer drains it in batches off the
//! hot path.

use crate::event::EventRecord;
use crate::ids::SessionId;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::{Notify, Semaphore, SemaphorePermit, TryAcquireError, mpsc, oneshot};

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

/// How many events the log queue holds by default (`[storage] log_queue_events`).
pub const LOG_QUEUE_EVENTS: usize = 16384;

/// A command in the log queue, and whether it holds one unit of the queue's room.
#[derive(Debug)]
struct Queued {
    cmd: LogCommand,
    holds_room: bool,
}

/// The sending side of the event log queue.
///
/// Events take room in the queue before they are sent and give it back when the writer takes
/// them; the other commands (seq reservations, releases, flushes) take none: they are few (one
/// reservation per `SEQ_RESERVE_BLOCK / 2` events, one release per bus closed, one flush per
/// waiting caller), and some are sent where nobody can wait (a bus closing inside a map lock).
/// One queue for all keeps them in order with the events.
///
/// A writer that already holds events and waits for more company (its linger) does not need to
/// be woken by each event that joins them: it waits on [`LogReceiver::nudged`] instead of
/// [`LogReceiver::recv`], and only what cannot wait for its deadline nudges it: a flush, a seq
/// reservation, or a queue filling up ([`NUDGE_EVENTS`] events, or half its room). Otherwise every
/// event published woke the writer's task, which then went back to sleep: on two worker threads,
/// a second task woken per token, and often a sleeping thread woken for it.
#[derive(Debug, Clone)]
pub struct LogSender {
    tx: mpsc::UnboundedSender<Queued>,
    room: Arc<Semaphore>,
    nudge: Arc<Notify>,
    failed_writes: Arc<AtomicU64>,
    /// Nudge the writer once the queue holds this many events.
    nudge_at: usize,
    capacity: usize,
}

/// The receiving side of the event log queue (the writer's).
#[derive(Debug)]
pub struct LogReceiver {
    rx: mpsc::UnboundedReceiver<Queued>,
    room: Arc<Semaphore>,
    nudge: Arc<Notify>,
    /// Log commits that failed (and are retried): the dispatcher ends a run that was going on
    /// meanwhile with an error, since its events were not durable when it ended.
    failed_writes: Arc<AtomicU64>,
}

/// A queue holding this many events nudges a lingering writer (or half its room, if less).
pub const NUDGE_EVENTS: usize = 4096;

/// The queue had no room for an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogQueueFull;

/// Room for one event in the log queue, taken before the event gets its seq so that waiting for
/// it never holds the bus's lock. Dropped unused, it goes back to the queue.
#[derive(Debug)]
pub struct LogRoom<'a> {
    log: &'a LogSender,
    /// None past the bound, or when the writer has stopped (the event then goes nowhere).
    permit: Option<SemaphorePermit<'a>>,
}

/// A log queue holding at most `events` events (at least one).
pub fn log_channel(events: usize) -> (LogSender, LogReceiver) {
    let (tx, rx) = mpsc::unbounded_channel();
    let capacity = events.clamp(1, Semaphore::MAX_PERMITS);
    let room = Arc::new(Semaphore::new(capacity));
    let nudge = Arc::new(Notify::new());
    let failed_writes = Arc::new(AtomicU64::new(0));
    (
        LogSender {
            tx,
            room: room.clone(),
            nudge: nudge.clone(),
            failed_writes: failed_writes.clone(),
            nudge_at: NUDGE_EVENTS.min(capacity.div_ceil(2)),
            capacity,
        },
        LogReceiver {
            rx,
            room,
            nudge,
            failed_writes,
        },
    )
}

impl LogSender {
    /// Room for one event if the queue has some now.
    pub fn try_room(&self) -> Result<LogRoom<'_>, LogQueueFull> {
        match self.room.try_acquire() {
            Ok(permit) => Ok(self.with(Some(permit))),
            // The writer has stopped (shutdown): nothing to wait for.
            Err(TryAcquireError::Closed) => Ok(self.with(None)),
            Err(TryAcquireError::NoPermits) => Err(LogQueueFull),
        }
    }

    /// Waits until the queue has room for one event.
    pub async fn room(&self) -> LogRoom<'_> {
        // An error means the writer has stopped: the event goes nowhere, as after shutdown.
        self.with(self.room.acquire().await.ok())
    }

    /// A place past the bound, for a caller that can neither wait nor drop the event.
    pub fn over_bound(&self) -> LogRoom<'_> {
        self.with(None)
    }

    fn with<'a>(&'a self, permit: Option<SemaphorePermit<'a>>) -> LogRoom<'a> {
        LogRoom { log: self, permit }
    }

    /// Sends a command that takes no room; false when the writer has stopped. Those that the
    /// writer acts on at once (a flush, a seq reservation) nudge it.
    pub(crate) fn control(&self, cmd: LogCommand) -> bool {
        let urgent = matches!(cmd, LogCommand::Flush(_) | LogCommand::Reserve { .. });
        let sent = self
            .tx
            .send(Queued {
                cmd,
                holds_room: false,
            })
            .is_ok();
        if urgent {
            // Stored if the writer is not waiting yet: the nudge is never lost.
            self.nudge.notify_one();
        }
        sent
    }

    /// How many log commits have failed so far (each is retried until it succeeds).
    pub fn failed_writes(&self) -> u64 {
        self.failed_writes.load(Ordering::SeqCst)
    }

    /// Waits until every command sent before is durable; false if that cannot be known (the
    /// writer stopped, or a write failed).
    pub async fn flush(&self) -> bool {
        let (tx, rx) = oneshot::channel();
        self.control(LogCommand::Flush(tx)) && rx.await.is_ok()
    }
}

impl LogRoom<'_> {
    /// Queues `record` in this room.
    pub fn append(self, record: Arc<EventRecord>) {
        let queued = Queued {
            cmd: LogCommand::Append(record),
            holds_room: self.permit.is_some(),
        };
        // The room now travels with the event; the receiver gives it back when it takes it. If
        // the writer has stopped, the permit drops here instead.
        if self.log.tx.send(queued).is_ok()
            && let Some(permit) = self.permit
        {
            permit.forget();
            let queued = self
                .log
                .capacity
                .saturating_sub(self.log.room.available_permits());
            if queued >= self.log.nudge_at {
                self.log.nudge.notify_one();
            }
        }
    }
}

impl LogReceiver {
    /// The next command; None once every sender is gone.
    pub async fn recv(&mut self) -> Option<LogCommand> {
        let q = self.rx.recv().await?;
        Some(self.taken(q))
    }

    /// Returns once something that cannot wait for a lingering writer's deadline was sent (see
    /// [`LogSender`]); the commands themselves are then taken with [`Self::try_recv`].
    /// The future does not borrow the receiver, so that it can wait beside [`Self::recv`].
    pub fn nudged(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let nudge = self.nudge.clone();
        async move { nudge.notified().await }
    }

    /// The next command if one is waiting.
    pub fn try_recv(&mut self) -> Option<LogCommand> {
        let q = self.rx.try_recv().ok()?;
        Some(self.taken(q))
    }

    /// Counts a failed log commit (see [`LogSender::failed_writes`]).
    pub fn write_failed(&self) {
        self.failed_writes.fetch_add(1, Ordering::SeqCst);
    }

    fn taken(&self, q: Queued) -> LogCommand {
        if q.holds_room {
            self.room.add_permits(1);
        }
        q.cmd
    }
}

impl Drop for LogReceiver {
    fn drop(&mut self) {
        // Publishers waiting for room go on without the log, as after shutdown.
        self.room.close();
    }
}
