//! The PostgreSQL server of the tests that need one (the store's conformance suite on PostgreSQL,
//! the daemon on PostgreSQL): `ELFGATE_TEST_POSTGRES_URL`, an administrator's URL, which
//! scripts/test.sh sets after starting a private server. Each test gets a database of its own.
//! Without it the test skips, saying so, unless REQUIRE_CLUSTER_TESTS=require (scripts/test.sh
//! sets it), which makes a missing server a failure.

use sqlx::Connection;

/// The administrator's URL of the tests' PostgreSQL server, if there is one.
pub fn postgres_admin_url() -> Option<String> {
    server_url(
        "ELFGATE_TEST_POSTGRES_URL",
        "PostgreSQL",
        "scripts/test.sh starts a private PostgreSQL",
    )
}

/// The URL of the tests' NATS server (JetStream enabled), if there is one:
/// `ELFGATE_TEST_NATS_URL`, which scripts/test.sh sets after starting a private server.
pub fn nats_url() -> Option<String> {
    server_url(
        "ELFGATE_TEST_NATS_URL",
        "NATS",
        "scripts/test.sh starts a private NATS server",
    )
}

/// The URL in `var`; when it is not set, the test skips saying so, or fails under
/// REQUIRE_CLUSTER_TESTS=require.
fn server_url(var: &str, server: &str, how: &str) -> Option<String> {
    let url = std::env::var(var).ok().filter(|u| !u.is_empty());
    if url.is_none() {
        assert_ne!(
            std::env::var("REQUIRE_CLUSTER_TESTS").as_deref(),
            Ok("require"),
            "{var} is required ({how})"
        );
        eprintln!("{server} test skipped: {var} is not set (scripts/test.sh sets it)");
    }
    url
}

/// The variable holding the fleet's secret that the suite's nodes share (`[cluster]
/// secret_env`), and the secret: a node signs everything it puts on NATS with it.
pub const FLEET_SECRET_ENV: &str = "FLEET_SECRET";
/// The suite's fleet secret.
pub const FLEET_SECRET: &str = "the-suite-fleet-secret-0123456789abcdef0123456789";

/// The `[cluster]` key naming the suite's fleet secret, for a node's configuration.
pub fn fleet_secret_key() -> String {
    format!("secret_env = \"{FLEET_SECRET_ENV}\"\n")
}

/// The variable holding the suite's fleet secret, for a node's environment.
pub fn fleet_secret_var() -> (String, String) {
    (FLEET_SECRET_ENV.into(), FLEET_SECRET.into())
}

/// What a fleet test needs: a new database on the tests' PostgreSQL server and the tests' NATS
/// server's URL. None when either is missing (the test skips, saying which).
pub async fn fleet_services() -> Option<(String, String)> {
    let nats = nats_url()?;
    Some((postgres_database().await?, nats))
}

/// `url` (postgres://…/DB?…) naming database `name` instead.
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let server = match base[scheme_end..].find('/') {
        Some(i) => &base[..scheme_end + i],
        None => base,
    };
    match query {
        Some(q) => format!("{server}/{name}?{q}"),
        None => format!("{server}/{name}"),
    }
}

/// A new, empty database on the tests' server: its URL. None when there is no server (the test
/// skips).
pub async fn postgres_database() -> Option<String> {
    let admin = postgres_admin_url()?;
    let name = format!("elfgate_test_{}", uuid_like());
    let mut conn = sqlx::PgConnection::connect(&admin)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to ELFGATE_TEST_POSTGRES_URL: {e}"));
    // The name is ours (digits and underscores), never input.
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    Some(with_database(&admin, &name))
}

/// A name no other test of this run uses: the process, the time and a counter.
fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{}_{nanos}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// How [`PrivatePostgres::start_with`] sets its server up.
#[derive(Debug, Default, Clone)]
pub struct PostgresSetup {
    /// The `postgres` user's password, required over TCP (SCRAM); None: no password.
    pub password: Option<String>,
    /// The server's certificate and key (PEM): TCP connections must then use TLS.
    pub tls: Option<(String, String)>,
}

