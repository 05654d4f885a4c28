//! The store's error type: what kind of failure it was, so that callers can tell a database that
//! is momentarily busy (worth retrying) from one that is broken, with the driver's text kept as
//! detail for the log.

use std::time::Duration;

/// A storage failure. The `String` of each variant is the driver's or the store's own detail: for
/// logs, not for clients.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another connection holds the lock the operation needs (SQLITE_BUSY), or no pooled
    /// connection became free in time.
    #[error("the database is busy: {0}")]
    Busy(String),
    /// The database server cannot be reached, refuses connections, or is shutting down or
    /// restarting (a PostgreSQL restart, a lost connection): worth retrying once it is back.
    #[error("the database server is unavailable: {0}")]
    Unavailable(String),
    /// A table is locked by another statement of a shared connection (SQLITE_LOCKED).
    #[error("a database table is locked: {0}")]
    TableLocked(String),
    /// The disk or the database is full (SQLITE_FULL).
    #[error("the database is full: {0}")]
    Full(String),
    /// Reading or writing the database files failed (SQLITE_IOERR, CANTOPEN, READONLY, or an
    /// I/O error around the database).
    #[error("database I/O error: {0}")]
    Io(String),
    /// A write broke a constraint: a duplicate key, a reference to a missing row.
    #[error("constraint violated: {0}")]
    Constraint(String),
    /// The database file is damaged, or a stored row could not be read back.
    #[error("corrupt data: {0}")]
    Corrupt(String),
    /// A row the operation expected is not there.
    #[error("not found: {0}")]
    NotFound(String),
    /// The event log has events that could not be written yet (its writer retries them): what
    /// must read the log whole, or reserve seqs past it, cannot be served until they are.
    #[error("the event log is behind: {0}")]
    LogBehind(String),
    /// The store is closed or its writer has stopped (the daemon is shutting down).
    #[error("the store is closed: {0}")]
    Closed(String),
    /// Any other database failure.
    #[error("database error: {0}")]
    Database(String),
    /// Migrations failed.
    #[error("migration error: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// The storage URL is not one this build supports.
    #[error("unsupported storage url '{0}'")]
    UnsupportedUrl(String),
    /// Another process (or another open store) uses the database.
    #[error(
        "database {} is in use by another elfgate process{holder}: it holds the lock on {}; \
         stop that process first, or use another database",
        database.display(),
        lock.display()
    )]
    Locked {
        /// The database file.
        database: std::path::PathBuf,
        /// The lock file.
        lock: std::path::PathBuf,
        /// " (pid N)" when known.
        holder: String,
    },
    /// Another process holds the lock of the database file itself, which it opened by another
    /// name (a hard link).
    #[error(
        "database {} is in use by another elfgate process, which opened the same file (device \
         {device}, inode {inode}) by another name, a hard link; stop that process first, or use \
         another database",
        database.display()
    )]
    LockedByAnotherName {
        /// The database file, as this process names it.
        database: std::path::PathBuf,
        /// The file's device.
        device: u64,
        /// The file's inode.
        inode: u64,
    },
    /// Another elfgate process that runs as a single node (no `[cluster]`) uses this PostgreSQL
    /// database: it holds the database's single-node advisory lock.
    #[error(
        "the PostgreSQL database is in use by another elfgate node that runs without [cluster]: \
         stop it, use another database, or run every node with a [cluster] section"
    )]
    InUse,
    /// Another node of the fleet holds a live lease on the session (it is running it).
    #[error("session {session} is being run by node {node}")]
    OwnedElsewhere {
        /// The session.
        session: String,
        /// The node holding its lease.
        node: String,
    },
    /// This node's lease on the session was taken over by another node (it was paused or cut off
    /// past its lease): its writes to the session are refused.
    #[error("session {0}: this node's lease was taken over by another node (fenced)")]
    Fenced(String),
    /// The lock file could not be created or locked.
    #[error("cannot lock {}: {source}", path.display())]
    Lock {
        /// The lock file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// SQLite's primary result codes (the low byte of an extended code).
mod code {
    pub const LOCKED: i64 = 6;
    pub const BUSY: i64 = 5;
    pub const READONLY: i64 = 8;
    pub const IOERR: i64 = 10;
    pub const CORRUPT: i64 = 11;
    pub const NOTFOUND: i64 = 12;
    pub const FULL: i64 = 13;
    pub const CANTOPEN: i64 = 14;
    pub const CONSTRAINT: i64 = 19;
    pub const NOTADB: i64 = 26;
}

impl StoreError {
    /// Whether the same operation may succeed if tried again shortly: the database was busy or
    /// locked by someone else, or full (space may be freed). Nothing was written.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StoreError::Busy(_)
                | StoreError::Unavailable(_)
                | StoreError::TableLocked(_)
                | StoreError::Full(_)
                | StoreError::LogBehind(_)
        )
    }

    /// How long a client should wait before trying again, for a transient failure.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            StoreError::Busy(_) | StoreError::TableLocked(_) => Some(Duration::from_secs(1)),
            // A restarting server is usually back within seconds; the pool reconnects by itself.
            StoreError::Unavailable(_) => Some(Duration::from_secs(2)),
            // Freeing space takes an operator, not a moment.
            StoreError::Full(_) => Some(Duration::from_secs(30)),
            // The writer retries every second; the cause is usually a full disk.
            StoreError::LogBehind(_) => Some(Duration::from_secs(5)),
            _ => None,
        }
    }

    /// What went wrong, without the detail: safe to show to a client.
    pub fn summary(&self) -> &'static str {
        match self {
            StoreError::Busy(_) => "the database is busy",
            StoreError::Unavailable(_) => "the database server is unavailable",
            StoreError::TableLocked(_) => "a database table is locked",
            StoreError::Full(_) => "the database is full",
            StoreError::Io(_) => "database I/O error",
            StoreError::Constraint(_) => "a database constraint was violated",
            StoreError::Corrupt(_) => "corrupt data in the database",
            StoreError::NotFound(_) => "a stored record was not found",
            StoreError::LogBehind(_) => "the event log cannot be written at the moment",
            StoreError::Closed(_) => "the store is closed",
            StoreError::Database(_) => "database error",
            StoreError::Migrate(_) => "database migration error",
            StoreError::UnsupportedUrl(_) => "unsupported storage url",
            StoreError::OwnedElsewhere { .. } => "the session is being run by another node",
            StoreError::Fenced(_) => "this node no longer owns the session",
            StoreError::Locked { .. }
            | StoreError::LockedByAnotherName { .. }
            | StoreError::InUse => "the database is in use by another process",
            StoreError::Lock { .. } => "cannot lock the database",
        }
    }

    /// Logs this failure with its detail under a new reference and returns what a client may be
    /// shown instead: the kind and the reference, never the driver's text (SQL, paths,
    /// constraint names). Whoever reports the failure can be pointed at the log line.
    pub fn report(&self) -> String {
        let reference = uuid::Uuid::now_v7();
        tracing::error!(%reference, error = %self, "storage failure");
        format!("{} (ref {reference})", self.summary())
    }

    /// [`Self::report`] for a failure met while answering the HTTP request `request_id`: logged
    /// with that id, which the client has in its answer's `x-request-id`.
    pub fn report_for_request(&self, request_id: &str) -> String {
        tracing::error!(request_id, error = %self, "storage failure");
        format!("{} (request {request_id})", self.summary())
    }

    /// Classifies a SQLite result code (extended or primary).
    fn from_sqlite_code(code: i64, detail: String) -> StoreError {
        match code & 0xff {
            code::BUSY => StoreError::Busy(detail),
            code::LOCKED => StoreError::TableLocked(detail),
            code::FULL => StoreError::Full(detail),
            code::IOERR | code::CANTOPEN | code::READONLY => StoreError::Io(detail),
            code::CONSTRAINT => StoreError::Constraint(detail),
            code::CORRUPT | code::NOTADB => StoreError::Corrupt(detail),
            code::NOTFOUND => StoreError::NotFound(detail),
            _ => StoreError::Database(detail),
        }
    }

    /// Classifies a PostgreSQL SQLSTATE by its class (the first two characters).
    fn from_sqlstate(state: &str, detail: String) -> StoreError {
        match state.get(..2).unwrap_or("") {
            // Connection exceptions; operator intervention (admin_shutdown, crash_shutdown,
            // cannot_connect_now: a server stopping or starting); insufficient resources but a
            // full disk (too many connections, out of memory).
            "08" | "57" => StoreError::Unavailable(detail),
            "53" if state == "53100" => StoreError::Full(detail),
            "53" => StoreError::Busy(detail),
            // Serialization failure, deadlock, lock not available: nothing was written.
            "40" | "55" => StoreError::Busy(detail),
            "23" => StoreError::Constraint(detail),
            "XX" => StoreError::Corrupt(detail),
            "58" => StoreError::Io(detail),
            _ => StoreError::Database(detail),
        }
    }
}

