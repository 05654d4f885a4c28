//! The event log writer: drains published events in batches, one transaction per batch, off the
//! hot path. Publishers never wait for it; readers that need the log complete ask it to flush.

use crate::codec::ts;
use elfgate_core::{EventRecord, LogCommand, SessionId};
use sqlx::{QueryBuilder, Sqlite, SqlitePool};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// Most events written in one transaction.
const MAX_BATCH: usize = 2048;
/// Rows per INSERT statement (6 parameters each, far under SQLite's limit).
const ROWS_PER_STATEMENT: usize = 200;

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
    waiters: Vec<oneshot::Sender<()>>,
}

impl Batch {
    fn take(&mut self, cmd: LogCommand) {
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
        !self.events.is_empty() || !self.seq_updates.is_empty()
    }
}

/// Starts the writer. It ends when every sender is gone, after writing what it got.
pub fn spawn_event_writer(
    pool: SqlitePool,
    mut rx: mpsc::UnboundedReceiver<LogCommand>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut batch = Batch::default();
        while let Some(first) = rx.recv().await {
            batch.take(first);
            while batch.events.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(cmd) => batch.take(cmd),
                    Err(_) => break,
                }
            }
            if batch.has_writes() {
                write_batch_with_retry(&pool, &batch).await;
            }
            batch.events.clear();
            batch.seq_updates.clear();
            for w in batch.waiters.drain(..) {
                let _ = w.send(());
            }
        }
    })
}

async fn write_batch_with_retry(pool: &SqlitePool, batch: &Batch) {
    for attempt in 0..3u64 {
        match write_batch(pool, batch).await {
            Ok(()) => return,
            Err(e) => {
                tracing::error!(error = %e, events = batch.events.len(), attempt, "event log write failed");
                tokio::time::sleep(std::time::Duration::from_millis(50 * (attempt + 1))).await;
            }
        }
    }
    tracing::error!(
        events = batch.events.len(),
        "event log batch dropped after retries"
    );
}

async fn write_batch(pool: &SqlitePool, batch: &Batch) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    for chunk in batch.events.chunks(ROWS_PER_STATEMENT) {
        // OR IGNORE: a retried batch may have been half applied before a failed commit.
        let mut qb: QueryBuilder<Sqlite> = QueryBuilder::new(
            "INSERT OR IGNORE INTO events (session_id, seq, run_id, type, payload, created_at) ",
        );
        qb.push_values(chunk, |mut row, e| {
            row.push_bind(e.session_id.to_string())
                .push_bind(e.seq as i64)
                .push_bind(e.run_id.map(|r| r.to_string()))
                .push_bind(e.event_type.as_ref())
                .push_bind(e.json.as_str())
                .push_bind(ts(&e.ts));
        });
        qb.build().execute(&mut *tx).await?;
    }
    for u in &batch.seq_updates {
        let (sql, session_id, value) = match *u {
            SeqUpdate::Reserve(s, upto) => (
                "UPDATE sessions SET event_seq_reserved = MAX(event_seq_reserved, ?) WHERE id = ?",
                s,
                upto,
            ),
            SeqUpdate::Release(s, last) => (
                "UPDATE sessions SET event_seq_reserved = ? WHERE id = ?",
                s,
                last,
            ),
        };
        sqlx::query(sql)
            .bind(value as i64)
            .bind(session_id.to_string())
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await
}