/// A PostgreSQL server of one test's own, for a test that stops and starts it (a restart under a
/// running daemon) without touching the server the other tests share. It is created with the
/// binaries scripts/test.sh found (`ELFGATE_TEST_PG_BIN`, run as `ELFGATE_TEST_PG_RUNAS` when
/// set), on a free loopback port, and removed when dropped.
pub struct PrivatePostgres {
    bin: std::path::PathBuf,
    runas: Option<String>,
    dir: std::path::PathBuf,
    /// postgres://postgres@127.0.0.1:PORT/postgres
    pub url: String,
}

impl PrivatePostgres {
    /// A new server, started; None (the test skips, saying so) when the test services did not
    /// start PostgreSQL themselves (a server given by URL cannot be restarted by a test).
    pub fn start() -> Option<PrivatePostgres> {
        Self::start_with(&PostgresSetup::default())
    }

    /// [`PrivatePostgres::start`] with a password on the `postgres` user and TLS, as `setup`
    /// says.
    pub fn start_with(setup: &PostgresSetup) -> Option<PrivatePostgres> {
        postgres_admin_url()?;
        let Some(bin) = std::env::var_os("ELFGATE_TEST_PG_BIN") else {
            eprintln!(
                "PostgreSQL restart test skipped: ELFGATE_TEST_PG_BIN is not set (the server was \
                 given by URL, so there are no binaries to start one of the test's own)"
            );
            return None;
        };
        let runas = std::env::var("ELFGATE_TEST_PG_RUNAS")
            .ok()
            .filter(|u| !u.is_empty());
        let dir = tempfile::Builder::new()
            .prefix("elfgate-pg-")
            .tempdir()
            .unwrap()
            .keep();
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let pg = PrivatePostgres {
            url: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
            bin: bin.into(),
            runas,
            dir,
        };
        if let Some(user) = &pg.runas {
            let ok = std::process::Command::new("chown")
                .arg(format!("{user}:"))
                .arg(&pg.dir)
                .status()
                .unwrap()
                .success();
            assert!(ok, "cannot give {} to {user}", pg.dir.display());
        }
        let data = pg.dir.join("data");
        let mut initdb: Vec<std::ffi::OsString> = vec![
            "-D".into(),
            data.clone().into(),
            "-U".into(),
            "postgres".into(),
            "--no-sync".into(),
            "--auth-local".into(),
            "trust".into(),
        ];
        match &setup.password {
            Some(password) => {
                let file = pg.own_file("pwfile", password);
                initdb.extend([
                    "--auth-host".into(),
                    "scram-sha-256".into(),
                    format!("--pwfile={}", file.display()).into(),
                ]);
            }
            None => initdb.extend(["--auth-host".into(), "trust".into()]),
        }
        let args: Vec<&std::ffi::OsStr> =
            initdb.iter().map(std::ffi::OsString::as_os_str).collect();
        pg.run("initdb", &args);
        let mut conf = format!(
            "port = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n",
            pg.dir.display()
        );
        if let Some((cert, key)) = &setup.tls {
            let cert = pg.own_file("server.crt", cert);
            let key = pg.own_file("server.key", key);
            conf.push_str(&format!(
                "ssl = on\nssl_cert_file = '{}'\nssl_key_file = '{}'\n",
                cert.display(),
                key.display()
            ));
            // TCP connections without TLS find no entry and are refused.
            let method = if setup.password.is_some() {
                "scram-sha-256"
            } else {
                "trust"
            };
            pg.own_file(
                "data/pg_hba.conf",
                &format!("local all all trust\nhostssl all all 127.0.0.1/32 {method}\n"),
            );
        }
        let mut main = std::fs::OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.conf"))
            .unwrap();
        std::io::Write::write_all(&mut main, conf.as_bytes()).unwrap();
        pg.start_again();
        Some(pg)
    }

