//! The SQL both backends run alike, written once. Statements use `$N` placeholders, which SQLite
//! reads as PostgreSQL does (a parameter named `$N` is the Nth bound value), and bind only text
//! and 64-bit integers, the types both schemas store; rows are decoded by the crate's `rows`.
//!
//! [`SharedSql`] runs them over one backend's pools: SQLite's reader pool and its one writer
//! connection, or PostgreSQL's one pool for both. A backend opts in by [`SqlBackend`], and gets
//! the concerns whose SQL is the same on both ([`WorkflowStore`](crate::WorkflowStore),
//! [`DeliveryStore`](crate::DeliveryStore), [`InboundHookStore`](crate::InboundHookStore),
//! [`AuditLog`](crate::AuditLog)) from the implementations here, and the reads the two share
//! (`reads`) for its own implementations of the others.

mod access_audit;
mod audit;
mod budgets;
mod deliveries;
mod hooks;
mod keys;
mod reads;
mod spend;
mod workflows;

pub(crate) use reads::{delete_session_rows, session_page};

use crate::rows::RowRead;
use sqlx::{Database, IntoArguments, Pool};

/// A database the shared SQL runs on: its rows decode through [`RowRead`], its results count the
/// rows changed. (The bounds on binding text and integers, which a trait cannot carry, are
/// spelled out where the SQL is.)
pub(crate) trait SharedDb:
    Database<Row: RowRead, QueryResult: RowsAffected, Arguments: IntoArguments<Self>>
{
}

impl SharedDb for sqlx::Sqlite {}
impl SharedDb for sqlx::Postgres {}

/// The highest seq logged for a session ($1: the session). A merged row covers `seq..=last_seq`
/// and rows never overlap, so the row with the highest first seq holds it.
pub(crate) const LAST_LOGGED_SEQ: &str =
    "SELECT COALESCE(last_seq, seq) FROM events WHERE session_id = $1 ORDER BY seq DESC LIMIT 1";

/// Rows a statement changed, from either backend's result.
pub(crate) trait RowsAffected {
    fn rows_changed(&self) -> u64;
}

impl RowsAffected for sqlx::sqlite::SqliteQueryResult {
    fn rows_changed(&self) -> u64 {
        self.rows_affected()
    }
}

impl RowsAffected for sqlx::postgres::PgQueryResult {
    fn rows_changed(&self) -> u64 {
        self.rows_affected()
    }
}

/// A backend's pools, for the shared SQL.
pub(crate) trait SqlBackend: Send + Sync {
    /// Its database.
    type Db: SharedDb;
    /// Where the shared SQL runs.
    fn shared(&self) -> SharedSql<'_, Self::Db>;
}

/// One backend's pools, running the shared SQL.
pub(crate) struct SharedSql<'a, DB: Database> {
    /// Where reads go.
    pub(crate) read: &'a Pool<DB>,
    /// Where writes go (SQLite: its one writer connection, so that writers queue here rather than
    /// in SQLite's busy handler).
    pub(crate) write: &'a Pool<DB>,
}
