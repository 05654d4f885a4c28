//! The daemon under test, run as a separate process, and what `/proc` says about it.

use anyhow::{Context, bail};
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A running `elfgate serve`; killed when dropped.
pub struct Daemon {
    child: Child,
    /// `http://ADDR` the daemon listens on.
    pub base: String,
    /// The daemon's process id.
    pub pid: u32,
    /// The bearer token the daemon generated into its data directory.
    pub token: String,
    /// The daemon's database.
    pub db: Database,
    /// Holds the config file and the database until the daemon is gone.
    _dir: tempfile::TempDir,
}

/// The `elfgate` binary built in the same profile as this benchmark.
fn daemon_binary() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe
        .parent()
        .context("the benchmark executable has no parent directory")?;
    let bin = dir.join(format!("elfgate{}", std::env::consts::EXE_SUFFIX));
    if !bin.is_file() {
        bail!(
            "{} not found: build the daemon in the same profile first, e.g. \
             `cargo build --release -p elfgate-server` (or use scripts/bench.sh)",
            bin.display()
        );
    }
    Ok(bin)
}

/// A command for `program`, started on the CPUs of `cpus` (a `taskset` list such as `1` or
/// `1-3`) when given: `--relay-cpus`.
pub fn pinned(program: &std::path::Path, cpus: Option<&str>) -> Command {
    match cpus {
        Some(cpus) => {
            let mut cmd = Command::new("taskset");
            cmd.arg("--cpu-list").arg(cpus).arg(program);
            cmd
        }
        None => Command::new(program),
    }
}

/// Where the daemon under test keeps its data.
#[derive(Debug, Clone)]
pub enum Database {
    /// A SQLite file (the default).
    Sqlite(PathBuf),
    /// A PostgreSQL database (`--postgres`): its URL.
    Postgres(String),
}

impl Database {
    /// The daemon's `storage.url`.
    fn url(&self) -> String {
        match self {
            Database::Sqlite(path) => format!("sqlite://{}", path.display()),
            Database::Postgres(url) => url.clone(),
        }
    }

    /// "SQLite" or "PostgreSQL", for the report.
    pub fn kind(&self) -> &'static str {
        match self {
            Database::Sqlite(_) => "SQLite",
            Database::Postgres(_) => "PostgreSQL",
        }
    }
}

