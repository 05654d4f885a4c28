//! nginx as the reference relay: a plain streaming reverse proxy to the mock provider, run as a
//! separate process like the daemon, so that the daemon's CPU per relayed token can be set
//! against what a bare proxy spends on the same streams.

use anyhow::{Context, bail};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// Where Debian's `nginx` package puts the binary.
pub const BINARY: &str = "/usr/sbin/nginx";

/// A running nginx (master and workers); stopped when dropped.
pub struct Nginx {
    child: Child,
    /// `http://ADDR` nginx listens on.
    pub base: String,
    /// The master's process id.
    pub pid: u32,
    /// The workers' process ids (children of the master, found once it listens).
    workers: Vec<u32>,
    /// Holds the config, the logs and nginx's temp paths until nginx is gone.
    _dir: tempfile::TempDir,
}

/// The configuration: one worker per core (`auto`), as the daemon's runtime has one worker
/// thread per core, so that neither relay is capped below the cores it may use. Upstream
/// connections are kept alive (64 idle per worker) and responses are not buffered, so that each
/// SSE frame is passed on as soon as it arrives, as the daemon does.
fn config(dir: &Path, listen: SocketAddr, upstream: &str) -> String {
    let d = dir.display();
    format!(
        r#"worker_processes auto;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;

events {{
    worker_connections 4096;
}}

http {{
    access_log off;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;

    upstream mock {{
        server {upstream};
        keepalive 64;
    }}

    server {{
        listen {listen};
        location / {{
            proxy_pass http://mock;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
    }}
}}
"#
    )
}

impl Nginx {
    /// Starts nginx in front of the mock at `mock_base` (`http://ADDR`) when it is installed;
    /// `Ok(None)` when it is not.
    pub fn start_if_installed(
        mock_base: &str,
        cpus: Option<&str>,
    ) -> anyhow::Result<Option<Nginx>> {
        if !Path::new(BINARY).is_file() {
            return Ok(None);
        }
        Self::start(mock_base, cpus).map(Some)
    }

    fn start(mock_base: &str, cpus: Option<&str>) -> anyhow::Result<Nginx> {
        let upstream = mock_base
            .strip_prefix("http://")
            .context("the mock's address is not http://")?;
        let dir = tempfile::Builder::new()
            .prefix("elfgate-bench-nginx")
            .tempdir()?;
        // nginx cannot listen on port 0: take a free port and hand it over (a small race only).
        let listen = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let conf = dir.path().join("nginx.conf");
        std::fs::write(&conf, config(dir.path(), listen, upstream))?;
        let error_log = dir.path().join("error.log");
        let mut child = crate::daemon::pinned(Path::new(BINARY), cpus)
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&conf)
            // Before the config is read nginx logs to its compiled-in path; keep it in the dir.
            .arg("-e")
            .arg(&error_log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {BINARY}"))?;
        let pid = child.id();
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(listen).is_err() {
            if child.try_wait()?.is_some() || Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                let log = std::fs::read_to_string(&error_log).unwrap_or_default();
                bail!("nginx did not start listening on {listen}: {log}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut nginx = Nginx {
            child,
            base: format!("http://{listen}"),
            pid,
            workers: Vec::new(),
            _dir: dir,
        };
        // The master forks its workers before it accepts, but give them a moment to show up.
        while nginx.workers.is_empty() && Instant::now() < deadline {
            nginx.workers = children(pid)?;
            if nginx.workers.is_empty() {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if nginx.workers.is_empty() {
            bail!("nginx (pid {pid}) has no worker processes");
        }
        Ok(nginx)
    }

    /// How many worker processes nginx runs.
    pub fn worker_count(&self) -> usize {
        self.workers.len()
    }

    /// CPU time of the master and its workers together, in nanoseconds.
    pub fn cpu_ns(&self) -> anyhow::Result<u64> {
        std::iter::once(self.pid)
            .chain(self.workers.iter().copied())
            .map(crate::daemon::cpu_ns)
            .sum()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM (fast shutdown) makes the master stop its workers; SIGKILL would orphan them.
        if let Ok(pid) = i32::try_from(self.pid) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let _ = self.child.wait();
    }
}

/// Process ids whose parent is `parent`, from `/proc/*/stat`.
fn children(parent: u32) -> anyhow::Result<Vec<u32>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let Ok(pid) = entry?.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        // A process may exit between the listing and the read.
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the command name in parentheses: state, then the parent's pid.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) {
            out.push(pid);
        }
    }
    Ok(out)
}
