//! The SQLite store: WAL journal, a busy timeout, a bounded pool, migrations applied at open.
//!
//! One job per file: opening and closing (`setup`), decoding rows (`rows`), the [`Store`](crate::Store)
//! and run ledger implementations (`store_impl`), and ending the runs a crash left behind
//! (`recovery`). The SQL shared with the writer lives outside, in `statements`, so that this
//! module depends on the writer and never the other way round.

mod recovery;
mod rows;
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
    /// This process's claim on the database file (none in memory), released with the last clone.
    _lock: Option<Arc<DatabaseLock>>,
}
