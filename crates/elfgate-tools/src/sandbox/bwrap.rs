//! bubblewrap's command line for one confined process: the whole file system read-only, a
//! fresh /proc, a minimal /dev and a private /tmp, the deny zones and the projects root hidden,
//! the project and the profile's other writable directories bound back writable.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

/// What a confined process may see and write.
#[derive(Debug, Clone, Default)]
pub(super) struct Profile<'a> {
    /// Hidden: an empty directory over a directory, an empty file over a file.
    pub deny: &'a [PathBuf],
    /// Hidden like a deny zone, with the project shown again inside it.
    pub projects_root: Option<&'a Path>,
    /// Writable directories (the project first).
    pub writable: Vec<&'a Path>,
    /// Paths shown read-only even where a private /tmp or a hidden zone covers them (an MCP
    /// server's script).
    pub readable: Vec<&'a Path>,
    /// A network namespace of its own (only a loopback of its own).
    pub private_network: bool,
}

/// One mount, applied in path order so that a directory's mount comes before what is mounted
/// inside it: a deny zone inside the project stays hidden, a CLI's home under the data directory
/// is shown again.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Mount {
    /// `--ro-bind P P`.
    Readable(PathBuf),
    /// `--bind P P`.
    Writable(PathBuf),
    /// `--tmpfs P`: an empty directory over a directory.
    EmptyDir(PathBuf),
    /// `--ro-bind /dev/null P`: an empty file over a file.
    EmptyFile(PathBuf),
}

impl Mount {
    fn path(&self) -> &Path {
        match self {
            Mount::Readable(p) | Mount::Writable(p) | Mount::EmptyDir(p) | Mount::EmptyFile(p) => p,
        }
    }

    /// Hides `path` as it is now; None when it does not exist (nothing to hide).
    fn hiding(path: &Path) -> Option<Mount> {
        let real = std::fs::canonicalize(path).ok()?;
        let meta = std::fs::metadata(&real).ok()?;
        Some(if meta.is_dir() {
            Mount::EmptyDir(real)
        } else {
            Mount::EmptyFile(real)
        })
    }

    fn push_args(&self, out: &mut Vec<String>) {
        let p = self.path().to_string_lossy().into_owned();
        match self {
            Mount::Readable(_) => out.extend(["--ro-bind".into(), p.clone(), p]),
            Mount::Writable(_) => out.extend(["--bind".into(), p.clone(), p]),
            Mount::EmptyDir(_) => out.extend(["--tmpfs".into(), p]),
            Mount::EmptyFile(_) => out.extend(["--ro-bind".into(), "/dev/null".into(), p]),
        }
    }
}

/// The arguments of `bwrap` that run `program args` in `cwd` confined by `profile`. Paths are
/// resolved now (symbolic links followed), so that what is hidden is the file itself, whatever
/// name a command uses for it; paths that do not exist are left out.
pub(super) fn arguments(
    profile: &Profile<'_>,
    program: &str,
    args: &[String],
    cwd: &Path,
) -> Vec<String> {
    let mut out: Vec<String> = [
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        // Its own IPC namespace and pid namespace: it sees its own processes only, and what it
        // leaves running dies with the namespace.
        "--unshare-ipc",
        "--unshare-pid",
        // Killed when the daemon's end of it (bwrap) is killed with its process group. No
        // --new-session: the daemon ends a command by killing its process group, which a new
        // session would leave.
        "--die-with-parent",
        "--setenv",
        "TMPDIR",
        "/tmp",
    ]
    .map(String::from)
    .to_vec();
    if profile.private_network {
        // bwrap brings the namespace's loopback up.
        out.push("--unshare-net".into());
    }
    let mut mounts = vec![Mount::EmptyDir(PathBuf::from("/tmp"))];
    mounts.extend(profile.deny.iter().filter_map(|p| Mount::hiding(p)));
    if let Some(root) = profile.projects_root {
        mounts.extend(Mount::hiding(root));
    }
    mounts.extend(
        profile
            .writable
            .iter()
            .filter_map(|p| std::fs::canonicalize(p).ok())
            .map(Mount::Writable),
    );
    mounts.extend(
        profile
            .readable
            .iter()
            .filter_map(|p| std::fs::canonicalize(p).ok())
            .map(Mount::Readable),
    );
    // Path order puts a directory before what lies inside it; at one path the hiding mount
    // comes last and wins.
    mounts.sort_by(|a, b| a.path().cmp(b.path()).then(a.cmp(b)));
    mounts.dedup();
    for m in &mounts {
        m.push_args(&mut out);
    }
    out.push("--chdir".into());
    out.push(cwd.to_string_lossy().into_owned());
    out.push("--".into());
    out.push(program.to_string());
    out.extend(args.iter().cloned());
    out
}