    /// Writes `text` into `name` under the server's directory, readable by the server's user
    /// only (as PostgreSQL wants its key); returns its path.
    fn own_file(&self, name: &str, text: &str) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = self.dir.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        if let Some(user) = &self.runas {
            let ok = std::process::Command::new("chown")
                .arg(format!("{user}:"))
                .arg(&path)
                .status()
                .unwrap()
                .success();
            assert!(ok, "cannot give {} to {user}", path.display());
        }
        path
    }

    /// Stops the server (fast shutdown: open connections are cut).
    pub fn stop(&self) {
        let data = self.dir.join("data");
        self.run(
            "pg_ctl",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-w".as_ref(),
                "stop".as_ref(),
                "-m".as_ref(),
                "fast".as_ref(),
            ],
        );
    }

    /// Starts the stopped server again on the same port; returns once it accepts connections.
    pub fn start_again(&self) {
        let data = self.dir.join("data");
        let log = self.dir.join("pg.log");
        self.run(
            "pg_ctl",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-l".as_ref(),
                log.as_os_str(),
                "-w".as_ref(),
                "start".as_ref(),
            ],
        );
    }

    /// One of the server's programs, run as the server's user.
    fn command(&self, program: &str) -> std::process::Command {
        let path = self.bin.join(program);
        match &self.runas {
            Some(user) => {
                let mut c = std::process::Command::new("runuser");
                c.arg("-u").arg(user).arg("--").arg(path);
                c
            }
            None => std::process::Command::new(path),
        }
    }

    /// Runs one of the server's programs as its user; panics with its output when it fails.
    fn run(&self, program: &str, args: &[&std::ffi::OsStr]) {
        let out = self
            .command(program)
            .args(args)
            .current_dir(&self.dir)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{program} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let data = self.dir.join("data");
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(&data)
            .args(["-w", "stop", "-m", "immediate"])
            .current_dir(&self.dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A NATS server of one test's own, for a test that stops and starts it under running daemons:
/// `ELFGATE_TEST_NATS_BIN` (set by scripts/test.sh) on a free loopback port, killed when dropped.
pub struct PrivateNats {
    bin: std::path::PathBuf,
    /// Its arguments besides the address and the port.
    args: Vec<String>,
    /// Its port on 127.0.0.1.
    pub port: u16,
    child: Option<std::process::Child>,
    /// nats://127.0.0.1:PORT
    pub url: String,
}

impl PrivateNats {
    /// A new server, started; None (the test skips, saying so) without ELFGATE_TEST_NATS_BIN,
    /// unless REQUIRE_CLUSTER_TESTS=require, which makes it a failure.
    pub fn start() -> Option<PrivateNats> {
        Self::start_with(&[])
    }

    /// [`PrivateNats::start`] with more arguments (`--user`, `--auth`, `-c FILE`, `--tls`...).
    pub fn start_with(args: &[&str]) -> Option<PrivateNats> {
        let Some(bin) = std::env::var_os("ELFGATE_TEST_NATS_BIN") else {
            assert_ne!(
                std::env::var("REQUIRE_CLUSTER_TESTS").as_deref(),
                Ok("require"),
                "ELFGATE_TEST_NATS_BIN is required (scripts/test.sh sets it when it starts NATS)"
            );
            eprintln!("NATS restart test skipped: ELFGATE_TEST_NATS_BIN is not set");
            return None;
        };
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let mut nats = PrivateNats {
            bin: bin.into(),
            args: args.iter().map(ToString::to_string).collect(),
            port,
            child: None,
            url: format!("nats://127.0.0.1:{port}"),
        };
        nats.start_again();
        Some(nats)
    }

    /// Kills the server (as a crash or a restart would).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the stopped server on the same port; returns once it accepts connections.
    pub fn start_again(&mut self) {
        let child = std::process::Command::new(&self.bin)
            .args(["-a", "127.0.0.1", "-p", &self.port.to_string()])
            .args(&self.args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "nats-server did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for PrivateNats {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn a_url_is_pointed_at_another_database() {
        assert_eq!(
            with_database("postgres://u@127.0.0.1:5/postgres", "t1"),
            "postgres://u@127.0.0.1:5/t1"
        );
        assert_eq!(
            with_database("postgres://u:p@h:5/postgres?sslmode=disable", "t1"),
            "postgres://u:p@h:5/t1?sslmode=disable"
        );
        assert_eq!(with_database("postgres://h:5", "t1"), "postgres://h:5/t1");
    }
}
