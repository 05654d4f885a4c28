//! Running a command to its end with bounded output.

use super::{Captured, End, Output, ProcessError, ProcessGroup, ProcessSpec};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Reads a pipe to its end (or until `stop`), keeping at most `cap` bytes.
async fn read_capped(
    mut r: impl AsyncRead + Unpin,
    cap: usize,
    stop: CancellationToken,
) -> Captured {
    let mut out = Captured::default();
    let mut buf = [0u8; 8192];
    loop {
        let n = tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            r = r.read(&mut buf) => match r {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
        };
        out.total += n as u64;
        let room = cap.saturating_sub(out.bytes.len());
        out.bytes.extend_from_slice(&buf[..n.min(room)]);
    }
    out
}

async fn joined(task: Option<JoinHandle<Captured>>) -> Captured {
    match task {
        Some(t) => t.await.unwrap_or_default(),
        None => Captured::default(),
    }
}

/// Runs `spec` until it exits, its timeout fires or `cancel` fires, and returns its output. The
/// group is stopped in every case (politely unless the leader exited by itself), and its leader
/// reaped, before this returns; dropping the future stops it too.
pub async fn run(spec: &ProcessSpec, cancel: &CancellationToken) -> Result<Output, ProcessError> {
    let mut group = ProcessGroup::spawn(spec)?;
    // Fired when the output is collected, or when this future is dropped.
    let stop = CancellationToken::new();
    let _stop_on_drop = stop.clone().drop_guard();
    let out_task = group
        .take_stdout()
        .map(|s| tokio::spawn(read_capped(s, spec.stdout_cap, stop.clone())));
    let err_task = group
        .take_stderr()
        .map(|s| tokio::spawn(read_capped(s, spec.stderr_cap, stop.clone())));
    if let (Some(mut w), Some(bytes)) = (group.take_stdin(), spec.stdin.clone()) {
        let stop = stop.clone();
        tokio::spawn(async move {
            // A child that does not read its input is fine.
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = async {
                    let _ = w.write_all(&bytes).await;
                    let _ = w.shutdown().await;
                } => {}
            }
        });
    }
    let deadline = async {
        match spec.timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    let end = tokio::select! {
        biased;
        _ = cancel.cancelled() => End::Cancelled,
        _ = deadline => End::TimedOut,
        s = group.wait() => match s {
            Ok(s) => End::Exited(s),
            Err(e) => {
                group.stop(true).await;
                return Err(e);
            }
        },
    };
    group.stop(!matches!(end, End::Exited(_))).await;
    // The pipes close once nothing holds them; a process that is allowed to live on (see the
    // sweep's rule) may still hold them: its output is not waited for beyond the grace.
    let (stdout, stderr) = collect(out_task, err_task, spec.grace, &stop).await;
    Ok(Output {
        end,
        stdout,
        stderr,
    })
}

