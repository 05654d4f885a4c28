//! Stdio servers a daemon that was killed (SIGKILL, a crash) could not stop: each running server's
//! process group is recorded in a file of the data directory, with its start time, and the next
//! daemon on that directory kills the groups still alive at start. The start time tells a
//! recorded group from an unrelated process that got its pid since.

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

/// The file of running servers' process groups.
pub const FILE_NAME: &str = "mcp-servers.pids";

/// The record of running servers.
#[derive(Debug)]
pub struct Leftovers {
    path: PathBuf,
    /// pgid -> start time (clock ticks after boot).
    groups: Mutex<BTreeMap<i32, u64>>,
}

/// A process's start time, from /proc; None when it is gone or a zombie.
fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    if matches!(f.first(), Some(&"Z") | Some(&"X")) {
        return None;
    }
    f.get(19)?.parse().ok()
}

impl Leftovers {
    /// Kills the groups a previous daemon recorded in `dir` and still alive, and starts an empty
    /// record. Returns the record and how many groups were killed.
    pub fn reap(dir: &Path) -> (Leftovers, usize) {
        let path = dir.join(FILE_NAME);
        let mut killed = 0;
        for line in std::fs::read_to_string(&path).unwrap_or_default().lines() {
            let mut it = line.split_whitespace().map(str::parse::<u64>);
            let (Some(Ok(pgid)), Some(Ok(start))) = (it.next(), it.next()) else {
                continue;
            };
            let Ok(pgid) = i32::try_from(pgid) else {
                continue;
            };
            if pgid > 1 && start_time(pgid) == Some(start) {
                tracing::info!(
                    pgid,
                    "stopping an MCP server a previous daemon left running"
                );
                let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
                killed += 1;
            }
        }
        let record = Leftovers {
            path,
            groups: Mutex::new(BTreeMap::new()),
        };
        record.write(&BTreeMap::new());
        (record, killed)
    }

    fn write(&self, groups: &BTreeMap<i32, u64>) {
        let text: String = groups.iter().map(|(p, s)| format!("{p} {s}\n")).collect();
        if let Err(e) = std::fs::write(&self.path, text) {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot record MCP server processes");
        }
    }

    /// Records a server's group.
    pub(crate) fn add(&self, pgid: i32) {
        let Some(start) = start_time(pgid) else {
            return;
        };
        let mut g = self.groups.lock().unwrap_or_else(PoisonError::into_inner);
        g.insert(pgid, start);
        self.write(&g);
    }

    /// Forgets a group once it is stopped.
    pub(crate) fn remove(&self, pgid: i32) {
        let mut g = self.groups.lock().unwrap_or_else(PoisonError::into_inner);
        if g.remove(&pgid).is_some() {
            self.write(&g);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::time::{Duration, Instant};

    #[test]
    fn a_recorded_group_still_alive_is_killed_and_a_reused_pid_is_not() {
        let dir = std::env::temp_dir().join(format!("elfgate-leftovers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("600")
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let (record, _) = Leftovers::reap(&dir);
        record.add(pid);
        // The same pid with another start time: a process that only reused the number.
        let me = std::process::id() as i32;
        let text = std::fs::read_to_string(dir.join(FILE_NAME)).unwrap();
        std::fs::write(dir.join(FILE_NAME), format!("{text}{me} 1\n")).unwrap();
        let (_, killed) = Leftovers::reap(&dir);
        assert_eq!(killed, 1);
        let t0 = Instant::now();
        while child.try_wait().unwrap().is_none() {
            assert!(t0.elapsed() < Duration::from_secs(30));
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(std::fs::read_to_string(dir.join(FILE_NAME)).unwrap(), "");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
