//! The event log writer: one task that drains the log queue and commits what it holds in one
//! transaction, every row in one INSERT (column arrays through UNNEST, so the statement is the
//! same, and stays prepared, whatever the batch's size). Events wait up to `linger` for company,
//! as on SQLite: a commit then carries many events of each session, and a paced stream's deltas
//! share a row (`logrows`). A flush, a seq reservation or a full batch is written at once.
//!
//! A failed commit (the server restarting, unreachable) is retried with backoff until it lands,
//! the batch kept in order: an accepted event is never dropped, and the log never gets a gap.
//! Meanwhile the queue fills up and publishers wait for room, and a flush reports failure.

use super::fleet::Membership;
use crate::StoreError;
use crate::codec::ts;
use crate::log_batch::{SeqUpdate, next_retry_delay};
use crate::logrows;
use elfgate_core::sync::lock;
use elfgate_core::{EventRecord, EventType, LogCommand, LogReceiver, LogSender, SessionId};
use sqlx::postgres::PgPool;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Most events written in one transaction.
const MAX_BATCH: usize = 4096;
/// The handle of the writer task.
#[derive(Debug, Clone)]
pub(super) struct LogWriter {
    log: LogSender,
    task: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl LogWriter {
    pub(super) fn spawn(
        pool: PgPool,
        queue_events: usize,
        linger: Duration,
        fleet: Option<Arc<Membership>>,
    ) -> LogWriter {
        let (log, rx) = elfgate_core::log_channel(queue_events);
        let task = tokio::spawn(run(pool, rx, linger, fleet));
        LogWriter {
            log,
            task: Arc::new(Mutex::new(Some(task))),
        }
    }

    pub(super) fn log_sender(&self) -> LogSender {
        self.log.clone()
    }

    /// Writes everything queued so far, then stops the task.
    pub(super) async fn shutdown(&self) {
        self.log.flush().await;
        let task = lock(&self.task).take();
        if let Some(t) = task {
            t.abort();
        }
    }
}

#[derive(Default)]
struct Batch {
    events: Vec<Arc<EventRecord>>,
    seq_updates: Vec<SeqUpdate>,
    waiters: Vec<oneshot::Sender<()>>,
}

impl Batch {
    fn take(&mut self, cmd: LogCommand) {
        match cmd {
            LogCommand::Append(e) => self.events.push(e),
            LogCommand::Reserve { session_id, upto } => {
                self.seq_updates.push(SeqUpdate::Reserve(session_id, upto));
            }
            LogCommand::Release { session_id, last } => {
                self.seq_updates.push(SeqUpdate::Release(session_id, last));
            }
            LogCommand::Flush(w) => self.waiters.push(w),
        }
    }

    fn is_empty(&self) -> bool {
        self.events.is_empty() && self.seq_updates.is_empty() && self.waiters.is_empty()
    }

    /// Whether it must be written without lingering: someone waits for it, seqs it reserves are
    /// about to be handed out, or it is full.
    fn is_urgent(&self) -> bool {
        !self.waiters.is_empty()
            || self
                .seq_updates
                .iter()
                .any(|u| matches!(u, SeqUpdate::Reserve(..)))
            || self.events.len() >= MAX_BATCH
    }

