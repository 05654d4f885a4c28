//! Opening the store (pool, single-node lock, migrations, log writer) and closing it.

use super::PgStore;
use super::fleet::{self, FleetMember, Membership};
use super::log_writer::LogWriter;
use crate::schema::PG_MIGRATOR;
use crate::{StoreError, StoreOptions, StoreResult};
use elfgate_core::LogSender;
use elfgate_core::sync::lock;
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;

/// Connections of one store's pool: the run path's writes, reads, replays and the log writer.
const POOL_CONNECTIONS: u32 = 16;

/// The advisory lock key a single node holds for as long as it runs ("elfgate" in ASCII).
const SINGLE_NODE_LOCK: i64 = 0x0065_6c66_6761_7465;

/// Whether this daemon is the database's only user.
#[derive(Debug, Clone)]
pub enum NodeMode {
    /// No `[cluster]`: the daemon holds the database's single-node lock while it runs, as a
    /// daemon on SQLite holds its file's, so that a second one (which would end the first one's
    /// live runs as `daemon_restart` at its start) refuses to start.
    Single,
    /// One node of a fleet: others share the database, each owning the sessions it runs
    /// (leases, fencing and adoption: `fleet`).
    Fleet(FleetMember),
}

/// The connection holding the single-node lock; the server drops the lock with the connection.
#[derive(Debug)]
pub(super) struct SingleNodeLock {
    conn: Mutex<Option<PgConnection>>,
}

impl SingleNodeLock {
    async fn acquire(options: &PgConnectOptions) -> StoreResult<SingleNodeLock> {
        let mut conn = PgConnection::connect_with(options).await?;
        let held: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(SINGLE_NODE_LOCK)
            .fetch_one(&mut conn)
            .await?;
        if !held {
            let _ = conn.close().await;
            return Err(StoreError::InUse);
        }
        Ok(SingleNodeLock {
            conn: Mutex::new(Some(conn)),
        })
    }

    async fn release(&self) {
        if let Some(conn) = self.conn.lock().await.take() {
            let _ = conn.close().await;
        }
    }
}

impl PgStore {
    /// Opens the database at `url` (`postgres://…`) and applies pending migrations: one node at
    /// a time, under the migrator's advisory lock, so that nodes starting together do not race.
    pub async fn open(url: &str, mode: NodeMode) -> StoreResult<Self> {
        Self::open_with(url, mode, StoreOptions::default()).await
    }

    /// [`PgStore::open`] with options.
    pub async fn open_with(url: &str, mode: NodeMode, opts: StoreOptions) -> StoreResult<Self> {
        if !is_postgres_url(url) {
            return Err(StoreError::UnsupportedUrl(url.to_string()));
        }
        let mut options = connect_options(url, opts.password.as_deref())?;
        if let NodeMode::Fleet(m) = &mode {
            // A node paused (SIGSTOP, a stall) inside a transaction keeps its row locks, and an
            // adopter's FOR UPDATE of the lease row would wait for them for ever: the server ends
            // a transaction left idle for a whole lease. Its node was past its lease by then, so
            // its writes are fenced anyway.
            options = options.options([(
                "idle_in_transaction_session_timeout",
                m.lease.as_millis().to_string(),
            )]);
        }
        // Before migrations and before anyone reads or ends a run.
        let (single_node, member) = match mode {
            NodeMode::Single => (
                Some(Arc::new(SingleNodeLock::acquire(&options).await?)),
                None,
            ),
            NodeMode::Fleet(member) => (None, Some(member)),
        };
        let pool = Self::pool_migrated(options.clone()).await?;
        let fleet = match member {
            Some(m) => {
                // The heartbeat's own connections: a node busy with requests (the main pool's
                // connections all taken) still renews its leases in time, so that load alone
                // never makes another node adopt its sessions.
                let beat = PgPoolOptions::new()
                    .max_connections(2)
                    .min_connections(1)
                    .acquire_timeout(m.lease)
                    .connect_with(options)
                    .await?;
                Some(Arc::new(Membership::new(m, beat)))
            }
            None => None,
        };
        if let Some(m) = &fleet {
            let mut conn = pool.acquire().await?;
            m.expire_earlier_life(&mut conn).await?;
        }
        let log = LogWriter::spawn(
            pool.clone(),
            opts.log_queue_events,
            opts.log_linger,
            fleet.clone(),
        );
        let store = PgStore {
            pool,
            log,
            record_run_ends: opts.record_run_ends,
            single_node,
            fleet,
            heartbeat: Arc::new(std::sync::Mutex::new(None)),
        };
        if let Some(m) = &store.fleet {
            let task = tokio::spawn(fleet::heartbeat_loop(
                store.clone(),
                m.me.heartbeat,
                m.me.lease,
            ));
            *lock(&store.heartbeat) = Some(task);
        }
        Ok(store)
    }

    /// The pool, once pending migrations are applied (under the migrator's advisory lock).
    async fn pool_migrated(options: PgConnectOptions) -> StoreResult<sqlx::PgPool> {
        let pool = PgPoolOptions::new()
            .max_connections(POOL_CONNECTIONS)
            .min_connections(1)
            // A request waits at most this long for a connection (a restarting server): then it
            // is answered 503 with Retry-After rather than held.
            .acquire_timeout(Duration::from_secs(5))
            .connect_with(options)
            .await?;
        PG_MIGRATOR.run(&pool).await?;
        Ok(pool)
    }

    /// Where the event hub sends published events.
    pub fn log_sender(&self) -> LogSender {
        self.log.log_sender()
    }

    /// Applies pending migrations without keeping the store (the `migrate` command): no lock
    /// beyond the migrator's, so that it can run beside the nodes of a fleet. `password`, when
    /// given, is used over the URL's and `PGPASSWORD`.
    pub async fn migrate(url: &str, password: Option<&str>) -> StoreResult<()> {
        if !is_postgres_url(url) {
            return Err(StoreError::UnsupportedUrl(url.to_string()));
        }
        let options = connect_options(url, password)?;
        Self::pool_migrated(options).await?.close().await;
        Ok(())
    }

    /// Stops the heartbeat, writes what the log writer holds, stops it, releases the
    /// single-node lock and closes the pool.
    pub async fn close(&self) {
        let heartbeat = lock(&self.heartbeat).take();
        if let Some(t) = heartbeat {
            t.abort();
        }
        self.log.shutdown().await;
        if let Some(lock) = &self.single_node {
            lock.release().await;
        }
        if let Some(m) = &self.fleet {
            m.close().await;
        }
        self.pool.close().await;
    }
}

/// The connection's options: the URL's (its `sslmode`, `sslrootcert`, `sslcert` and `sslkey`
/// are honoured, and the `PG*` variables fill what it leaves out, `PGPASSWORD` included) and
/// `password` over them.
fn connect_options(url: &str, password: Option<&str>) -> StoreResult<PgConnectOptions> {
    let options = PgConnectOptions::from_str(url)?.application_name("elfgate");
    Ok(match password {
        Some(p) => options.password(p),
        None => options,
    })
}

/// Whether `url` names a PostgreSQL database.
pub fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}
