//! The event log writer: drains published events in batches, one transaction per batch, off the
//! hot path. Publishers never wait for it; readers that need the log complete ask it to flush.

use crate::codec::ts;
use elfgate_core::{EventRecord, LogCommand};
use sqlx::{QueryBuilder, Sqlite, SqlitePool};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// Most events written in one transaction.
const MAX_BATCH: usize = 2048;
/// Rows per INSERT statement (6 parameters each, far under SQLite's limit).
const ROWS_PER_STATEMENT: usize = 200;

/// Starts the writer. It ends when every sender is gone, after writing what it got.
pub fn spawn_event_writer(
    pool: SqlitePool,
    mut rx: mpsc::UnboundedReceiver<LogCommand>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut batch: Vec<Arc<EventRecord>> = Vec::with_capacity(MAX_BATCH);
        let mut waiters: Vec<oneshot::Sender<()>> = Vec::new();
        while let Some(first) = rx.recv().await {
            take(first, &mut batch, &mut waiters);
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(cmd) => take(cmd, &mut batch, &mut waiters),
                    Err(_) => break,
                }
            }
            if !batch.is_empty() {
                write_batch_with_retry(&pool, &batch).await;
                batch.clear();
            }
            for w in waiters.drain(..) {
                let _ = w.send(());
            }
        }
    })
}

fn take(
    cmd: LogCommand,
    batch: &mut Vec<Arc<EventRecord>>,
    waiters: &mut Vec<oneshot::Sender<()>>,
) {
    match cmd {
        LogCommand::Append(e) => batch.push(e),
        LogCommand::Flush(w) => waiters.push(w),
    }
}

async fn write_batch_with_retry(pool: &SqlitePool, batch: &[Arc<EventRecord>]) {
    for attempt in 0..3u64 {
        match write_batch(pool, batch).await {
            Ok(()) => return,
            Err(e) => {
                tracing::error!(error = %e, events = batch.len(), attempt, "event log write failed");
                tokio::time::sleep(std::time::Duration::from_millis(50 * (attempt + 1))).await;
            }
        }
    }
    tracing::error!(
        events = batch.len(),
        "event log batch dropped after retries"
    );
}

async fn write_batch(pool: &SqlitePool, batch: &[Arc<EventRecord>]) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    for chunk in batch.chunks(ROWS_PER_STATEMENT) {
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
    tx.commit().await
}