async fn collect(
    out: Option<JoinHandle<Captured>>,
    err: Option<JoinHandle<Captured>>,
    grace: Duration,
    stop: &CancellationToken,
) -> (Captured, Captured) {
    let both = async { tokio::join!(joined(out), joined(err)) };
    tokio::pin!(both);
    match tokio::time::timeout(grace, &mut both).await {
        Ok(r) => r,
        Err(_) => {
            stop.cancel();
            both.await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{ChildEnv, ChildSetup};
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;
    use std::time::Instant;

    /// A safety net for waits on a condition; never expected to run out.
    const GUARD: Duration = Duration::from_secs(30);

    fn bash(dir: &Path, script: &str) -> ProcessSpec {
        ChildSetup::default().spec("bash", &["-c", script], dir)
    }

    fn alive(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(") ").and_then(|(_, r)| r.chars().next()))
            .is_some_and(|c| c != 'Z' && c != 'X')
    }

    /// Polls (for at most the guard time) until `pid` is gone: SIGKILL is delivered
    /// asynchronously.
    async fn until_dead(pid: i32) -> bool {
        let t0 = Instant::now();
        while t0.elapsed() < GUARD {
            if !alive(pid) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }

    fn read_pid(dir: &Path, file: &str) -> Option<i32> {
        std::fs::read_to_string(dir.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    fn pid_in(dir: &Path, file: &str) -> i32 {
        read_pid(dir, file).unwrap()
    }

    #[tokio::test]
    async fn keeps_the_cap_and_counts_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let mut spec = bash(
            dir.path(),
            "head -c 100000 /dev/zero | tr '\\0' a; printf 0123456789 >&2; exit 4",
        );
        spec.stdout_cap = 10;
        spec.stderr_cap = 4;
        let out = run(&spec, &CancellationToken::new()).await.unwrap();
        assert!(matches!(out.end, End::Exited(s) if s.code() == Some(4)));
        assert_eq!(out.stdout.bytes, b"aaaaaaaaaa");
        assert_eq!(out.stdout.total, 100_000);
        assert!(out.stdout.capped());
        assert_eq!(out.stderr.bytes, b"0123");
        assert_eq!(out.stderr.total, 10);
    }

    #[tokio::test]
    async fn feeds_stdin() {
        let dir = tempfile::tempdir().unwrap();
        let mut spec = bash(dir.path(), "tr a-z A-Z");
        spec.stdin = Some(b"hello".to_vec());
        let out = run(&spec, &CancellationToken::new()).await.unwrap();
        assert_eq!(out.stdout.bytes, b"HELLO");
    }

    #[tokio::test]
    async fn a_timeout_ends_the_whole_group_even_one_deaf_to_sigterm() {
        // The script writes sh.pid last, once it ignores SIGTERM and its job runs. A machine
        // slower than the timeout may end it before that, which tests nothing: then again with
        // twice the timeout.
        let mut timeout = Duration::from_millis(300);
        let (dir, out) = loop {
            let dir = tempfile::tempdir().unwrap();
            let mut spec = bash(
                dir.path(),
                "trap '' TERM; sleep 600 & echo $! > bg.pid; echo $$ > sh.pid; wait",
            );
            spec.timeout = Some(timeout);
            spec.grace = Duration::from_millis(200);
            let out = run(&spec, &CancellationToken::new()).await.unwrap();
            if read_pid(dir.path(), "sh.pid").is_some() {
                break (dir, out);
            }
            assert!(
                timeout < GUARD,
                "the script never started within {timeout:?}"
            );
            timeout *= 2;
        };
        assert_eq!(out.end, End::TimedOut);
        let sh = pid_in(dir.path(), "sh.pid");
        // The leader was reaped before run returned; its background job is killed with it.
        assert!(!alive(sh));
        assert!(until_dead(pid_in(dir.path(), "bg.pid")).await);
    }

    #[tokio::test]
    async fn cancelling_ends_the_group() {
        let dir = tempfile::tempdir().unwrap();
        let spec = bash(dir.path(), "echo $$ > sh.pid; sleep 600");
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        let marker = dir.path().join("sh.pid");
        let t0 = Instant::now();
        let task = tokio::spawn(async move { run(&spec, &c).await });
        while !marker.exists() || std::fs::read_to_string(&marker).unwrap().is_empty() {
            assert!(t0.elapsed() < GUARD);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        cancel.cancel();
        let out = task.await.unwrap().unwrap();
        assert_eq!(out.end, End::Cancelled);
        assert!(!alive(pid_in(dir.path(), "sh.pid")));
    }

    #[tokio::test]
    async fn background_jobs_do_not_outlive_a_normal_exit() {
        let dir = tempfile::tempdir().unwrap();
        let spec = bash(dir.path(), "sleep 600 & echo $! > bg.pid; echo done");
        let out = run(&spec, &CancellationToken::new()).await.unwrap();
        assert!(matches!(out.end, End::Exited(s) if s.success()));
        assert_eq!(out.stdout.bytes, b"done\n");
        assert!(until_dead(pid_in(dir.path(), "bg.pid")).await);
    }

    #[tokio::test]
    async fn the_child_environment_is_clean() {
        let dir = tempfile::tempdir().unwrap();
        let secrets: BTreeSet<String> = ["HOME".to_string()].into();
        let set: BTreeMap<String, String> = [("ADDED".to_string(), "yes".to_string())].into();
        let setup = ChildSetup {
            env: ChildEnv::from_daemon(&set, &["CARGO_PKG_NAME".to_string()], &secrets),
            isolation: None,
            sandbox: None,
        };
        let spec = setup.spec("env", &[], dir.path());
        let out = run(&spec, &CancellationToken::new()).await.unwrap();
        let text = String::from_utf8(out.stdout.bytes).unwrap();
        let names: BTreeSet<&str> = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, _)| k)
            .collect();
        // The test runner's environment is full of CARGO_* variables; only the one passed through
        // arrives, and a name in the deny set does not arrive even though it is allow-listed.
        let expected: BTreeSet<&str> = ["ADDED", "CARGO_PKG_NAME", "PATH"].into();
        let unexpected: Vec<&&str> = names
            .iter()
            .filter(|n| {
                !expected.contains(**n)
                    && ![
                        "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TZ", "TMPDIR",
                        "TMP", "TEMP",
                    ]
                    .contains(n)
                    && !n.starts_with("LC_")
            })
            .collect();
        assert!(unexpected.is_empty(), "{unexpected:?} in {text}");
        assert!(
            names.contains("PATH") && names.contains("ADDED") && names.contains("CARGO_PKG_NAME"),
            "{text}"
        );
        assert!(!names.contains("HOME"), "{text}");
    }
}
