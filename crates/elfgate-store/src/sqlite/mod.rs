//! The SQLite store: WAL journal, a busy timeout, a bounded pool, migrations applied at open.
//!
//! One job per file: opening and closing (`setup`), the concerns whose SQL is SQLite's own
//! (`sessions`, `runs`, `event_log`), the [`Store`](crate::Store) and run ledger implementations
//! (`store_impl`), and ending the runs a crash left behind (`recovery`). The concerns whose SQL is
//! the same on PostgreSQL come from the crate's `shared`, over the pools given by
//! [`SqlBackend`](crate::shared::SqlBackend). The SQL shared with the writer lives outside, in
//! `statements`, so that this module depends on the writer and never the other way round.
mod event_log;
mod recovery;
mod runs;
mod sessions;
mod setup;
mod store_impl;

pub use setup::StoreOptions;

use crate::lock::DatabaseLock;
use crate::writer::Writer;
use sqlx::sqlite::SqlitePool;
use std::sync::Arc;

/// The embedded SQLite store.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    /// One connection: SQLite allows one writer at a time, and queueing writers here (async, in
    /// order) is much faster than letting them sleep in SQLite's busy handler.
    write: SqlitePool,
    /// Readers run concurrently with the writer (WAL).
    read: SqlitePool,
    /// The group-commit writer: the event log and the writes on a run's path.
    writer: Writer,
    /// Whether a run's end is written to the outbox of run-end webhooks
    /// ([`StoreOptions::record_run_ends`]).
    record_run_ends: bool,
    /// This process's claim on the database file (none in memory), released with the last clone.
    _lock: Option<Arc<DatabaseLock>>,
}

/// Reads on the reader pool, writes on the one writer connection.
impl crate::shared::SqlBackend for SqliteStore {
    type Db = sqlx::Sqlite;
    fn shared(&self) -> crate::shared::SharedSql<'_, sqlx::Sqlite> {
        crate::shared::SharedSql {
            read: &self.read,
            write: &self.write,
        }
    }
}

impl SqliteStore {
    /// How a session's events are stored: `(rows, events)` of its event log. Consecutive deltas of
    /// a run that were committed together share a row, so rows can be fewer than events.
    pub async fn event_log_rows(
        &self,
        session_id: elfgate_core::SessionId,
    ) -> crate::StoreResult<(u64, u64)> {
        let (rows, events): (i64, i64) = sqlx::query_as(
            "SELECT COUNT(*), COALESCE(SUM(COALESCE(last_seq - seq, 0) + 1), 0) FROM events \
             WHERE session_id = ?",
        )
        .bind(session_id.to_string())
        .fetch_one(&self.read)
        .await?;
        Ok((rows.max(0) as u64, events.max(0) as u64))
    }
}
