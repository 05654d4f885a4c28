//! Opening the database (pragmas, pools, lock, migrations) and closing it.

use super::SqliteStore;
use crate::lock::{DatabaseLock, in_memory};
use crate::schema::MIGRATOR;
use crate::writer::Writer;
use crate::{StoreError, StoreResult};
use elfgate_core::LogSender;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// Scripts the write connection keeps prepared (least recently used dropped first).
pub(crate) const WRITE_STATEMENT_CACHE: usize = 100;

/// How a store is opened.
#[derive(Clone, PartialEq, Eq)]
pub struct StoreOptions {
    /// How many published events may wait for the log writer before publishers wait.
    pub log_queue_events: usize,
    /// How long a published event may wait for others before the writer commits it (see the
    /// writer module): the most an event stays out of the log, the disk permitting.
    pub log_linger: Duration,
    /// PostgreSQL: the user's password (from `[storage] password_file`), over the URL's and
    /// `PGPASSWORD`. Unused by SQLite.
    pub password: Option<String>,
    /// Whether a run's end is written to the outbox of run-end webhooks (see
    /// [`crate::Store::pending_run_ends`]). False when nothing could be delivered for it (the
    /// daemon has no webhook target and no secret to sign a session's `notifyUrl`): the row, its
    /// reading back and its removal would cost every run a commit for nothing.
    pub record_run_ends: bool,
}

/// The password is never shown.
impl std::fmt::Debug for StoreOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreOptions")
            .field("log_queue_events", &self.log_queue_events)
            .field("log_linger", &self.log_linger)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("record_run_ends", &self.record_run_ends)
            .finish()
    }
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            log_queue_events: elfgate_core::LOG_QUEUE_EVENTS,
            log_linger: crate::writer::DEFAULT_LINGER,
            password: None,
            record_run_ends: true,
        }
    }
}

/// Creates the database file owner-only (0600) when it does not exist yet: chat history is as
/// private as the token file. SQLite gives the `-wal` and `-shm` files it creates the database
/// file's mode, so those are owner-only too. An existing database (or -wal, -shm) that others may
/// read is made private again, with a warning, as the token file is.
fn create_private(file: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(file)
    {
        Ok(_) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    for suffix in ["", "-wal", "-shm"] {
        let mut name = file.as_os_str().to_owned();
        name.push(suffix);
        let path = std::path::PathBuf::from(name);
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode & 0o700))?;
            tracing::warn!(
                file = %path.display(),
                was = format!("{mode:o}"),
                "the database file could be read by other users; made owner-only"
            );
        }
    }
    Ok(())
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `url` (`sqlite://path` or `sqlite::memory:`) and
    /// applies pending migrations. A database file is locked first (see `lock.rs`): while this
    /// store or a clone lives, opening the same file again fails with [`StoreError::Locked`].
    pub async fn open(url: &str) -> StoreResult<Self> {
        Self::open_with(url, StoreOptions::default()).await
    }

    /// [`SqliteStore::open`] with options.
    pub async fn open_with(url: &str, opts: StoreOptions) -> StoreResult<Self> {
        if !url.starts_with("sqlite:") {
            return Err(StoreError::UnsupportedUrl(url.to_string()));
        }
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // NORMAL in WAL mode stays consistent after a crash; only the last commits may be lost on
            // power failure, never on a process kill.
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        let file = options.get_filename();
        if let Some(dir) = file.parent()
            && !dir.as_os_str().is_empty()
            && file.as_os_str() != ":memory:"
        {
            // Owner-only when new, as the database is (the token file and the CLIs' homes live
            // there too).
            elfgate_core::private_files::create_private_dir_all(dir)?;
        }
        // Before migrations and before anyone reads or ends a run.
        let lock = if in_memory(url) {
            None
        } else {
            create_private(file)?;
            Some(Arc::new(DatabaseLock::acquire(file)?))
        };
        // No automatic checkpoint: it runs inside whichever commit crosses the threshold (and
        // lengthens it by milliseconds under load), often one that a new session waits for. The writer has checkpoints run
        // on a reader connection instead (see `WalTracker` in the writer module).
        let write_options = options
            .clone()
            .pragma("wal_autocheckpoint", "0")
            // After a burst, the WAL file is cut back to 64 MB when it restarts.
            .pragma("journal_size_limit", "67108864")
            // 16 MB of page cache (default 2 MB): with many sessions logging at once, a commit
            // touches one log page per session, and a small cache spilled dirty pages to the WAL
            // mid-transaction and read pages back (docs/benchmarks.md, item 11).
            .pragma("cache_size", "-16384")
            // Stated rather than left to the driver's default: it bounds the prepared scripts
            // (see `script.rs`).
            .statement_cache_capacity(WRITE_STATEMENT_CACHE);
        let write = SqlitePoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(30))
            // A local file does not go stale like a network connection: no ping (one more round
            // trip to SQLite's thread) before each use.
            .test_before_acquire(false)
            .connect_with(write_options)
            .await?;
        MIGRATOR.run(&write).await?;
        let read = SqlitePoolOptions::new()
            .max_connections(8)
            .min_connections(1)
            .test_before_acquire(false)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await?;
        let writer = Writer::spawn(
            write.clone(),
            read.clone(),
            opts.log_queue_events,
            opts.log_linger,
        );
        Ok(SqliteStore {
            write,
            read,
            writer,
            record_run_ends: opts.record_run_ends,
            _lock: lock,
        })
    }

    /// Where the event hub sends published events.
    pub fn log_sender(&self) -> LogSender {
        self.writer.log_sender()
    }

    /// Applies pending migrations without keeping the store (the `migrate` command).
    pub async fn migrate(url: &str) -> StoreResult<()> {
        let store = Self::open(url).await?;
        store.close().await;
        Ok(())
    }

    /// Writes what the writer holds, stops it, and closes the pools.
    pub async fn close(&self) {
        self.writer.shutdown().await;
        self.write.close().await;
        self.read.close().await;
    }
}
