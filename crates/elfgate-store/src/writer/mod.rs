//! The writer: one task that commits in groups on SQLite's single write connection (a pool of
//! one; three writes that must read inside their own transaction take it directly, see
//! docs/architecture.md, "Writes outside the writer task"). It
//! drains two queues: the store operations on a run's path (session creation, user and assistant
//! messages, run start and end), which callers wait for and which are committed at once, all that
//! are waiting in one transaction; and the event log (published events, seq reservations), which
//! nobody waits for (unless its bounded queue is full) and which is committed `linger` after its
//! first waiting event, later while a checkpoint pass runs, at once for a flush, a seq reservation
//! or a full batch. Under load, the messages of many sessions share one commit, and a log commit
//! carries many events of each session.

use crate::StoreError;
use crate::log_batch::{SeqUpdate, next_retry_delay};
use crate::script::Script;
use elfgate_core::sync::lock;
use elfgate_core::{
    EventRecord, LogCommand, LogReceiver, LogSender, Message, Run, RunId, RunOutcome, Session,
    SessionId,
};
use sqlx::SqlitePool;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

mod scripts;

use scripts::{commit, commit_scripts, log_scripts, push_ops};

/// Most events written in one transaction.
const MAX_BATCH: usize = 4096;
/// Most events per log transaction; operations waiting are written between two.
const LOG_SLICE: usize = 512;
/// Most store operations written in one transaction.
const MAX_OPS: usize = 256;
/// How long events may wait for company before they are committed, by default (`[storage]
/// log_linger_ms`). Each commit rewrites every log page it touches, and each row costs an insert
/// into the table and its index: with many sessions streaming at once, frequent commits carry
/// about one event per session and rewrite a whole page for each, and a paced stream's deltas
/// merge into one row only when they share a commit.
pub(crate) const DEFAULT_LINGER: Duration = Duration::from_millis(50);

/// A write on a run's path, answered once committed.
#[derive(Debug, Clone)]
pub(crate) enum StoreOp {
    CreateSession(Box<Session>, Box<Run>, Option<Box<Message>>),
    InsertMessage(Message),
    /// A later run of a session, stored as queued.
    CreateRun(Box<Run>),
    /// A stored run that was never admitted.
    DeleteRun(RunId),
    RunStarted {
        session_id: SessionId,
        run_id: RunId,
        trace_id: Option<String>,
        at: String,
    },
    RunFinished {
        session_id: SessionId,
        run_id: RunId,
        outcome: Box<RunOutcome>,
        /// The run's closing message, inserted in the same commit.
        answer: Option<Box<Message>>,
        /// Whether the end is written to the outbox of run-end webhooks too.
        record_end: bool,
        at: String,
    },
    /// The id of the trace a running run is in.
    RunTraced {
        run_id: RunId,
        trace_id: String,
    },
    /// The CLI backend's own session id, for a later run to resume.
    CliSessionId {
        session_id: SessionId,
        cli_session_id: String,
        at: String,
    },
    /// A session's stored engineConfig, replaced (its channel permissions changed).
    SessionEngineConfig {
        session_id: SessionId,
        engine_config: String,
        at: String,
    },
}

type Ack = oneshot::Sender<Result<(), StoreError>>;

#[derive(Default)]
struct Batch {
    events: Vec<Arc<EventRecord>>,
    seq_updates: Vec<SeqUpdate>,
    ops: Vec<(StoreOp, Ack)>,
    waiters: Vec<oneshot::Sender<()>>,
    /// A seq reservation is waiting: written without lingering, since the seqs it covers are
    /// about to be handed out.
    urgent: bool,
    /// A log commit failed: how many of the first events it held (its seq updates are back in
    /// `seq_updates`), retried as exactly that slice, so that a commit reported failed that did
    /// land groups its rows the same way again (see `log_scripts`); and when to retry.
    retry: Option<Retry>,
}

/// A log slice whose commit failed, waiting to be written again.
#[derive(Debug, Clone, Copy)]
struct Retry {
    events: usize,
    at: tokio::time::Instant,
    /// The pause before this retry; each failure doubles it, up to `log_batch::MAX_RETRY_DELAY`.
    delay: Duration,
}

