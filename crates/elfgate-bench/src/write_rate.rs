//! The event log's sustained write rate: many sessions streaming through the daemon at once, each
//! started again as soon as it ends, while the bench counts the events the daemon published (its
//! `/metrics` counter) and the events committed to its database (SQLite, or PostgreSQL with
//! `--postgres`) over a fixed window.

use crate::client::{self, Target};
use crate::daemon::{self, Daemon, Database};
use anyhow::Context;
use sqlx::{Connection, sqlite::SqliteConnectOptions};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A connection to the daemon's database, to count what its log holds.
enum LogDb {
    Sqlite(sqlx::SqliteConnection),
    Postgres(sqlx::PgConnection),
}

impl LogDb {
    async fn open(db: &Database) -> anyhow::Result<LogDb> {
        Ok(match db {
            Database::Sqlite(path) => {
                let opts = SqliteConnectOptions::new().filename(path).read_only(true);
                LogDb::Sqlite(
                    sqlx::SqliteConnection::connect_with(&opts)
                        .await
                        .context("opening the daemon's database read-only")?,
                )
            }
            Database::Postgres(url) => LogDb::Postgres(
                sqlx::PgConnection::connect(url)
                    .await
                    .context("connecting to the daemon's database")?,
            ),
        })
    }
}

/// Events per second the log should sustain.
const TARGET_EVENTS_PER_SEC: f64 = 50_000.0;
/// Time for every session to have started before the window opens.
const RAMP: Duration = Duration::from_secs(1);

/// What the pass runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Sessions streaming at once.
    pub sessions: usize,
    /// Mock delay before each token (0: the mock writes as fast as it can, and the daemon merges
    /// what arrives together into fewer events).
    pub delay_ms: u64,
    /// Length of the measured window.
    pub secs: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            sessions: 200,
            delay_ms: 1,
            secs: 10,
        }
    }
}

/// The counters at one instant.
struct Snapshot {
    at: Instant,
    published: u64,
    written: u64,
    rows: u64,
    daemon_cpu_ns: u64,
    sessions: u64,
}

/// Reads the daemon's `elfgate_events_published_total`.
async fn events_published(t: &Target) -> anyhow::Result<u64> {
    client::metric(
        t,
        &t.daemon_base,
        &t.daemon_token,
        "elfgate_events_published_total",
    )
    .await
}

/// The events committed to the event log, counted as rows are added: a row holds one event, or
/// (a run's consecutive deltas committed together) `last_seq - seq + 1`. The database is fresh and
/// the bench deletes nothing, so rows come in rowid order, and each read sums only the rows after
/// the last one it saw, touching the table's last pages, where a count over the whole log would
/// scan it while the daemon writes it.
#[derive(Default)]
struct LogCount {
    rows: i64,
    events: u64,
}

impl LogCount {
    /// (events, rows) committed so far.
    async fn read(&mut self, db: &mut LogDb) -> anyhow::Result<(u64, u64)> {
        match db {
            LogDb::Sqlite(db) => {
                let (rows, events): (Option<i64>, i64) = sqlx::query_as(
                    "SELECT max(rowid), coalesce(sum(coalesce(last_seq - seq, 0) + 1), 0) FROM \
                     events WHERE rowid > ?",
                )
                .bind(self.rows)
                .fetch_one(db)
                .await?;
                if let Some(rows) = rows {
                    self.rows = rows;
                }
                self.events += u64::try_from(events)?;
            }
            // No rowid: a count over the whole log (the bench's database is fresh, so it is
            // the window's rows and those of the ramp).
            LogDb::Postgres(db) => {
                let (rows, events): (i64, i64) = sqlx::query_as(
                    "SELECT count(*), coalesce(sum(coalesce(last_seq - seq, 0) + 1), 0)::bigint \
                     FROM events",
                )
                .fetch_one(db)
                .await?;
                self.rows = rows;
                self.events = u64::try_from(events)?;
            }
        }
        Ok((self.events, u64::try_from(self.rows)?))
    }
}

