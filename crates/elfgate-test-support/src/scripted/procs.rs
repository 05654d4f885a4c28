//! The processes a tool call starts, seen from /proc.

use crate::common::GUARD;
use std::path::Path;
use std::time::{Duration, Instant};

/// The state letter of a process (R, S, Z, ...); None once it is gone.
fn state_of(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// Processes of these pids that are still alive (not zombies).
pub fn alive(pids: &[i32]) -> Vec<i32> {
    pids.iter()
        .copied()
        .filter(|p| state_of(*p).is_some_and(|c| c != 'Z' && c != 'X'))
        .collect()
}

/// Every process's pid.
fn pids() -> impl Iterator<Item = i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
}

/// Live processes whose command line starts with `name` (a name given with `exec -a`).
pub fn live_named(name: &str) -> Vec<i32> {
    let named: Vec<i32> = pids()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.starts_with(name.as_bytes()))
        })
        .collect();
    alive(&named)
}

/// Processes of a process group that are still alive (not zombies).
pub fn live_in_group(pgid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for pid in pids() {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp ...
        let Some(rest) = stat.rsplit_once(") ").map(|(_, r)| r) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() > 2 && f[2] == pgid.to_string() && f[0] != "Z" && f[0] != "X" {
            out.push(pid);
        }
    }
    out
}

/// Live processes (not zombies) whose environment has the entry `name=value`: what a process
/// and everything it started that kept its environment, whatever their groups.
pub fn live_with_env(name: &str, value: &str) -> Vec<i32> {
    let want = format!("{name}={value}");
    let mut out = Vec::new();
    for pid in pids() {
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if environ.split(|b| *b == 0).any(|v| v == want.as_bytes()) && !alive(&[pid]).is_empty() {
            out.push(pid);
        }
    }
    out
}

/// Live processes (not zombies) whose working directory is `dir`.
pub fn live_in(dir: &Path) -> Vec<i32> {
    pids()
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == dir)
                && !alive(&[*pid]).is_empty()
        })
        .collect()
}

/// Waits (bounded by the guard time) until `check` finds no live process; returns what is left.
/// SIGKILL is delivered asynchronously, so a process killed a moment ago may still show as
/// running on a loaded machine.
pub async fn until_dead<T>(check: impl Fn() -> Vec<T>) -> Vec<T> {
    let deadline = Instant::now() + GUARD;
    loop {
        let left = check();
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The pid a command wrote into `path` (its `$$` or `$!`) as this test sees it, while that
/// process runs: a confined command lives in a pid namespace of its own, whose pids are not the
/// host's, so the process is looked for among those working in the file's directory by the last
/// pid of its NSpid. A file may name the namespace after the pid (`echo $$
/// $(readlink /proc/self/ns/pid)`), for a directory where processes of several namespaces work
/// (a confined agent and the commands it has the daemon run). None when the file is not there
/// yet or the process is gone.
pub fn read_pid(path: &Path) -> Option<i32> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut fields = text.split_whitespace();
    let written: i32 = fields.next()?.parse().ok()?;
    if let Some(ns) = fields.next() {
        return host_pid(ns, written);
    }
    let dir = std::fs::canonicalize(path.parent()?).ok()?;
    pids().find(|pid| {
        let here = std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|c| c == dir);
        here && !alive(&[*pid]).is_empty() && own_pid(*pid) == Some(written)
    })
}

/// The pid namespace of a process, as `/proc/PID/ns/pid` names it (`pid:[4026531836]`); None
/// once it is gone.
fn pid_ns(pid: i32) -> Option<String> {
    let link = std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()?;
    Some(link.to_string_lossy().into_owned())
}

/// Whether `ns` (what `/proc/self/ns/pid` names inside a process) is another pid namespace than
/// this test's: the process ran confined.
pub fn is_other_pid_ns(ns: &str) -> bool {
    pid_ns(std::process::id() as i32).is_some_and(|own| own != ns)
}

/// The pid, as this test sees it, of the live process whose pid is `own` in the pid namespace
/// `ns` (what `/proc/self/ns/pid` names inside it): a confined process lives in a pid namespace
/// of its own, whose pids are not the host's. None once it is gone.
pub fn host_pid(ns: &str, own: i32) -> Option<i32> {
    pids().find(|pid| {
        pid_ns(*pid).as_deref() == Some(ns)
            && own_pid(*pid) == Some(own)
            && !alive(&[*pid]).is_empty()
    })
}

/// Live processes (not zombies) of the pid namespace `ns`: everything a confined process and
/// what it started left running, whatever their groups and sessions.
pub fn live_in_pid_ns(ns: &str) -> Vec<i32> {
    let inside: Vec<i32> = pids()
        .filter(|pid| pid_ns(*pid).as_deref() == Some(ns))
        .collect();
    alive(&inside)
}

/// The pid a process has in its own pid namespace (its NSpid's last field).
fn own_pid(pid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("NSpid:"))?;
    line.split_whitespace().last()?.parse().ok()
}

/// The process group of a running process.
pub fn pgid_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(") ")?.1;
    rest.split_whitespace().nth(2)?.parse().ok()
}
