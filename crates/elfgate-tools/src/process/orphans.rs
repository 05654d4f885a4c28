//! Processes that left their group: the registry of the daemon's own children and the sweep that
//! kills and reaps the processes a finished command left behind.
//!
//! The daemon is a child subreaper ([`become_subreaper`]), so a process that escaped its group
//! (`setsid`, a double fork) and lost its parent is re-parented to the daemon instead of init.
//! Such an orphan cannot be traced back to the command that started it. The rule: an orphan is
//! left alone while a process group the daemon still runs *could* own it — a live group that
//! started before it and shares its process group or its network namespace (an isolated command
//! has a namespace of its own, a host-network command shares the daemon's). Every other orphan is
//! killed (SIGKILL) and reaped when a group ends. So an isolated command's escapees die when it
//! ends whatever runs alongside; a host-network command's escapees live until no older
//! host-network group is running.
//!
//! Tokio reaps the children it spawned, so the sweep never waits for "any child" (that would
//! steal their exit statuses): it waits for each orphan by pid, and every pid the helper spawned
//! is in the registry from before its spawn returns until tokio has reaped it.

use elfgate_core::sync::lock;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Pids (= process group ids) of the live children the helper spawned.
static SPAWNED: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

/// Set once the process has become a child subreaper. Without it no orphan is ever re-parented
/// to this process, so a child the helper did not spawn is not an orphan but another part of the
/// process's own (a test binary running a daemon in-process beside other children): the sweep
/// then leaves every child alone.
static SUBREAPER: AtomicBool = AtomicBool::new(false);

/// One sweep at a time: two sweeps could otherwise wait for, or kill, the same orphan.
static SWEEPING: Mutex<()> = Mutex::new(());

fn spawned() -> MutexGuard<'static, BTreeSet<i32>> {
    lock(&SPAWNED)
}

/// Spawns `cmd` and records its pid before any sweep can see the new process.
pub(crate) fn spawn_registered(
    cmd: &mut tokio::process::Command,
) -> std::io::Result<(tokio::process::Child, i32)> {
    let mut set = spawned();
    let child = cmd.spawn()?;
    let pid = child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .ok_or_else(|| std::io::Error::other("the new process has no pid"))?;
    set.insert(pid);
    Ok((child, pid))
}

/// Forgets a child once tokio has reaped it.
pub(crate) fn forget(pid: i32) {
    spawned().remove(&pid);
}

/// When process `pid` started (clock ticks after boot); None when it is gone (Linux only).
pub(crate) fn start_time(pid: i32) -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        linux::read(pid).map(|p| p.start)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = pid;
        None
    }
}

/// Makes the daemon adopt the orphans of its descendants (Linux only; elsewhere an
/// `Unsupported` error).
pub fn become_subreaper() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        nix::sys::prctl::set_child_subreaper(true).map_err(std::io::Error::from)?;
        SUBREAPER.store(true, Ordering::Release);
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "child subreapers exist on Linux only",
        ))
    }
}

/// Kills and reaps the orphans no live group can own (see the module documentation).
pub(crate) async fn sweep() {
    if !SUBREAPER.load(Ordering::Acquire) {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        // Blocking /proc reads and waits; the task runs to its end even if the caller goes away.
        let _ = tokio::task::spawn_blocking(linux::sweep).await;
    }
}

/// What the sweep knows of a process.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
struct Proc {
    pid: i32,
    comm: String,
    state: char,
    ppid: i32,
    pgid: i32,
    /// Clock ticks after boot.
    start: u64,
    /// None when unreadable (it is then taken to be the daemon's).
    netns: Option<String>,
}

/// Of `orphans` (alive, not spawned by the helper), those no group of `live` can own.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn unclaimed<'a>(orphans: &'a [Proc], live: &[Proc], daemon_netns: Option<&str>) -> Vec<&'a Proc> {
    let netns = |p: &'a Proc| p.netns.as_deref().or(daemon_netns);
    orphans
        .iter()
        .filter(|o| {
            !live.iter().any(|g| {
                g.start <= o.start
                    && (o.pgid == g.pid
                        || (netns(o).is_some() && netns(o) == g.netns.as_deref().or(daemon_netns)))
            })
        })
        .collect()
}

#[cfg(target_os = "linux")]
mod linux {
    use super::{Proc, SWEEPING, spawned, unclaimed};
    use nix::sys::signal::{Signal, kill};
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    use nix::unistd::Pid;
    use std::time::{Duration, Instant};