impl Snapshot {
    async fn take(
        t: &Target,
        db: &mut LogDb,
        log: &mut LogCount,
        pid: u32,
        sessions: &AtomicU64,
    ) -> anyhow::Result<Snapshot> {
        let at = Instant::now();
        let published = events_published(t).await?;
        let (written, rows) = log.read(db).await?;
        Ok(Snapshot {
            at,
            published,
            written,
            rows,
            daemon_cpu_ns: daemon::cpu_ns(pid)?,
            sessions: sessions.load(Ordering::Relaxed),
        })
    }
}

/// Runs the pass and prints what it measured.
pub async fn run(t: &Target, d: &Daemon, tokens: u32, s: &Settings) -> anyhow::Result<()> {
    let mut db = LogDb::open(&d.db).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..s.sessions {
        let (t, stop, done, failed) = (t.clone(), stop.clone(), done.clone(), failed.clone());
        let delay_ms = s.delay_ms;
        workers.spawn(async move {
            let mut first_error = None;
            while !stop.load(Ordering::Relaxed) {
                match client::daemon(&t, tokens, delay_ms).await {
                    Ok(_) => done.fetch_add(1, Ordering::Relaxed),
                    Err(e) => {
                        first_error.get_or_insert_with(|| format!("{e:#}"));
                        failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
            first_error
        });
    }
    tokio::time::sleep(RAMP).await;
    let mut log = LogCount::default();
    let a = Snapshot::take(t, &mut db, &mut log, d.pid, &done).await?;
    tokio::time::sleep(Duration::from_secs(s.secs)).await;
    let b = Snapshot::take(t, &mut db, &mut log, d.pid, &done).await?;
    stop.store(true, Ordering::Relaxed);
    let mut first_error = None;
    while let Some(r) = workers.join_next().await {
        if let Some(e) = r? {
            first_error.get_or_insert(e);
        }
    }
    // The log commits on its own schedule: wait until it has caught up with what was published.
    let stopped = Instant::now();
    let published = events_published(t).await?;
    let mut written = log.read(&mut db).await?.0;
    while written < published && stopped.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(10)).await;
        written = log.read(&mut db).await?.0;
    }
    let caught_up = stopped.elapsed();

    let secs = b.at.duration_since(a.at).as_secs_f64();
    let published_rate = b.published.saturating_sub(a.published) as f64 / secs;
    let written_rate = b.written.saturating_sub(a.written) as f64 / secs;
    let rows_rate = b.rows.saturating_sub(a.rows) as f64 / secs;
    let sessions = b.sessions.saturating_sub(a.sessions);
    let cpu_ns = b.daemon_cpu_ns.saturating_sub(a.daemon_cpu_ns);
    println!(
        "event log write rate ({} sessions at once of N={tokens} tokens, D={} ms, each started \
         again when it ends; {secs:.1} s window after {} s of ramp):",
        s.sessions,
        s.delay_ms,
        RAMP.as_secs()
    );
    println!(
        "  published {published_rate:.0} events/s, committed to {} {written_rate:.0} events/s \
         in {rows_rate:.0} rows/s; \
         {sessions} sessions ({:.0}/s, {:.1} events each); daemon CPU {:.0}% of a core, {:.1} µs \
         per event",
        d.db.kind(),
        sessions as f64 / secs,
        b.published.saturating_sub(a.published) as f64 / sessions.max(1) as f64,
        100.0 * cpu_ns as f64 / 1e9 / secs,
        cpu_ns as f64 / 1e3 / b.published.saturating_sub(a.published).max(1) as f64,
    );
    println!(
        "  behind at the window's end: {} events; caught up {:.0} ms after the load stopped{}",
        b.published.saturating_sub(b.written),
        caught_up.as_secs_f64() * 1e3,
        if written < published {
            format!(" (NOT caught up: {} events missing)", published - written)
        } else {
            String::new()
        }
    );
    let errors = failed.load(Ordering::Relaxed);
    if let Some(e) = first_error {
        println!("  {errors} sessions failed; first error: {e}");
    }
    println!(
        "target event log write rate >= {TARGET_EVENTS_PER_SEC:.0}/s: {written_rate:.0}/s -> {}",
        if written_rate >= TARGET_EVENTS_PER_SEC && errors == 0 {
            "PASS"
        } else {
            "FAIL"
        }
    );
    Ok(())
}