/// A new, empty database on the PostgreSQL server whose administrator's URL is `admin`: its URL.
pub async fn new_postgres_database(admin: &str) -> anyhow::Result<String> {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(admin)
        .await
        .context("connecting to --postgres")?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos();
    let name = format!("elfgate_bench_{}_{nanos}", std::process::id());
    // The name is made here of digits and underscores, never input.
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .context("creating the benchmark's database")?;
    conn.close().await?;
    let (base, query) = match admin.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (admin, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let server = match base[scheme_end..].find('/') {
        Some(i) => &base[..scheme_end + i],
        None => base,
    };
    Ok(match query {
        Some(q) => format!("{server}/{name}?{q}"),
        None => format!("{server}/{name}"),
    })
}

/// A daemon as a node of a fleet (`--fleet`): its `[cluster]` keys and the fleet's token.
#[derive(Debug, Clone)]
pub struct FleetNode {
    /// `cluster.nats_url`.
    pub nats_url: String,
    /// `cluster.node_id`.
    pub node_id: String,
    /// The token every node of the fleet takes (ELFGATE_TOKEN).
    pub token: String,
}

impl Daemon {
    /// Starts the daemon on a free loopback port with a fresh database (a SQLite file, or
    /// `postgres`, an empty PostgreSQL database's URL), relaying to the mock provider at
    /// `mock_base` (`http://ADDR`), and waits until it listens.
    pub fn start(
        mock_base: &str,
        cpus: Option<&str>,
        postgres: Option<String>,
    ) -> anyhow::Result<Daemon> {
        Self::start_node(mock_base, cpus, postgres, None, "")
    }

    /// [`Daemon::start`], as a node of a fleet when `fleet` is given (then `postgres` is the
    /// fleet's database, which may already be in use), with `extra` appended to its
    /// configuration: it follows the mock provider's table, so keys before its first table
    /// header are the provider's (its prices), and its tables are the daemon's (`[[budgets]]`).
    pub fn start_node(
        mock_base: &str,
        cpus: Option<&str>,
        postgres: Option<String>,
        fleet: Option<&FleetNode>,
        extra: &str,
    ) -> anyhow::Result<Daemon> {
        let bin = daemon_binary()?;
        let dir = tempfile::Builder::new().prefix("elfgate-bench").tempdir()?;
        let config = dir.path().join("bench.toml");
        let db = match postgres {
            Some(url) => Database::Postgres(url),
            None => Database::Sqlite(dir.path().join("bench.db")),
        };
        std::fs::write(
            &config,
            format!(
                r#"[server]
bind = "127.0.0.1:0"

[storage]
url = "{db}"
data_dir = "{data}"

[defaults]
provider = "mock"
{cluster}
[providers.mock]
kind = "openai"
base_url = "{mock_base}/v1"
default_model = "mock"
{extra}"#,
                db = db.url(),
                data = dir.path().display(),
                cluster = fleet.map_or(String::new(), |f| format!(
                    "\n[cluster]\nnats_url = \"{}\"\nnode_id = \"{}\"\nlease_secs = 2\n\
                     heartbeat_secs = 1\nsecret_env = \"FLEET_SECRET\"\n",
                    f.nats_url, f.node_id
                )),
            ),
        )?;
        let mut child = pinned(&bin, cpus)
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .env("ELFGATE_LOG", "warn")
            .env_remove("ELFGATE_TOKEN")
            .envs(fleet.map(|f| ("ELFGATE_TOKEN", f.token.clone())))
            // The fleet's secret, which signs the bus's messages: the token will do (it is
            // shared by the bench's nodes alone, and long enough).
            .envs(fleet.map(|f| ("FLEET_SECRET", format!("{:0<32}", f.token))))
            .env_remove("ELFGATE_BIND")
            .env_remove("ELFGATE_DATABASE_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let pid = child.id();
        let stdout = child.stdout.take().context("no stdout pipe")?;
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let Some(base) = line.trim().strip_prefix("elfgate listening on ") else {
            let _ = child.kill();
            let _ = child.wait();
            bail!("the daemon did not start (stdout: {line:?})");
        };
        let base = base.to_string();
        // The daemon writes its token file before it listens (a fleet's nodes take the same one).
        let token = match fleet {
            Some(f) => f.token.clone(),
            None => std::fs::read_to_string(dir.path().join("token"))
                .context("reading the daemon's token file")?
                .trim()
                .to_string(),
        };
        // Keep draining stdout so the daemon can never block on a full pipe.
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = reader.read_to_end(&mut sink);
        });
        Ok(Daemon {
            child,
            base,
            pid,
            token,
            db,
            _dir: dir,
        })
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Resident set size of `pid` in bytes (VmRSS).
pub fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .context("no VmRSS in /proc status")?;
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .context("malformed VmRSS line")?
        .parse()?;
    Ok(kb * 1024)
}

/// Clock ticks per second for `/proc/<pid>/stat` (from `getconf CLK_TCK`, else 100).
pub fn clock_ticks() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .filter(|&t| t > 0)
        .unwrap_or(100)
}

/// CPU time (user + system) `pid` has used, in clock ticks.
pub fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name is in parentheses and may contain spaces: parse after the last ')'.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("malformed /proc stat")?;
    // After ')': state(3) ppid(4) ... utime(14) stime(15), so fields 11 and 12 of the rest.
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next().context("no utime")?.parse()?;
    let stime: u64 = fields.next().context("no stime")?.parse()?;
    Ok(utime + stime)
}

/// Nanoseconds of CPU a process has used, all its threads included, also those that already
/// exited (its CPU-time clock, `clock_getcpuclockid`): finer than the 10 ms ticks of
/// `/proc/<pid>/stat`, which a pass of a few milliseconds would round away.
pub fn cpu_ns(pid: u32) -> anyhow::Result<u64> {
    let pid = i32::try_from(pid).context("pid out of range")?;
    let clock = nix::time::clock_getcpuclockid(nix::unistd::Pid::from_raw(pid))?;
    let t = nix::time::clock_gettime(clock)?;
    Ok(u64::try_from(t.tv_sec())? * 1_000_000_000 + u64::try_from(t.tv_nsec())?)
}

/// Samples a process's RSS in the background and keeps the highest value seen.
pub struct RssSampler {
    peak: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl RssSampler {
    /// Starts sampling `pid` every `every`.
    pub fn start(pid: u32, every: Duration) -> RssSampler {
        let peak = Arc::new(AtomicU64::new(rss_bytes(pid).unwrap_or(0)));
        let p = peak.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                if let Ok(rss) = rss_bytes(pid) {
                    p.fetch_max(rss, Ordering::Relaxed);
                }
            }
        });
        RssSampler { peak, task }
    }

    /// Stops sampling (taking one last sample) and returns the peak in bytes.
    pub fn stop(self, pid: u32) -> u64 {
        self.task.abort();
        if let Ok(rss) = rss_bytes(pid) {
            self.peak.fetch_max(rss, Ordering::Relaxed);
        }
        self.peak.load(Ordering::Relaxed)
    }
}