    /// Rounds of a sweep: killing an orphan makes its children orphans of the daemon in turn.
    const ROUNDS: usize = 16;

    /// How long the sweep waits for a killed orphan to turn into a zombie; a process stuck in
    /// an uninterruptible sleep is reaped by a later sweep instead of holding this one up.
    const REAP_WAIT: Duration = Duration::from_secs(1);

    pub(super) fn read(pid: i32) -> Option<Proc> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let open = stat.find('(')?;
        let (head, rest) = stat.rsplit_once(") ")?;
        let comm = head.get(open + 1..)?.to_string();
        // state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime
        // cutime cstime priority nice num_threads itrealvalue starttime ...
        let f: Vec<&str> = rest.split_whitespace().collect();
        Some(Proc {
            pid,
            comm,
            state: f.first()?.chars().next()?,
            ppid: f.get(1)?.parse().ok()?,
            pgid: f.get(2)?.parse().ok()?,
            start: f.get(19)?.parse().ok()?,
            netns: netns(&pid.to_string()),
        })
    }

    fn netns(pid: &str) -> Option<String> {
        std::fs::read_link(format!("/proc/{pid}/ns/net"))
            .ok()
            .map(|p| p.to_string_lossy().into_owned())
    }

    fn children_of(parent: i32) -> Vec<Proc> {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter_map(read)
            .filter(|p| p.ppid == parent)
            .collect()
    }

    fn reap(pid: Pid) -> bool {
        !matches!(
            waitpid(pid, Some(WaitPidFlag::WNOHANG)),
            Ok(WaitStatus::StillAlive)
        )
    }

    pub(super) fn sweep() {
        let _one = SWEEPING.lock();
        let me = std::process::id() as i32;
        let daemon_netns = netns("self");
        for _ in 0..ROUNDS {
            // Children first, the registry second: a child spawned in between is not in the list,
            // one spawned before is registered by the time the lock is ours.
            let children = children_of(me);
            let registered = spawned().clone();
            let live: Vec<Proc> = registered.iter().filter_map(|&p| read(p)).collect();
            let (zombies, orphans): (Vec<Proc>, Vec<Proc>) = children
                .into_iter()
                .filter(|p| !registered.contains(&p.pid))
                .partition(|p| p.state == 'Z' || p.state == 'X');
            for z in &zombies {
                reap(Pid::from_raw(z.pid));
            }
            let doomed = unclaimed(&orphans, &live, daemon_netns.as_deref());
            if doomed.is_empty() {
                return;
            }
            for o in doomed {
                tracing::info!(
                    pid = o.pid,
                    command = %o.comm,
                    "killing a process a finished command left behind"
                );
                let pid = Pid::from_raw(o.pid);
                let _ = kill(pid, Signal::SIGKILL);
                let deadline = Instant::now() + REAP_WAIT;
                while !reap(pid) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: i32, pgid: i32, start: u64, netns: Option<&str>) -> Proc {
        Proc {
            pid,
            comm: "x".into(),
            state: 'S',
            ppid: 1,
            pgid,
            start,
            netns: netns.map(str::to_string),
        }
    }

    fn pids(v: Vec<&Proc>) -> Vec<i32> {
        v.into_iter().map(|p| p.pid).collect()
    }

    #[test]
    fn an_orphan_is_spared_only_while_a_group_that_could_own_it_runs() {
        let host = Some("net:[1]");
        // A host-network group started at 10 and an isolated one started at 20.
        let live = [p(100, 100, 10, host), p(200, 200, 20, Some("net:[2]"))];
        let orphans = [
            // Still in the host group's process group.
            p(101, 100, 11, host),
            // Escaped from the isolated group: its namespace tells.
            p(201, 201, 21, Some("net:[2]")),
            // Escaped from an isolated group that ended.
            p(301, 301, 30, Some("net:[3]")),
            // A host-network escapee: the live host group could have started it.
            p(102, 102, 12, None),
            // A host-network escapee older than every live group: none of them started it.
            p(5, 5, 5, host),
        ];
        assert_eq!(pids(unclaimed(&orphans, &live, host)), [301, 5]);
        // Once no group runs, every orphan goes.
        assert_eq!(pids(unclaimed(&orphans, &[], host)).len(), orphans.len());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn reads_its_own_process() {
        let me = linux::read(std::process::id() as i32).unwrap();
        assert!(me.start > 0);
        assert!(me.netns.unwrap().starts_with("net:["));
        assert!(!me.comm.is_empty());
    }
}
