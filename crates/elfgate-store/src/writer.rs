//! The writer: one task that owns SQLite's single write connection and commits in groups. It
//! drains two queues — the event log (published events, seq reservations; publishers never wait) and
//! the store operations on a run's path (user and assistant messages, run start and end; callers
//! wait for their commit) — and writes everything that is waiting in one transaction. Under load,
//! the messages of many sessions share one commit instead of queueing for one commit each.

use crate::StoreError;
use crate::codec::ts;
use crate::script::Script;
use crate::sqlite::{
    push_insert_messages, push_insert_runs, push_insert_sessions, push_run_finished,
    push_run_started,
};
use elfgate_core::{
    EventRecord, LogCommand, LogSender, Message, Run, RunId, RunOutcome, RunStatus, Session,
    SessionId,
};
use sqlx::SqlitePool;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// Most events written in one transaction.
const MAX_BATCH: usize = 1024;
/// Most events in a transaction that someone is waiting for.
const MAX_BATCH_WITH_WAITERS: usize = 128;
/// Most store operations written in one transaction.
const MAX_OPS: usize = 256;
/// How long events alone may wait for company before they are committed.
const LINGER: std::time::Duration = std::time::Duration::from_millis(5);
/// Most rows per INSERT statement (6 parameters each, far under SQLite's limit).
const ROWS_PER_STATEMENT: usize = 128;

/// A write on a run's path, answered once committed.
#[derive(Debug, Clone)]
pub(crate) enum StoreOp {
    CreateSession(Box<Session>, Box<Run>, Option<Box<Message>>),
    InsertMessage(Message),
    RunStarted {
        session_id: SessionId,
        run_id: RunId,
        at: String,
    },
    RunFinished {
        session_id: SessionId,
        run_id: RunId,
        outcome: RunOutcome,
        at: String,
    },
}

type Ack = oneshot::Sender<Result<(), String>>;

/// A change to a session's seq reservation, applied in the batch's transaction.
#[derive(Debug, Clone, Copy)]
enum SeqUpdate {
    Reserve(SessionId, u64),
    Release(SessionId, u64),
}

#[derive(Default)]
struct Batch {
    events: Vec<Arc<EventRecord>>,
    seq_updates: Vec<SeqUpdate>,
    ops: Vec<(StoreOp, Ack)>,
    waiters: Vec<oneshot::Sender<()>>,
}

impl Batch {
    fn take_log(&mut self, cmd: LogCommand) {
        match cmd {
            LogCommand::Append(e) => self.events.push(e),
            LogCommand::Reserve { session_id, upto } => {
                self.seq_updates.push(SeqUpdate::Reserve(session_id, upto))
            }
            LogCommand::Release { session_id, last } => {
                self.seq_updates.push(SeqUpdate::Release(session_id, last))
            }
            LogCommand::Flush(w) => self.waiters.push(w),
        }
    }

