//! Process groups that must not outlive a daemon that crashed: a long-running command (a CLI run
//! of the cli engine) is noted in a directory while it runs, with its leader's start time; a
//! daemon that is killed cannot end it, so the next start kills whatever noted group is still
//! there. The start time tells a group from a later process that got the same pid.

use std::path::{Path, PathBuf};

/// A note of a running group; dropping it removes the note (the group has ended).
#[derive(Debug)]
pub struct GroupNote {
    path: PathBuf,
}

impl GroupNote {
    /// Notes group `pgid` (its leader's pid) in `dir`. None when it cannot be written (the
    /// group then runs unnoted; the reason is logged).
    pub fn new(dir: &Path, pgid: i32) -> Option<GroupNote> {
        let start = super::orphans::start_time(pgid)?;
        let path = dir.join(pgid.to_string());
        let written = elfgate_core::private_files::create_private_dir_all(dir).and_then(|()| {
            elfgate_core::private_files::write_private(&path, start.to_string().as_bytes())
        });
        match written {
            Ok(()) => Some(GroupNote { path }),
            Err(e) => {
                tracing::warn!(error = %e, dir = %dir.display(), "cannot note a running process group");
                None
            }
        }
    }
}

impl Drop for GroupNote {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Kills (SIGKILL) every group noted in `dir` whose leader still runs with the noted start time,
/// removes the notes, and returns the groups killed. For a daemon's start.
pub fn kill_noted_groups(dir: &Path) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut killed = Vec::new();
    for e in entries.flatten() {
        let path = e.path();
        let pgid = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok());
        let noted = std::fs::read_to_string(&path)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok());
        if let (Some(pgid), Some(start)) = (pgid, noted)
            && pgid > 1
            && super::orphans::start_time(pgid) == Some(start)
        {
            use nix::sys::signal::{Signal, killpg};
            if killpg(nix::unistd::Pid::from_raw(pgid), Signal::SIGKILL).is_ok() {
                killed.push(pgid);
            }
        }
        let _ = std::fs::remove_file(&path);
    }
    killed
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};

    #[test]
    fn a_noted_group_that_still_runs_is_killed_and_a_stale_note_only_removed() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new("sleep")
            .arg("600")
            .process_group(0)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let pgid = child.id() as i32;
        let note = GroupNote::new(dir.path(), pgid).unwrap();
        // A note whose pid now belongs to another process (another start time).
        std::fs::write(dir.path().join(std::process::id().to_string()), "1").unwrap();
        std::mem::forget(note);
        assert_eq!(kill_noted_groups(dir.path()), [pgid]);
        assert!(!child.wait().unwrap().success());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