/// The exit status of the program bwrap ran, from bwrap's own. bwrap (its pid 1 in the pid
/// namespace, then its monitor outside) cannot die of the signal that killed the program, so it
/// exits with 128+N instead, as shells do; that status is read back as "killed by signal N", for
/// every N a signal can have. A program that exits by itself with 128+N (a shell whose last
/// command was killed by signal N does) is reported the same way: the two cannot be told apart
/// from outside. bwrap killed itself (the daemon ending the process group) keeps its status.
pub fn status_inside(status: ExitStatus) -> ExitStatus {
    match status.code() {
        Some(code) if code > 128 && code - 128 <= libc::SIGRTMAX() => {
            ExitStatus::from_raw(code - 128)
        }
        _ => status,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_128_plus_n_is_read_as_killed_by_signal_n() {
        // A wait status: the exit code in the second byte, a signal in the low seven bits.
        let exited = |code: i32| ExitStatus::from_raw(code << 8);
        assert_eq!(status_inside(exited(137)).signal(), Some(9));
        assert_eq!(status_inside(exited(137)).code(), None);
        assert_eq!(status_inside(exited(130)).signal(), Some(2));
        for code in [0, 1, 2, 127, 128, 255] {
            assert_eq!(status_inside(exited(code)).code(), Some(code), "{code}");
        }
        let killed = ExitStatus::from_raw(9);
        assert_eq!(status_inside(killed).signal(), Some(9));
    }

    fn pairs(args: &[String]) -> String {
        args.join(" ")
    }

    #[test]
    fn deny_zones_are_hidden_in_path_order_and_missing_ones_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let data = base.join("data");
        let home = data.join("cli/codex");
        let project = base.join("project");
        let secret = project.join("secret.txt");
        for d in [&home, &project] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(&secret, "s").unwrap();
        let deny = vec![data.clone(), secret.clone(), base.join("missing")];
        let profile = Profile {
            deny: &deny,
            projects_root: None,
            writable: vec![&project, &home],
            readable: Vec::new(),
            private_network: true,
        };
        let args = arguments(&profile, "bash", &["-c".into(), "true".into()], &project);
        let line = pairs(&args);
        assert!(
            line.starts_with("--ro-bind / / --dev /dev --proc /proc"),
            "{line}"
        );
        assert!(line.contains("--unshare-net"), "{line}");
        assert!(!line.contains("missing"), "{line}");
        let at = |needle: &str| {
            line.find(needle)
                .unwrap_or_else(|| panic!("{needle} in {line}"))
        };
        // The data directory is hidden before the CLI's home inside it is shown again.
        let hide_data = at(&format!("--tmpfs {} ", data.display()));
        let show_home = at(&format!("--bind {0} {0}", home.display()));
        assert!(hide_data < show_home, "{line}");
        // A secret file inside the project stays hidden.
        let show_project = at(&format!("--bind {0} {0}", project.display()));
        let hide_secret = at(&format!("--ro-bind /dev/null {}", secret.display()));
        assert!(show_project < hide_secret, "{line}");
        assert!(line.ends_with(&format!("--chdir {} -- bash -c true", project.display())));
    }

    #[test]
    fn a_hidden_path_that_is_also_writable_stays_hidden() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let deny = vec![base.clone()];
        let profile = Profile {
            deny: &deny,
            projects_root: None,
            writable: vec![&base],
            readable: Vec::new(),
            private_network: false,
        };
        let line = pairs(&arguments(&profile, "true", &[], &base));
        assert!(!line.contains("--unshare-net"), "{line}");
        let bind = line
            .find(&format!("--bind {0} {0}", base.display()))
            .unwrap();
        let hide = line.find(&format!("--tmpfs {} ", base.display())).unwrap();
        assert!(bind < hide, "{line}");
    }
}
