//! Landlock, where bubblewrap cannot run (no user namespaces): the kernel's own access control,
//! which an unprivileged process applies to itself and to everything it then executes.
//!
//! How it is applied: the daemon starts its own program as a launcher (`elfgate
//! __landlock-exec PROFILE -- PROGRAM ARGS`), which walks the file system, restricts itself and
//! executes the command, keeping its pid (so the process group rules hold). It is not applied
//! between fork and exec in the daemon: the code there must be async-signal-safe (no allocation,
//! no lock) in a multi-threaded process, the ruleset's path walk cannot be, and the project
//! forbids `unsafe` (which `pre_exec` needs); a fresh single-threaded process has neither
//! problem.

mod walk;

pub(crate) use walk::beneath;

use landlock::{
    ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope,
};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The launcher's first argument: the daemon's program started with it confines itself and
/// executes the rest.
pub const LAUNCHER_ARG: &str = "__landlock-exec";

/// The ABIs this build knows, newest first; the kernel's is the first one a ruleset can be made
/// for.
const KNOWN_ABIS: &[ABI] = &[
    ABI::V7,
    ABI::V6,
    ABI::V5,
    ABI::V4,
    ABI::V3,
    ABI::V2,
    ABI::V1,
];

/// Device files every process needs to write (`> /dev/null`); the rest of /dev is read-only.
const WRITABLE_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

/// What the launcher is told: real, absolute paths, resolved by the daemon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LandlockProfile {
    /// The Landlock ABI found at start.
    pub abi: i32,
    /// Unreadable: the deny zones and the projects root.
    pub hidden: Vec<PathBuf>,
    /// Writable (the project first, then its private temporary directory).
    pub writable: Vec<PathBuf>,
    /// Readable even inside a hidden zone (an MCP server's script).
    pub readable: Vec<PathBuf>,
    /// Its TMPDIR.
    pub tmp: PathBuf,
}

/// The kernel's Landlock ABI, or why there is none.
pub(crate) fn kernel_abi() -> Result<ABI, String> {
    for abi in KNOWN_ABIS {
        let made = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::from_all(*abi))
            .and_then(Ruleset::create);
        if made.is_ok() {
            return Ok(*abi);
        }
    }
    Err("this kernel does not support Landlock (not built in, or not enabled at boot)".into())
}

/// The ruleset of `profile`: read and execute everywhere but the hidden zones, write beneath
/// the writable directories, signals and abstract sockets only within the sandbox (ABI 6+),
/// `no_new_privs`. Every right it asks for must be enforced (nothing runs half-confined).
pub(crate) fn ruleset(profile: &LandlockProfile) -> Result<RulesetCreated, String> {
    let abi = ABI::from(profile.abi);
    let all = AccessFs::from_all(abi);
    let read = AccessFs::from_read(abi);
    let device = all & (AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(all)
        .map_err(|e| e.to_string())?;
    if abi >= ABI::V6 {
        ruleset = ruleset
            .scope(Scope::from_all(abi))
            .map_err(|e| e.to_string())?;
    }
    let mut created = ruleset.create().map_err(|e| e.to_string())?;
    let mut grants: Vec<(PathBuf, BitFlags<AccessFs>)> = beneath(Path::new("/"), &profile.hidden)
        .into_iter()
        .map(|p| (p, read))
        .collect();
    grants.extend(
        profile
            .readable
            .iter()
            .filter(|p| !profile.hidden.contains(p))
            .map(|p| (p.clone(), read)),
    );
    for dir in &profile.writable {
        grants.extend(beneath(dir, &profile.hidden).into_iter().map(|p| (p, all)));
    }
    grants.extend(WRITABLE_DEVICES.iter().map(|d| (PathBuf::from(d), device)));
    for (path, access) in grants {
        // Gone since it was listed, or never there: nothing to grant.
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        let Ok(fd) = PathFd::new(&path) else {
            continue;
        };
        let access = if meta.is_dir() {
            access
        } else {
            access & AccessFs::from_file(abi)
        };
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(created)
}

/// Restricts the calling thread by `profile` (a process that then executes a program passes
/// it on). Err when any of it is not enforced.
pub(crate) fn restrict(profile: &LandlockProfile) -> Result<(), String> {
    let status = ruleset(profile)?
        .restrict_self()
        .map_err(|e| e.to_string())?;
    if status.ruleset != RulesetStatus::FullyEnforced || !status.no_new_privs {
        return Err(format!("Landlock not fully enforced: {status:?}"));
    }
    Ok(())
}

/// The launcher's arguments for `program args` confined by `profile`.
pub(crate) fn launcher_args(
    profile: &LandlockProfile,
    program: &str,
    args: &[String],
) -> Result<Vec<String>, String> {
    let json = serde_json::to_string(profile).map_err(|e| e.to_string())?;
    let mut out = vec![LAUNCHER_ARG.to_string(), json, "--".to_string()];
    out.push(program.to_string());
    out.extend(args.iter().cloned());
    Ok(out)
}

/// When the daemon's program was started as the launcher (its first argument is
/// [`LAUNCHER_ARG`]): restricts itself and executes the command, so this returns only when that
/// fails (exit status 126, the reason on stderr). None: not the launcher, go on.
pub fn launcher_main() -> Option<std::process::ExitCode> {
    let mut argv = std::env::args_os().skip(1);
    if argv.next()? != LAUNCHER_ARG {
        return None;
    }
    let failed = |why: String| {
        tell(&format!(
            "elfgate: cannot confine the command with Landlock: {why}"
        ));
        Some(std::process::ExitCode::from(126))
    };
    let profile: LandlockProfile = match argv.next().map(|a| {
        serde_json::from_str(&a.to_string_lossy()).map_err(|e| format!("bad profile: {e}"))
    }) {
        Some(Ok(p)) => p,
        Some(Err(e)) => return failed(e),
        None => return failed("no profile".into()),
    };
    if argv.next().is_none_or(|a| a != "--") {
        return failed("no -- before the command".into());
    }
    let Some(program) = argv.next() else {
        return failed("no command".into());
    };
    if let Err(e) = restrict(&profile) {
        return failed(e);
    }
    use std::os::unix::process::CommandExt;
    let err = std::process::Command::new(&program)
        .args(argv)
        .env("TMPDIR", &profile.tmp)
        .exec();
    tell(&format!("{}: {err}", program.to_string_lossy()));
    Some(std::process::ExitCode::from(
        if err.kind() == std::io::ErrorKind::NotFound {
            127
        } else {
            126
        },
    ))
}

/// Writes `line` on the launcher's stderr, which the daemon captures as the command's.
fn tell(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// One confined process's private temporary directory (Landlock has no private /tmp), removed
/// with everything in it when dropped.
#[derive(Debug)]
pub struct CallTmp(PathBuf);

impl CallTmp {
    /// A new directory of the daemon's user only, in the daemon's temporary directory.
    pub(crate) fn create() -> Result<CallTmp, String> {
        use std::os::unix::fs::DirBuilderExt;
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "elfgate-call-{}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            chrono::Utc::now().timestamp_micros()
        ));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let real = std::fs::canonicalize(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(CallTmp(real))
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for CallTmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests;
