//! Child processes: every command the daemon runs (shell calls, hooks, the cli engine's CLIs, and
//! later MCP servers) is started here, in a process group of its own, with a clean environment
//! ([`ChildEnv`]) and, when asked, a private network ([`Isolation`]). Its output is captured up to
//! a cap ([`run`]) or read by the caller ([`ProcessGroup`]); on timeout, cancellation or drop the
//! group gets SIGTERM, a short grace, then SIGKILL, and the leader is reaped. What the group
//! leaves behind is swept (see [`orphans`](self::orphans) for the rule), and a long-running group
//! can be noted so that a daemon killed meanwhile ends it at its next start ([`GroupNote`]). The
//! daemon must not start children any other way: the sweep takes an unregistered child of the
//! daemon for an escaped process.

mod env;
mod group;
mod network;
mod notes;
mod orphans;
mod run;

pub use env::ChildEnv;
pub use group::ProcessGroup;
pub(crate) use network::find_program;
pub use network::{Isolation, Network, NoIsolation};
pub use notes::{GroupNote, kill_noted_groups};
pub use orphans::become_subreaper;
pub use run::run;

use crate::sandbox::{Confinement, Sandbox, Unconfinable};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

/// How long a group gets between SIGTERM and SIGKILL.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(2);

/// What to run and how.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    /// The program (looked up in the child's PATH unless it contains a slash).
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its working directory.
    pub cwd: PathBuf,
    /// Its whole environment.
    pub env: ChildEnv,
    /// A network namespace of its own; None shares the daemon's network.
    pub isolation: Option<Isolation>,
    /// Its sandbox profile; None: it runs unconfined (the daemon's own checks).
    pub confinement: Option<Confinement>,
    /// Bytes written to its stdin, which is then closed; None: stdin is /dev/null.
    pub stdin: Option<Vec<u8>>,
    /// Bytes of stdout kept (the rest is read and counted).
    pub stdout_cap: usize,
    /// Bytes of stderr kept (the rest is read and counted).
    pub stderr_cap: usize,
    /// How long it may run; None: until it exits or is cancelled.
    pub timeout: Option<Duration>,
    /// Between SIGTERM and SIGKILL; also how long output still held open by processes allowed
    /// to live on is waited for.
    pub grace: Duration,
}

impl ProcessSpec {
    /// `program` without arguments in `cwd`: the default child environment, the daemon's network,
    /// stdin closed, 64 KiB of each output kept, no timeout.
    pub fn new(program: impl Into<String>, cwd: &Path) -> Self {
        ProcessSpec {
            program: program.into(),
            args: Vec::new(),
            cwd: cwd.to_path_buf(),
            env: ChildEnv::default(),
            isolation: None,
            confinement: None,
            stdin: None,
            stdout_cap: 64 * 1024,
            stderr_cap: 64 * 1024,
            timeout: None,
            grace: DEFAULT_GRACE,
        }
    }
}

/// The environment and network commands of a session (or of the daemon's hooks) get.
#[derive(Debug, Clone, Default)]
pub struct ChildSetup {
    /// Their environment.
    pub env: ChildEnv,
    /// Their network namespace; None: the daemon's network.
    pub isolation: Option<Isolation>,
    /// The sandbox that confines them; None: they run unconfined.
    pub sandbox: Option<Arc<Sandbox>>,
}

impl ChildSetup {
    /// `program args` in `cwd` with this environment and network, confined to `cwd` as its
    /// project when there is a sandbox (other fields as in [`ProcessSpec::new`]).
    pub fn spec(&self, program: &str, args: &[&str], cwd: &Path) -> ProcessSpec {
        let mut spec = ProcessSpec::new(program, cwd);
        spec.args = args.iter().map(std::string::ToString::to_string).collect();
        spec.env = self.env.clone();
        spec.isolation = self.isolation.clone();
        spec.confinement = self.sandbox.as_ref().map(|s| s.confine(Some(cwd)));
        spec
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The leader exited by itself.
    Exited(ExitStatus),
    /// The timeout fired first.
    TimedOut,
    /// The cancellation token fired first.
    Cancelled,
}

/// One output stream: the bytes kept and how many there were.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Captured {
    /// The first bytes, up to the cap.
    pub bytes: Vec<u8>,
    /// Every byte read.
    pub total: u64,
}

impl Captured {
    /// Whether bytes were left out.
    pub fn capped(&self) -> bool {
        self.total > self.bytes.len() as u64
    }
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct Output {
    /// How it ended.
    pub end: End,
    /// Its stdout.
    pub stdout: Captured,
    /// Its stderr.
    pub stderr: Captured,
}

/// A command that could not be run.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// It could not be started.
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// The sandbox could not confine it and its mode runs nothing unconfined.
    #[error("{program}: {source}")]
    Unconfined {
        /// The program.
        program: String,
        /// Why.
        source: Unconfinable,
    },
    /// Waiting for it failed.
    #[error("waiting for {program} failed: {source}")]
    Wait {
        /// The program.
        program: String,
        /// Why.
        source: std::io::Error,
    },
}