    /// Takes what is already queued, without waiting, up to a full batch.
    fn drain_ready(&mut self, rx: &mut LogReceiver) {
        while self.events.len() < MAX_BATCH {
            match rx.try_recv() {
                Some(cmd) => self.take(cmd),
                None => break,
            }
        }
    }
}

async fn run(pool: PgPool, mut rx: LogReceiver, linger: Duration, fleet: Option<Arc<Membership>>) {
    let mut batch = Batch::default();
    loop {
        if batch.is_empty() {
            match rx.recv().await {
                Some(cmd) => batch.take(cmd),
                // Every sender is gone and nothing is left.
                None => break,
            }
        }
        batch.drain_ready(&mut rx);
        if !batch.is_urgent() {
            // Later events join without waking this task; what cannot wait nudges it.
            let nudged = rx.nudged();
            tokio::select! {
                () = tokio::time::sleep(linger) => {}
                () = nudged => {}
            }
            batch.drain_ready(&mut rx);
        }
        let mut delay = None;
        // What arrives while a failed commit waits for its retry: the retry writes exactly the
        // failed batch again, since a commit reported failed may have landed (the connection
        // lost after the server committed) and a longer batch would group its deltas into other
        // rows than the ones that landed.
        let mut next = Batch::default();
        while let Err(e) = write(&pool, fleet.as_deref(), &batch.events, &batch.seq_updates).await {
            rx.write_failed();
            let pause = next_retry_delay(delay);
            delay = Some(pause);
            tracing::error!(error = %e, events = batch.events.len(), retry_in = ?pause,
                "event log write failed; it is retried until it succeeds");
            // A flush answers only when everything before it is durable: its waiter learns of
            // the failure now rather than wait for the server.
            batch.waiters.clear();
            tokio::time::sleep(pause).await;
            // Up to a batch's worth; past it, publishers wait for room in the queue.
            next.drain_ready(&mut rx);
            next.waiters.clear();
        }
        if delay.is_some() {
            tracing::warn!("event log written again after failed attempts");
        }
        for w in batch.waiters.drain(..) {
            let _ = w.send(());
        }
        batch = next;
    }
}

/// The rows' columns as arrays, for one INSERT … SELECT FROM UNNEST.
#[derive(Default)]
struct Columns {
    session_id: Vec<String>,
    seq: Vec<i64>,
    run_id: Vec<Option<String>>,
    event_type: Vec<String>,
    created_at: Vec<String>,
    last_seq: Vec<Option<i64>>,
    payload: Vec<String>,
}

/// Writes events (as rows: a run's consecutive deltas share one) and seq reservation changes in
/// one transaction.
///
/// On a fleet node, the events and reservations of a session whose lease was taken over are left
/// out (fenced: the adopter owns its log now), and a session whose `complete` this batch logs
/// gives its lease up when no run of it is left unfinished.
async fn write(
    pool: &PgPool,
    fleet: Option<&Membership>,
    events: &[Arc<EventRecord>],
    seq_updates: &[SeqUpdate],
) -> Result<(), StoreError> {
    let mut tx = pool.begin().await?;
    let mut fenced = HashSet::new();
    let mut released = Vec::new();
    if let Some(m) = fleet {
        let sessions: HashSet<SessionId> = events
            .iter()
            .map(|e| e.session_id)
            .chain(seq_updates.iter().map(|u| u.session()))
            .collect();
        fenced = m.fenced_of(&mut tx, &sessions).await?;
        for s in &fenced {
            m.fence(*s);
        }
    }
    let kept: Vec<Arc<EventRecord>>;
    let events = if fenced.is_empty() {
        events
    } else {
        kept = events
            .iter()
            .filter(|e| !fenced.contains(&e.session_id))
            .cloned()
            .collect();
        &kept[..]
    };
    if !events.is_empty() {
        let mut c = Columns::default();
        for row in logrows::group(events) {
            let e = row.first();
            c.session_id.push(e.session_id.to_string());
            c.seq.push(e.seq as i64);
            c.run_id.push(e.run_id.map(|r| r.to_string()));
            c.event_type.push(e.event_type().to_string());
            c.created_at.push(ts(&e.ts));
            c.last_seq.push(row.last_seq().map(|s| s as i64));
            c.payload.push(row.into_payload());
        }
        // DO NOTHING: a commit reported failed may have landed (the connection lost after the
        // server committed); its retry groups the same events into the same rows.
        sqlx::query(
            "INSERT INTO events (session_id, seq, run_id, type, created_at, last_seq, payload) \
             SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], \
             $6::bigint[], $7::text[]) ON CONFLICT (session_id, seq) DO NOTHING",
        )
        .bind(c.session_id)
        .bind(c.seq)
        .bind(c.run_id)
        .bind(c.event_type)
        .bind(c.created_at)
        .bind(c.last_seq)
        .bind(c.payload)
        .execute(&mut *tx)
        .await?;
    }
    for u in seq_updates {
        if fenced.contains(&u.session()) {
            continue;
        }
        // On a fleet node, only the owner's bus numbers a session: a bus that followed another
        // node's run, or outlived this node's lease (whose end reset the reservation), must not
        // lower what the owner reserved.
        if let (Some(m), SeqUpdate::Release(s, _)) = (fleet, *u)
            && !m.holds(s)
        {
            continue;
        }
        match *u {
            SeqUpdate::Reserve(s, upto) => {
                sqlx::query(
                    "UPDATE sessions SET event_seq_reserved = GREATEST(event_seq_reserved, $1) \
                     WHERE id = $2",
                )
                .bind(upto as i64)
                .bind(s.to_string())
                .execute(&mut *tx)
                .await?;
            }
            SeqUpdate::Release(s, last) => {
                sqlx::query("UPDATE sessions SET event_seq_reserved = $1 WHERE id = $2")
                    .bind(last as i64)
                    .bind(s.to_string())
                    .execute(&mut *tx)
                    .await?;
            }
        }
    }
    if let Some(m) = fleet {
        let completed: HashSet<SessionId> = events
            .iter()
            .filter(|e| e.kind() == EventType::Complete)
            .map(|e| e.session_id)
            .collect();
        for s in completed {
            if m.release_if_idle(&mut tx, s).await? {
                released.push(s);
            }
        }
    }
    if let Some(m) = fleet {
        m.releasing(&released, true);
    }
    if let Err(e) = tx.commit().await {
        if let Some(m) = fleet {
            m.releasing(&released, false);
        }
        return Err(e.into());
    }
    if let Some(m) = fleet {
        m.released(&released);
    }
    Ok(())
}
