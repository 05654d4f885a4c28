//! Elfgate's persistence: sessions, runs, chat messages and the event log, behind the [`Store`] trait
//! (one trait per concern, see `concerns`).
//!
//! The SQLite implementation ([`SqliteStore`]) is the embedded default; [`PgStore`] keeps the
//! same data in a PostgreSQL server that several daemons can share. Both pass one conformance
//! suite (tests/conformance.rs).

mod codec;
mod concerns;
mod deltas;
mod error;
mod ledger_rows;
mod lock;
mod log_batch;
mod logrows;
mod postgres;
mod recovery_plan;
mod rows;
mod schema;
mod script;
mod shared;
mod sqlite;
mod statements;
mod writer;

pub use concerns::{
    AccessAudit, AccessEvent, AuditLog, BudgetChange, BudgetStore, DeliveryStatus, DeliveryStore,
    EventLog, FIRST_PROMPT_CHARS, InboundHookStore, KeyChange, KeyStore, RecoveredRun, Reservation,
    RunEndNotice, RunStore, SessionPage, SessionReads, SessionStore, SessionsSeen, SpendGroupBy,
    SpendQuery, SpendStore, SpendSum, StoredAccessEvent, StoredBudget, StoredEvent, StoredKey,
    StoredWorkflow, WebhookDelivery, WorkflowStore, WorkflowWrite,
};
pub use error::StoreError;
pub use postgres::{
    BucketLevel, FleetCounts, FleetMember, NodeInfo, NodeMode, PgStore, is_postgres_url,
};
pub use sqlite::{SqliteStore, StoreOptions};

use async_trait::async_trait;
use elfgate_core::RunLedger;

/// Shorthand for store results.
pub type StoreResult<T> = Result<T, StoreError>;

/// Everything the daemon stores: every concern's trait together. Implementations must be safe to
/// share between tasks.
#[async_trait]
pub trait Store:
    SessionStore
    + RunStore
    + AuditLog
    + EventLog
    + WorkflowStore
    + DeliveryStore
    + InboundHookStore
    + KeyStore
    + AccessAudit
    + BudgetStore
    + SpendStore
    + RunLedger
    + Send
    + Sync
{
    /// Checks that the database answers.
    async fn ping(&self) -> StoreResult<()>;
}