    fn has_writes(&self) -> bool {
        !self.events.is_empty() || !self.seq_updates.is_empty() || !self.ops.is_empty()
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
    pub(crate) fn spawn(pool: SqlitePool) -> Writer {
        let (log, log_rx) = mpsc::unbounded_channel();
        let (ops, ops_rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(run(pool, log_rx, ops_rx));
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
            .map_err(|_| StoreError::Corrupt("the writer has stopped".into()))?;
        match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(StoreError::Corrupt(format!("write failed: {e}"))),
            Err(_) => Err(StoreError::Corrupt("the writer has stopped".into())),
        }
    }

    /// Writes everything queued so far, then stops the task.
    pub(crate) async fn shutdown(&self) {
        let (tx, rx) = oneshot::channel();
        if self.log.send(LogCommand::Flush(tx)).is_ok() {
            let _ = rx.await;
        }
        let task = self.task.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = task {
            t.abort();
        }
    }
}

async fn run(
    pool: SqlitePool,
    mut log_rx: mpsc::UnboundedReceiver<LogCommand>,
    mut ops_rx: mpsc::UnboundedReceiver<(StoreOp, Ack)>,
) {
    let mut batch = Batch::default();
    loop {
        tokio::select! {
            Some(cmd) = log_rx.recv() => batch.take_log(cmd),
            Some(op) = ops_rx.recv() => batch.ops.push(op),
            else => break,
        }
        drain_ready(&mut batch, &mut log_rx, &mut ops_rx);
        // Events alone may wait a moment for more: fewer, larger commits rewrite far fewer pages.
        // Anyone waiting (a store operation, a flush) is served at once.
        let deadline = tokio::time::Instant::now() + LINGER;
        while batch.ops.is_empty() && batch.waiters.is_empty() && batch.events.len() < MAX_BATCH {
            let next = tokio::time::timeout_at(deadline, async {
                tokio::select! {
                    Some(cmd) = log_rx.recv() => Some(Either::Log(cmd)),
                    Some(op) = ops_rx.recv() => Some(Either::Op(op)),
                    else => None,
                }
            })
            .await;
            match next {
                Ok(Some(Either::Log(cmd))) => batch.take_log(cmd),
                Ok(Some(Either::Op(op))) => batch.ops.push(op),
                Ok(None) | Err(_) => break,
            }
            drain_ready(&mut batch, &mut log_rx, &mut ops_rx);
        }
        if batch.has_writes() {
            write_with_fallback(&pool, &mut batch).await;
        }
        batch.events.clear();
        batch.seq_updates.clear();
        for w in batch.waiters.drain(..) {
            let _ = w.send(());
        }
    }
}

enum Either {
    Log(LogCommand),
    Op((StoreOp, Ack)),
}

/// Takes what is already queued, without waiting.
fn drain_ready(
    batch: &mut Batch,
    log_rx: &mut mpsc::UnboundedReceiver<LogCommand>,
    ops_rx: &mut mpsc::UnboundedReceiver<(StoreOp, Ack)>,
) {
    while batch.ops.len() < MAX_OPS {
        match ops_rx.try_recv() {
            Ok(op) => batch.ops.push(op),
            Err(_) => break,
        }
    }
    // Someone waits for this commit: keep it short, the other events go in the next one.
    let limit = if batch.ops.is_empty() {
        MAX_BATCH
    } else {
        MAX_BATCH_WITH_WAITERS
    };
    while batch.events.len() < limit {
        match log_rx.try_recv() {
            Ok(cmd) => batch.take_log(cmd),
            Err(_) => break,
        }
    }
}

/// Writes the batch in one transaction; if that fails, writes the log part and then each operation
/// on its own, so that one bad operation fails alone.
async fn write_with_fallback(pool: &SqlitePool, batch: &mut Batch) {
    let all = async {
        let mut script = Script::transaction();
        push_log(&mut script, batch);
        let ops: Vec<&StoreOp> = batch.ops.iter().map(|(op, _)| op).collect();
        push_ops(&mut script, &ops)?;
        commit(pool, script).await
    };
    match all.await {
        Ok(()) => {
            for (_, ack) in batch.ops.drain(..) {
                let _ = ack.send(Ok(()));
            }
            return;
        }
        Err(e) => tracing::warn!(error = %e, "group commit failed; writing its parts one by one"),
    }
    let mut logged = false;
    for attempt in 0..3u64 {
        let mut script = Script::transaction();
        push_log(&mut script, batch);
        match commit(pool, script).await {
            Ok(()) => {
                logged = true;
                break;
            }
            Err(e) => {
                tracing::error!(error = %e, events = batch.events.len(), attempt, "event log write failed");
                tokio::time::sleep(std::time::Duration::from_millis(50 * (attempt + 1))).await;
            }
        }
    }
    if !logged {
        tracing::error!(
            events = batch.events.len(),
            "event log batch dropped after retries"
        );
    }
    for (op, ack) in batch.ops.drain(..) {
        let one = async {
            let mut script = Script::transaction();
            push_ops(&mut script, &[&op])?;
            commit(pool, script).await
        };
        let _ = ack.send(one.await.map_err(|e| e.to_string()));
    }
}

/// Runs the script as one transaction in a single round trip to SQLite's thread (BEGIN IMMEDIATE,
/// the statements, COMMIT, sent as one query). On failure the transaction is rolled back; a
/// connection whose state is then unknown is closed rather than reused.
async fn commit(pool: &SqlitePool, mut script: Script) -> Result<(), StoreError> {
    script.statement("COMMIT");
    let mut conn = pool.acquire().await?;
    match script.execute(&mut conn).await {
        Ok(()) => Ok(()),
        Err(e) => {
            let rollback = sqlx::query("ROLLBACK").execute(&mut *conn).await;
            if let Err(sqlx::Error::Database(d)) = &rollback
                && d.message().contains("no transaction is active")
            {
                // Nothing was left open.
            } else if rollback.is_err() {
                conn.close_on_drop();
            }
            Err(e.into())
        }
    }
}

/// Appends a group's operations: one statement per table for the inserts (sessions, then runs,
/// then messages in arrival order, so references hold), then the run updates in order.
fn push_ops(script: &mut Script, ops: &[&StoreOp]) -> Result<(), StoreError> {
    let (mut sessions, mut runs, mut messages, mut updates) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for op in ops {
        match op {
            StoreOp::CreateSession(s, r, m) => {
                let status = if r.status == RunStatus::Running {
                    "running"
                } else {
                    "idle"
                };
                sessions.push((&**s, status));
                runs.push(&**r);
                if let Some(m) = m {
                    messages.push(&**m);
                }
            }
            StoreOp::InsertMessage(m) => messages.push(m),
            other => updates.push(other),
        }
    }
    push_insert_sessions(script, &sessions)?;
    push_insert_runs(script, &runs);
    push_insert_messages(script, &messages)?;
    for op in updates {
        match op {
            StoreOp::CreateSession(..) | StoreOp::InsertMessage(_) => {}
            StoreOp::RunStarted {
                session_id,
                run_id,
                at,
            } => push_run_started(script, *session_id, *run_id, at),
            StoreOp::RunFinished {
                session_id,
                run_id,
                outcome,
                at,
            } => push_run_finished(script, *session_id, *run_id, outcome, at),
        }
    }
    Ok(())
}

/// Appends the batch's events and seq reservation changes.
fn push_log(script: &mut Script, batch: &Batch) {
    // Statement sizes are powers of two so that only a handful of distinct statements exist.
    let mut rest: &[Arc<EventRecord>] = &batch.events;
    while !rest.is_empty() {
        let n = 1usize << rest.len().min(ROWS_PER_STATEMENT).ilog2();
        let (chunk, tail) = rest.split_at(n);
        rest = tail;
        // OR IGNORE: a retried batch may have been half applied before a failed commit.
        script
            .statement(
                "INSERT OR IGNORE INTO events (session_id, seq, run_id, type, payload, created_at) ",
            )
            .push_values(chunk, |mut row, e| {
                row.push_bind(e.session_id.to_string())
                    .push_bind(e.seq as i64)
                    .push_bind(e.run_id.map(|r| r.to_string()))
                    .push_bind(e.event_type.to_string())
                    .push_bind(e.json.clone())
                    .push_bind(ts(&e.ts));
            });
    }
    for u in &batch.seq_updates {
        match *u {
            SeqUpdate::Reserve(s, upto) => {
                script
                    .statement("UPDATE sessions SET event_seq_reserved = MAX(event_seq_reserved, ")
                    .push_bind(upto as i64)
                    .push(") WHERE id = ")
                    .push_bind(s.to_string());
            }
            SeqUpdate::Release(s, last) => {
                script
                    .statement("UPDATE sessions SET event_seq_reserved = ")
                    .push_bind(last as i64)
                    .push(" WHERE id = ")
                    .push_bind(s.to_string());
            }
        }
    }
}
