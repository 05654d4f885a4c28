//! A network namespace of the child's own, made with util-linux `unshare`: the child sees its own
//! loopback interface and nothing else, so neither the daemon's API nor any other service of the
//! host or the outside network is reachable from it.

use super::{End, ProcessSpec, run};
pub use elfgate_core::Network;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How this host gives a child a network namespace of its own; found once by [`Isolation::probe`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Isolation {
    unshare: PathBuf,
    /// Also a user namespace (`-r`): creating a network namespace needs CAP_SYS_ADMIN, which an
    /// unprivileged daemon only has inside a user namespace of its own.
    user_namespace: bool,
    /// `ip`, to bring the private loopback interface up (it starts down).
    ip: Option<PathBuf>,
}

impl fmt::Display for Isolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unshare {}", self.flag())?;
        match &self.ip {
            Some(_) => write!(f, ", private loopback up"),
            None => write!(f, ", private loopback down (no ip command)"),
        }
    }
}

/// Seconds a probe command may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where programs are looked for besides the daemon's PATH (`ip` lives in sbin).
const EXTRA_DIRS: &[&str] = &["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin"];

/// `name` in the daemon's PATH or the usual program directories.
pub(crate) fn find_program(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(EXTRA_DIRS.iter().map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Why this host gives no private network namespace.
#[derive(Debug, Clone, thiserror::Error)]
pub enum NoIsolation {
    /// No unshare program.
    #[error("the unshare command (util-linux) was not found")]
    NoUnshare,
    /// The check could not be run.
    #[error("{what}: {why}")]
    NotRun {
        /// The command tried.
        what: String,
        /// Why it did not run.
        why: String,
    },
    /// The check failed.
    #[error("{what} failed ({status}): {stderr}")]
    Failed {
        /// The command tried.
        what: String,
        /// Its exit status.
        status: String,
        /// What it wrote on stderr.
        stderr: String,
    },
    /// The check did not finish.
    #[error("{0} did not finish")]
    Hung(String),
}

impl Isolation {
    fn flag(&self) -> &'static str {
        if self.user_namespace { "-rn" } else { "-n" }
    }

    /// Checks once whether this host lets the daemon create network namespaces (`unshare -n true`
    /// as root, `unshare -rn true` otherwise) and whether it can bring their loopback up; the
    /// error says why not.
    pub async fn probe() -> Result<Isolation, NoIsolation> {
        let unshare = find_program("unshare").ok_or(NoIsolation::NoUnshare)?;
        let mut iso = Isolation {
            unshare,
            user_namespace: !nix::unistd::geteuid().is_root(),
            ip: None,
        };
        let cwd = std::env::temp_dir();
        iso.check(ProcessSpec::new("true", &cwd)).await?;
        if let Some(ip) = find_program("ip") {
            let mut up = ProcessSpec::new(ip.to_string_lossy(), &cwd);
            up.args = ["link", "set", "lo", "up"].map(String::from).to_vec();
            let with_ip = Isolation {
                ip: Some(ip),
                ..iso.clone()
            };
            // The loopback step itself, then the wrapper that runs it before every command.
            let ok = match iso.check(up).await {
                Ok(()) => with_ip.check(ProcessSpec::new("true", &cwd)).await,
                Err(e) => Err(e),
            };
            match ok {
                Ok(()) => iso = with_ip,
                Err(e) => tracing::warn!(error = %e, "cannot bring a private loopback up"),
            }
        }
        Ok(iso)
    }

    async fn check(&self, mut spec: ProcessSpec) -> Result<(), NoIsolation> {
        let what = format!("unshare {} {}", self.flag(), spec.program);
        spec.isolation = Some(self.clone());
        spec.timeout = Some(PROBE_TIMEOUT);
        let out = run(&spec, &CancellationToken::new())
            .await
            .map_err(|e| NoIsolation::NotRun {
                what: what.clone(),
                why: e.to_string(),
            })?;
        match out.end {
            End::Exited(s) if s.success() => Ok(()),
            End::Exited(s) => Err(NoIsolation::Failed {
                what,
                status: s.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr.bytes)
                    .trim()
                    .to_string(),
            }),
            End::TimedOut | End::Cancelled => Err(NoIsolation::Hung(what)),
        }
    }

    /// The command line that runs `program args` in a new network namespace. The process keeps
    /// its pid: unshare and the loopback step exec into the program.
    pub(crate) fn wrap(&self, program: &str, args: &[String]) -> (String, Vec<String>) {
        let mut wrapped = vec![self.flag().to_string(), "--".to_string()];
        if let Some(ip) = &self.ip {
            wrapped.extend([
                "/bin/sh".to_string(),
                "-c".to_string(),
                r#""$0" link set lo up 2>/dev/null; exec "$@""#.to_string(),
                path_str(ip),
            ]);
        }
        wrapped.push(program.to_string());
        wrapped.extend(args.iter().cloned());
        (path_str(&self.unshare), wrapped)
    }
}

fn path_str(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::ChildSetup;

    /// Connects to a listener of this (host-network) process from a child.
    async fn reaches(isolation: Option<Isolation>, port: u16) -> (bool, String) {
        let dir = tempfile::tempdir().unwrap();
        let setup = ChildSetup {
            isolation,
            ..ChildSetup::default()
        };
        let script = format!(
            "exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected; ip -o link show lo 2>/dev/null"
        );
        let out = run(
            &setup.spec("bash", &["-c", &script], dir.path()),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
        let text = String::from_utf8_lossy(&out.stdout.bytes).into_owned()
            + &String::from_utf8_lossy(&out.stderr.bytes);
        (text.contains("connected"), text)
    }

    #[tokio::test]
    async fn an_isolated_child_cannot_reach_the_hosts_loopback() {
        let iso = match Isolation::probe().await {
            Ok(i) => i,
            Err(e) => {
                // The daemon falls back to the host network then; nothing to check here.
                eprintln!("network namespaces unavailable on this host: {e}");
                return;
            }
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (host, text) = reaches(None, port).await;
        assert!(host, "{text}");
        // What an unprivileged daemon uses (-rn) works the same for root.
        let in_user_ns = Isolation {
            user_namespace: true,
            ..iso.clone()
        };
        for iso in [iso, in_user_ns] {
            let has_ip = iso.ip.is_some();
            let (isolated, text) = reaches(Some(iso), port).await;
            assert!(!isolated, "{text}");
            if has_ip {
                // Its own loopback is up.
                assert!(text.contains("LOOPBACK,UP"), "{text}");
            }
        }
    }

    #[test]
    fn wrapping_keeps_the_program_and_its_arguments() {
        let iso = Isolation {
            unshare: "/usr/bin/unshare".into(),
            user_namespace: true,
            ip: None,
        };
        let (p, a) = iso.wrap("bash", &["-c".to_string(), "echo hi".to_string()]);
        assert_eq!(p, "/usr/bin/unshare");
        assert_eq!(a, ["-rn", "--", "bash", "-c", "echo hi"]);
        assert_eq!("host".parse::<Network>(), Ok(Network::Host));
        assert!("hots".parse::<Network>().is_err());
    }
}