/// Whether an I/O error is a network connection's failure, which only a database server's
/// connection meets (SQLite reads local files): the server went away or refuses connections.
fn is_connection_failure(e: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(
        e.kind(),
        ErrorKind::ConnectionRefused
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::NotConnected
            | ErrorKind::BrokenPipe
            | ErrorKind::UnexpectedEof
            | ErrorKind::TimedOut
            | ErrorKind::HostUnreachable
            | ErrorKind::NetworkUnreachable
            | ErrorKind::AddrNotAvailable
    )
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        let detail = e.to_string();
        match &e {
            sqlx::Error::Database(db)
                if db
                    .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                    .is_some() =>
            {
                match db.code() {
                    Some(state) => StoreError::from_sqlstate(&state, detail),
                    None => StoreError::Database(detail),
                }
            }
            sqlx::Error::Database(db) => match db.code().and_then(|c| c.parse::<i64>().ok()) {
                Some(code) => StoreError::from_sqlite_code(code, detail),
                None => StoreError::Database(detail),
            },
            sqlx::Error::PoolTimedOut => StoreError::Busy(detail),
            sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed => StoreError::Closed(detail),
            sqlx::Error::Io(io) if is_connection_failure(io) => StoreError::Unavailable(detail),
            sqlx::Error::Io(_) => StoreError::Io(detail),
            sqlx::Error::RowNotFound => StoreError::NotFound(detail),
            sqlx::Error::ColumnDecode { .. }
            | sqlx::Error::Decode(_)
            | sqlx::Error::ColumnNotFound(_)
            | sqlx::Error::ColumnIndexOutOfBounds { .. } => StoreError::Corrupt(detail),
            sqlx::Error::Migrate(_) => StoreError::Database(detail),
            _ => StoreError::Database(detail),
        }
    }
}