impl Batch {
    fn take_log(&mut self, cmd: LogCommand) {
        match cmd {
            LogCommand::Append(e) => self.events.push(e),
            LogCommand::Reserve { session_id, upto } => {
                self.urgent = true;
                self.seq_updates.push(SeqUpdate::Reserve(session_id, upto));
            }
            LogCommand::Release { session_id, last } => {
                self.seq_updates.push(SeqUpdate::Release(session_id, last));
            }
            LogCommand::Flush(w) => self.waiters.push(w),
        }
    }

    fn has_log_writes(&self) -> bool {
        !self.events.is_empty() || !self.seq_updates.is_empty()
    }
}

/// The handle of the writer task.
#[derive(Debug, Clone)]
pub(crate) struct Writer {
    log: LogSender,
    ops: mpsc::UnboundedSender<(StoreOp, Ack)>,
    task: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl Writer {
    /// Starts the writer on `pool` (the write connection); `read` serves its WAL checkpoints.
    /// Publishers wait when `log_queue_events` events wait for it; events wait up to `linger`
    /// for company before they are committed.
    pub(crate) fn spawn(
        pool: SqlitePool,
        read: SqlitePool,
        log_queue_events: usize,
        linger: Duration,
    ) -> Writer {
        let (log, log_rx) = elfgate_core::log_channel(log_queue_events);
        let (ops, ops_rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(run(pool, read, log_rx, ops_rx, linger));
        Writer {
            log,
            ops,
            task: Arc::new(Mutex::new(Some(task))),
        }
    }

    pub(crate) fn log_sender(&self) -> LogSender {
        self.log.clone()
    }

    /// Queues an operation and waits for its commit.
    pub(crate) async fn run(&self, op: StoreOp) -> Result<(), StoreError> {
        let (tx, rx) = oneshot::channel();
        self.ops
            .send((op, tx))
            .map_err(|_| StoreError::Closed("the writer has stopped".into()))?;
        rx.await
            .unwrap_or_else(|_| Err(StoreError::Closed("the writer has stopped".into())))
    }

    /// Writes everything queued so far, then stops the task.
    pub(crate) async fn shutdown(&self) {
        self.log.flush().await;
        let task = lock(&self.task).take();
        if let Some(t) = task {
            t.abort();
        }
    }
}

async fn run(
    pool: SqlitePool,
    read: SqlitePool,
    mut log_rx: LogReceiver,
    mut ops_rx: mpsc::UnboundedReceiver<(StoreOp, Ack)>,
    linger: Duration,
) {
    let mut batch = Batch::default();
    // When the events waiting in `batch` must be written at the latest.
    let mut due: Option<tokio::time::Instant> = None;
    let mut wal = WalTracker::default();
    // A checkpoint pass going on on a reader connection, and how many passes this round made.
    let mut pass: Option<CheckpointPass> = None;
    let mut passes = 0u32;
    let (mut ops_open, mut log_open) = (true, true);
    loop {
        if !ops_open && !log_open && !batch.has_log_writes() && batch.waiters.is_empty() {
            break;
        }
        // While a pass goes on the log waits for it, not for its deadline: no timer then, or the
        // loop would wake at once, over and over, once the deadline has passed. A failed commit
        // waits for its retry instead.
        let wait_until = match batch.retry {
            Some(r) => Some(r.at),
            None if pass.is_none() => due,
            None => None,
        };
        let sleep = async {
            match wait_until {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let checkpointed = async {
            match pass.as_mut() {
                Some(p) => p.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            result = checkpointed => {
                pass = None;
                passes += 1;
                match result {
                    // Frames were committed during the pass (operations keep going): one more
                    // short pass copies them, so that the WAL can restart from its beginning.
                    Ok(Ok((_, log, done))) if done < log && passes < MAX_CHECKPOINT_PASSES => {
                        pass = Some(checkpoint_pass(&read));
                    }
                    Ok(Ok(_)) => wal.reset(),
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "WAL checkpoint failed");
                        wal.reset();
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "WAL checkpoint task failed");
                        wal.reset();
                    }
                }
            }
            op = ops_rx.recv(), if ops_open => match op {
                Some(op) => batch.ops.push(op),
                None => ops_open = false,
            },
            // Events already wait for their deadline: later ones join them without waking this
            // task, unless they cannot wait (see `LogSender`). They are taken below.
            () = log_rx.nudged(), if log_open && due.is_some() => {}
            cmd = log_rx.recv(), if log_open && due.is_none() => match cmd {
                Some(cmd) => batch.take_log(cmd),
                // Closed: write what is left at once.
                None => {
                    log_open = false;
                    batch.urgent = true;
                }
            },
            () = sleep => {}
        }
        drain_ready(&mut batch, &mut log_rx, &mut ops_rx);
        // Operations are waited for: written at once, on their own. Events are not: they wait
        // for company, so that a commit carries many events per session and rewrites each
        // session's log page once rather than once per event.
        if !batch.ops.is_empty() {
            write_ops_with_fallback(&pool, &mut batch.ops).await;
        }
        let now = tokio::time::Instant::now();
        if due.is_none() && batch.has_log_writes() {
            due = Some(now + linger);
        }
        // While a checkpoint goes on, events wait (nobody waits for them) unless someone asks for
        // them or they pile up: the fewer frames are added meanwhile, the sooner it completes.
        // A failed commit is retried at its time, and nothing is written before it: the log stays
        // in seq order, without a gap.
        let log_due = match batch.retry {
            Some(r) => r.at <= now,
            None => {
                !batch.waiters.is_empty()
                    || batch.urgent
                    || batch.events.len() >= MAX_BATCH
                    || (pass.is_none() && due.is_some_and(|at| at <= now))
            }
        };
        if log_due {
            // In slices, so that an operation arriving meanwhile (someone waits for it) does not
            // queue behind thousands of events: it is written between two slices.
            let mut start = 0;
            let mut failed = false;
            let retry = batch.retry.take();
            let mut first_len = retry.map(|r| r.events);
            let mut seq_updates = std::mem::take(&mut batch.seq_updates);
            while start < batch.events.len() || !seq_updates.is_empty() {
                let retried = first_len.is_some();
                let len = first_len.take().unwrap_or(LOG_SLICE);
                let end = batch.events.len().min(start + len);
                if let Err(e) = write_log(&pool, &batch.events[start..end], &seq_updates).await {
                    // Kept, in order, with everything after it: nobody waits for the log, but
                    // an accepted event is never dropped. Publishers wait once the queue is full.
                    log_rx.write_failed();
                    let delay = next_retry_delay(retry.map(|r| r.delay));
                    tracing::error!(error = %e, events = end - start, retry_in = ?delay,
                        "event log write failed; it is retried until it succeeds");
                    batch.events.drain(..start);
                    batch.seq_updates = seq_updates;
                    batch.retry = Some(Retry {
                        events: end - start,
                        at: tokio::time::Instant::now() + delay,
                        delay,
                    });
                    failed = true;
                    break;
                }
                if retried {
                    tracing::warn!("event log written again after failed attempts");
                }
                wal.written += end - start + seq_updates.len();
                seq_updates.clear();
                start = end;
                while batch.ops.len() < MAX_OPS {
                    match ops_rx.try_recv() {
                        Ok(op) => batch.ops.push(op),
                        Err(_) => break,
                    }
                }
                if !batch.ops.is_empty() {
                    write_ops_with_fallback(&pool, &mut batch.ops).await;
                }
            }
            if !failed {
                batch.events.clear();
                batch.urgent = false;
                due = None;
            }
            // A flush is answered only if everything before it is durable; otherwise its waiter is
            // dropped after the attempt, and the flush reports failure rather than wait for the
            // disk.
            for w in batch.waiters.drain(..) {
                if !failed {
                    let _ = w.send(());
                }
            }
            // Not while operations are queued (a burst of new sessions, say): the pass competes
            // with them for the disk; unless it was put off too long.
            if pass.is_none() && wal.is_due() && (ops_rx.is_empty() || wal.is_overdue()) {
                pass = Some(checkpoint_pass(&read));
                passes = 0;
            }
        }
    }
}

/// One `PRAGMA wal_checkpoint(PASSIVE)` on a reader connection, in its own task so that it goes on
/// while the writer commits: (busy, frames in the WAL, frames copied).
type CheckpointPass = tokio::task::JoinHandle<Result<(i64, i64, i64), sqlx::Error>>;

/// Most passes of one checkpoint round (see [`WalTracker`]).
const MAX_CHECKPOINT_PASSES: u32 = 4;

fn checkpoint_pass(read: &SqlitePool) -> CheckpointPass {
    let read = read.clone();
    tokio::spawn(async move {
        sqlx::query_as::<_, (i64, i64, i64)>("PRAGMA wal_checkpoint(PASSIVE)")
            .fetch_one(&read)
            .await
    })
}

/// When the WAL is checkpointed: after `CHECKPOINT_AFTER_ROWS` logged rows, or `CHECKPOINT_AFTER`
/// if anything was logged.
///
/// Not automatically: an automatic checkpoint runs inside whichever commit crosses its threshold
/// and holds up every commit queued behind it (for milliseconds under load, often a commit that
/// a new session waits for). The writer starts a PASSIVE checkpoint on a reader connection instead and
/// goes on committing operations; event log commits wait meanwhile (nobody waits for them), so
/// that few frames are added during the pass, and a second short pass copies those. Once a pass
/// has copied everything, the next commit reuses the WAL from its start; a checkpointer that raced
/// a writer under constant load would never catch up, and the WAL would grow without bound.
struct WalTracker {
    written: usize,
    last: tokio::time::Instant,
}

impl Default for WalTracker {
    fn default() -> Self {
        WalTracker {
            written: 0,
            last: tokio::time::Instant::now(),
        }
    }
}

/// Checkpoint after this many logged rows...
const CHECKPOINT_AFTER_ROWS: usize = 4096;
/// ...or this long after the last checkpoint, if anything was logged.
const CHECKPOINT_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

impl WalTracker {
    fn is_overdue(&self) -> bool {
        self.written >= 4 * CHECKPOINT_AFTER_ROWS
    }

    fn is_due(&self) -> bool {
        self.written >= CHECKPOINT_AFTER_ROWS
            || (self.written > 0 && self.last.elapsed() >= CHECKPOINT_AFTER)
    }

    fn reset(&mut self) {
        self.written = 0;
        self.last = tokio::time::Instant::now();
    }
}

/// Takes what is already queued, without waiting.
fn drain_ready(
    batch: &mut Batch,
    log_rx: &mut LogReceiver,
    ops_rx: &mut mpsc::UnboundedReceiver<(StoreOp, Ack)>,
) {
    while batch.ops.len() < MAX_OPS {
        match ops_rx.try_recv() {
            Ok(op) => batch.ops.push(op),
            Err(_) => break,
        }
    }
    while batch.events.len() < MAX_BATCH {
        match log_rx.try_recv() {
            Some(cmd) => batch.take_log(cmd),
            None => break,
        }
    }
}

/// Writes events and seq reservation changes in one transaction.
async fn write_log(
    pool: &SqlitePool,
    events: &[Arc<EventRecord>],
    seq_updates: &[SeqUpdate],
) -> Result<(), StoreError> {
    commit_scripts(pool, log_scripts(events, seq_updates)).await
}

/// Writes a group of operations in one transaction; if that fails, each on its own, so that one
/// bad operation fails alone.
async fn write_ops_with_fallback(pool: &SqlitePool, ops: &mut Vec<(StoreOp, Ack)>) {
    let all = async {
        let mut script = Script::transaction();
        let refs: Vec<&StoreOp> = ops.iter().map(|(op, _)| op).collect();
        push_ops(&mut script, &refs)?;
        commit(pool, script).await
    };
    match all.await {
        Ok(()) => {
            for (_, ack) in ops.drain(..) {
                let _ = ack.send(Ok(()));
            }
            return;
        }
        Err(e) => tracing::warn!(error = %e, "group commit failed; writing its parts one by one"),
    }
    for (op, ack) in ops.drain(..) {
        let one = async {
            let mut script = Script::transaction();
            push_ops(&mut script, &[&op])?;
            commit(pool, script).await
        };
        let _ = ack.send(one.await);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use elfgate_core::EventPayload;
    #[tokio::test]
    async fn writes_what_is_left_and_stops_when_both_queues_close() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/w.db?mode=rwc", dir.path().display());
        let pool = SqlitePool::connect(&url).await.unwrap();
        crate::schema::MIGRATOR.run(&pool).await.unwrap();
        let (log, log_rx) = elfgate_core::log_channel(2);
        let (ops, ops_rx) = mpsc::unbounded_channel::<(StoreOp, Ack)>();
        let task = tokio::spawn(run(
            pool.clone(),
            pool.clone(),
            log_rx,
            ops_rx,
            DEFAULT_LINGER,
        ));
        let session = SessionId::new();
        for seq in 1..=3 {
            let e = EventRecord::build(session, seq, None, EventPayload::SessionCreated {});
            log.room().await.append(Arc::new(e));
        }
        drop(log);
        drop(ops);
        // A guard, not a synchronization: the task ends by itself once both queues are closed.
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("the writer did not stop")
            .unwrap();
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(n, 3);
    }
}
