//! The PostgreSQL store: the same [`Store`](crate::Store) as SQLite's over a server that several
//! daemons can share.
//!
//! One job per file: opening and closing (`setup`), the SQL of the writes on a run's path
//! (`statements`), the concerns whose SQL is PostgreSQL's own (`sessions`, `runs`, `event_log`),
//! the [`Store`](crate::Store) and run ledger implementations with a fleet node's lease checks
//! (`store_impl`), the event log writer (`log_writer`), ending the runs a crash left behind
//! (`recovery`), and a fleet node's leases, fencing and adoption (`fleet`). The concerns whose SQL
//! is the same on SQLite come from the crate's `shared`; rows are decoded by the crate's `rows`
//! module, which both backends share.
//!
//! Writes on a run's path are transactions of their own on the pool: PostgreSQL commits
//! concurrent transactions together (one WAL flush for all that wait), which SQLite's single
//! writer had to arrange itself. The event log is written in batches by one task, many rows per
//! statement.

mod event_log;
mod fleet;
mod log_writer;
mod rate_buckets;
mod rate_runs;
mod recovery;
mod runs;
mod sessions;
mod setup;
mod statements;
mod store_impl;

pub use fleet::{FleetCounts, FleetMember, NodeInfo};
pub use rate_buckets::BucketLevel;
pub use setup::{NodeMode, is_postgres_url};

use log_writer::LogWriter;
use sqlx::postgres::PgPool;
use std::sync::Arc;

/// The PostgreSQL store.
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
    log: LogWriter,
    /// Whether a run's end is written to the outbox of run-end webhooks
    /// ([`crate::StoreOptions::record_run_ends`]).
    record_run_ends: bool,
    /// The single-node advisory lock's connection ([`NodeMode::Single`]), closed with the store.
    single_node: Option<Arc<setup::SingleNodeLock>>,
    /// This node's leases ([`NodeMode::Fleet`]).
    fleet: Option<Arc<fleet::Membership>>,
    /// The fleet heartbeat's task, stopped when the store closes.
    heartbeat: Arc<std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>>,
}

/// Reads and writes on the one pool.
impl crate::shared::SqlBackend for PgStore {
    type Db = sqlx::Postgres;
    fn shared(&self) -> crate::shared::SharedSql<'_, sqlx::Postgres> {
        crate::shared::SharedSql {
            read: &self.pool,
            write: &self.pool,
        }
    }
}

impl PgStore {
    /// How a session's events are stored: `(rows, events)` of its event log (merged delta rows
    /// hold several events).
    pub async fn event_log_rows(
        &self,
        session_id: elfgate_core::SessionId,
    ) -> crate::StoreResult<(u64, u64)> {
        let (rows, events): (i64, i64) = sqlx::query_as(
            "SELECT COUNT(*), COALESCE(SUM(COALESCE(last_seq - seq, 0) + 1), 0)::BIGINT \
             FROM events WHERE session_id = $1",
        )
        .bind(session_id.to_string())
        .fetch_one(&self.pool)
        .await?;
        Ok((rows.max(0) as u64, events.max(0) as u64))
    }
}