impl From<std::io::Error> for StoreError {
    fn from(e: std::io::Error) -> Self {
        StoreError::Io(format!("cannot prepare the database location: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgresql_states_are_classified_by_their_class() {
        let kind = |state: &str| {
            let e = StoreError::from_sqlstate(state, "detail".into());
            (e.is_transient(), e.summary())
        };
        // admin_shutdown (a restart), cannot_connect_now (starting), connection_failure.
        for state in ["57P01", "57P03", "08006"] {
            assert_eq!(
                kind(state),
                (true, "the database server is unavailable"),
                "{state}"
            );
        }
        // serialization_failure, deadlock_detected, lock_not_available, too_many_connections.
        for state in ["40001", "40P01", "55P03", "53300"] {
            assert_eq!(kind(state), (true, "the database is busy"), "{state}");
        }
        assert_eq!(kind("53100"), (true, "the database is full"));
        assert_eq!(kind("23505"), (false, "a database constraint was violated"));
        assert_eq!(kind("XX001"), (false, "corrupt data in the database"));
        assert_eq!(kind("42P01"), (false, "database error"));
    }

    #[test]
    fn sqlite_codes_are_classified_by_their_primary_code() {
        let d = || "detail".to_string();
        assert!(matches!(
            StoreError::from_sqlite_code(5, d()),
            StoreError::Busy(_)
        ));
        // SQLITE_BUSY_SNAPSHOT, SQLITE_BUSY_RECOVERY.
        assert!(matches!(
            StoreError::from_sqlite_code(517, d()),
            StoreError::Busy(_)
        ));
        assert!(matches!(
            StoreError::from_sqlite_code(261, d()),
            StoreError::Busy(_)
        ));
        assert!(matches!(
            StoreError::from_sqlite_code(6, d()),
            StoreError::TableLocked(_)
        ));
        assert!(matches!(
            StoreError::from_sqlite_code(13, d()),
            StoreError::Full(_)
        ));
        // SQLITE_IOERR_WRITE, SQLITE_CANTOPEN, SQLITE_READONLY.
        assert!(matches!(
            StoreError::from_sqlite_code(778, d()),
            StoreError::Io(_)
        ));
        assert!(matches!(
            StoreError::from_sqlite_code(14, d()),
            StoreError::Io(_)
        ));
        assert!(matches!(
            StoreError::from_sqlite_code(8, d()),
            StoreError::Io(_)
        ));
        // SQLITE_CONSTRAINT_FOREIGNKEY, SQLITE_CONSTRAINT_UNIQUE.
        assert!(matches!(
            StoreError::from_sqlite_code(787, d()),
            StoreError::Constraint(_)
        ));
        assert!(matches!(
            StoreError::from_sqlite_code(2067, d()),
            StoreError::Constraint(_)
        ));
        assert!(matches!(
            StoreError::from_sqlite_code(11, d()),
            StoreError::Corrupt(_)
        ));
        assert!(matches!(
            StoreError::from_sqlite_code(26, d()),
            StoreError::Corrupt(_)
        ));
        assert!(matches!(
            StoreError::from_sqlite_code(1, d()),
            StoreError::Database(_)
        ));
    }

    #[test]
    fn only_busy_locked_and_full_are_transient() {
        let d = || "x".to_string();
        for e in [
            StoreError::Busy(d()),
            StoreError::TableLocked(d()),
            StoreError::Full(d()),
        ] {
            assert!(e.is_transient(), "{e}");
            assert!(e.retry_after().is_some(), "{e}");
        }
        for e in [
            StoreError::Io(d()),
            StoreError::Constraint(d()),
            StoreError::Corrupt(d()),
            StoreError::NotFound(d()),
            StoreError::Closed(d()),
            StoreError::Database(d()),
        ] {
            assert!(!e.is_transient(), "{e}");
            assert_eq!(e.retry_after(), None, "{e}");
            assert!(
                !e.summary().contains('x'),
                "the summary leaves the detail out"
            );
        }
        let shown = StoreError::Corrupt("row 7: invalid uuid 'x'".into()).report();
        assert!(
            shown.starts_with("corrupt data in the database (ref "),
            "{shown}"
        );
        assert!(!shown.contains("row 7"), "{shown}");
        assert!(matches!(
            StoreError::from(sqlx::Error::PoolTimedOut),
            StoreError::Busy(_)
        ));
        assert!(matches!(
            StoreError::from(sqlx::Error::PoolClosed),
            StoreError::Closed(_)
        ));
    }

    /// A real SQLite failure carries its code through sqlx: a second writer on a locked file is
    /// busy, a duplicate key a constraint violation.
    #[tokio::test]
    async fn real_sqlite_failures_are_classified() {
        use sqlx::Connection;
        use sqlx::sqlite::SqliteConnectOptions;
        use std::str::FromStr;
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/e.db?mode=rwc", dir.path().display());
        let opts = SqliteConnectOptions::from_str(&url)
            .unwrap()
            .busy_timeout(Duration::ZERO);
        let mut a = sqlx::SqliteConnection::connect_with(&opts).await.unwrap();
        let mut b = sqlx::SqliteConnection::connect_with(&opts).await.unwrap();
        sqlx::query("CREATE TABLE t (id INTEGER PRIMARY KEY)")
            .execute(&mut a)
            .await
            .unwrap();
        sqlx::query("INSERT INTO t VALUES (1)")
            .execute(&mut a)
            .await
            .unwrap();
        let dup = sqlx::query("INSERT INTO t VALUES (1)")
            .execute(&mut a)
            .await
            .unwrap_err();
        assert!(matches!(StoreError::from(dup), StoreError::Constraint(_)));
        sqlx::query("BEGIN EXCLUSIVE")
            .execute(&mut a)
            .await
            .unwrap();
        let busy = sqlx::query("INSERT INTO t VALUES (2)")
            .execute(&mut b)
            .await
            .unwrap_err();
        assert!(matches!(StoreError::from(busy), StoreError::Busy(_)));
    }
}
