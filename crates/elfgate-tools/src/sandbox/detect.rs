//! Finding at start whether bubblewrap or Landlock can confine a process on this host: for
//! bubblewrap the program, its version, and a trial run with the profile every confined process
//! gets; for Landlock the kernel's ABI and a trial run through the launcher.

use super::bwrap::{Profile, arguments};
use super::{Mechanism, Sandbox, SandboxMode, landlock};
use crate::process::{End, ProcessSpec, find_program, run};
use std::path::PathBuf;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long one check may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `program args` unconfined; Ok(stdout) when it exits 0, Err(why) otherwise.
async fn check(program: &str, args: Vec<String>, cwd: &std::path::Path) -> Result<String, String> {
    let mut spec = ProcessSpec::new(program, cwd);
    spec.args = args;
    spec.timeout = Some(CHECK_TIMEOUT);
    let out = run(&spec, &CancellationToken::new())
        .await
        .map_err(|e| e.to_string())?;
    let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_string();
    match out.end {
        End::Exited(s) if s.success() => Ok(text(&out.stdout.bytes)),
        End::Exited(s) => Err(format!(
            "{program} failed ({s}): {}",
            text(&out.stderr.bytes)
        )),
        End::TimedOut | End::Cancelled => Err(format!("{program} did not finish")),
    }
}

/// bubblewrap as `configured` (a name looked up in PATH, or a path), if it runs here: `--version`,
/// then `true` confined as a command is, in a network namespace of its own. Err: why not.
pub(super) async fn bubblewrap(configured: &str) -> Result<Mechanism, String> {
    let program = if configured.contains('/') {
        let p = PathBuf::from(configured);
        if !p.is_file() {
            return Err(format!("bubblewrap not found at {configured}"));
        }
        p
    } else {
        find_program(configured)
            .ok_or_else(|| format!("bubblewrap ({configured}) not found in PATH"))?
    };
    let name = program.to_string_lossy().into_owned();
    let dir = tempfile_dir()?;
    let version = check(&name, vec!["--version".into()], dir.path()).await?;
    let project = [dir.path()];
    let profile = Profile {
        deny: &[],
        projects_root: None,
        writable: project.to_vec(),
        readable: Vec::new(),
        private_network: true,
    };
    let args = arguments(&profile, "true", &[], dir.path());
    check(&name, args, dir.path()).await?;
    Ok(Mechanism::Bubblewrap { program, version })
}

/// Landlock, if the kernel has it and the launcher (the daemon's own program) confines a trial
/// command: it writes in its directory, and cannot write beside it. Err: why not.
pub(super) async fn landlock() -> Result<Mechanism, String> {
    let abi = landlock::kernel_abi()?;
    let launcher = std::env::current_exe().map_err(|e| format!("the daemon's own program: {e}"))?;
    let mechanism = Mechanism::Landlock {
        abi: abi as i32,
        launcher,
    };
    let dir = tempfile_dir()?;
    let inside = dir.path().join("inside");
    std::fs::create_dir_all(&inside).map_err(|e| format!("{}: {e}", inside.display()))?;
    let sandbox = std::sync::Arc::new(Sandbox {
        mode: SandboxMode::Required,
        mechanism: Ok(mechanism.clone()),
        deny: Vec::new(),
        projects_root: None,
        writable: Vec::new(),
        hook_writable: Vec::new(),
    });
    let mut spec = ProcessSpec::new("sh", &inside);
    spec.args = [
        "-c",
        "echo x > written && ! (echo x > ../beside) 2>/dev/null && echo confined",
    ]
    .map(String::from)
    .to_vec();
    spec.timeout = Some(CHECK_TIMEOUT);
    spec.confinement = Some(sandbox.confine(Some(&inside)));
    let out = run(&spec, &CancellationToken::new())
        .await
        .map_err(|e| e.to_string())?;
    let said = String::from_utf8_lossy(&out.stdout.bytes);
    if said.trim() == "confined" && inside.join("written").exists() {
        Ok(mechanism)
    } else {
        Err(format!(
            "a trial command under Landlock was not confined: {}{}",
            said.trim(),
            String::from_utf8_lossy(&out.stderr.bytes).trim()
        ))
    }
}

/// A directory of the trial run's own, removed when dropped.
fn tempfile_dir() -> Result<TrialDir, String> {
    let path = std::env::temp_dir().join(format!(
        "elfgate-sandbox-check-{}-{}",
        std::process::id(),
        chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default()
    ));
    std::fs::create_dir_all(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(TrialDir(path))
}

struct TrialDir(PathBuf);

impl TrialDir {
    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TrialDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
