//! A running process group and its shutdown.

use super::{ProcessError, ProcessSpec, orphans};
use crate::sandbox::{CallTmp, Launch, status_inside};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};

/// A child started in a process group of its own (its pid is the group id). Stopping it, or
/// dropping it while it runs, ends the whole group and reaps the leader.
#[derive(Debug)]
pub struct ProcessGroup {
    /// None once reaped.
    child: Option<Child>,
    pid: i32,
    grace: Duration,
    program: String,
    /// A Landlock-confined process's private temporary directory, removed with the group.
    _tmp: Option<CallTmp>,
    /// Started through bwrap: its leader is bwrap, whose exit status stands for the child's
    /// (see [`status_inside`]). A Landlock-restricted program is its own leader.
    confined: bool,
}

impl ProcessGroup {
    /// Starts `spec` (its stdin piped when it has bytes for it, stdout and stderr piped). The
    /// caller feeds and reads the pipes; [`super::run`] does it all.
    pub fn spawn(spec: &ProcessSpec) -> Result<ProcessGroup, ProcessError> {
        let CommandLine {
            program,
            args,
            tmp,
            confined,
        } = command_line(spec)?;
        let mut cmd = tokio::process::Command::new(&program);
        cmd.args(&args)
            .current_dir(&spec.cwd)
            .env_clear()
            .envs(spec.env.iter())
            .process_group(0)
            .stdin(if spec.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Only if it is dropped outside a runtime (see Drop): then tokio reaps it.
            .kill_on_drop(true);
        let (child, pid) =
            orphans::spawn_registered(&mut cmd).map_err(|source| ProcessError::Spawn {
                program: spec.program.clone(),
                source,
            })?;
        Ok(ProcessGroup {
            child: Some(child),
            pid,
            grace: spec.grace,
            program: spec.program.clone(),
            _tmp: tmp,
            confined,
        })
    }

    /// The leader's pid (bwrap's when the child is confined), which is also the group id.
    pub fn id(&self) -> i32 {
        self.pid
    }

    /// Its stdin, once.
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.child.as_mut()?.stdin.take()
    }

    /// Its stdout, once.
    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.child.as_mut()?.stdout.take()
    }

    /// Its stderr, once.
    pub fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.child.as_mut()?.stderr.take()
    }

    /// Sends SIGINT to the whole group: how a command-line program is asked to stop what it is
    /// doing, as Ctrl-C would. Returns false when nobody is left to get it.
    pub fn interrupt(&self) -> bool {
        self.child.is_some() && killpg(Pid::from_raw(self.pid), Signal::SIGINT).is_ok()
    }

    /// Waits for the leader to exit (the rest of the group may live on until [`Self::stop`]).
    pub async fn wait(&mut self) -> Result<ExitStatus, ProcessError> {
        let wait = match self.child.as_mut() {
            Some(c) => c.wait().await,
            None => Err(std::io::Error::other("already stopped")),
        };
        wait.map(|s| self.as_run(s))
            .map_err(|source| ProcessError::Wait {
                program: self.program.clone(),
                source,
            })
    }

    /// The status of the program as it would be unconfined: a confined child killed by a signal
    /// is reported as killed by it, not as bwrap's exit 128+N.
    fn as_run(&self, status: ExitStatus) -> ExitStatus {
        if self.confined {
            status_inside(status)
        } else {
            status
        }
    }

    /// Ends the group and reaps the leader, then sweeps what the group left behind. `polite`:
    /// SIGTERM first and up to the grace for the leader to exit; either way the group then gets
    /// SIGKILL, so background jobs of a leader that already exited do not survive it. Returns the
    /// leader's status (None if it was stopped before).
    pub async fn stop(&mut self, polite: bool) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        let status = shutdown(child, self.pid, polite, self.grace)
            .await
            .map(|s| self.as_run(s));
        // Reaped: from here on the drop has nothing left to do.
        self.child = None;
        orphans::forget(self.pid);
        orphans::sweep().await;
        status
    }
}

/// What runs `spec`: through the sandbox when it is confined (bwrap is then the group's leader
/// and gives it a network namespace itself: the flag says so; the Landlock launcher runs inside
/// the network namespace's wrapper and becomes the program), else through the network
/// namespace's wrapper.
fn command_line(spec: &ProcessSpec) -> Result<CommandLine, ProcessError> {
    if let Some(c) = &spec.confinement {
        // A program that is not there fails as it does unconfined, not as bwrap's exec error.
        if !spec.env.finds(&spec.program, &spec.cwd) {
            return Err(ProcessError::Spawn {
                program: spec.program.clone(),
                source: std::io::Error::from_raw_os_error(libc::ENOENT),
            });
        }
        let launch = c
            .launch(
                &spec.program,
                &spec.args,
                &spec.cwd,
                spec.isolation.is_some(),
            )
            .map_err(|source| ProcessError::Unconfined {
                program: spec.program.clone(),
                source,
            })?;
        match launch {
            Launch::Confined { program, args } => {
                return Ok(CommandLine {
                    program,
                    args,
                    tmp: None,
                    confined: true,
                });
            }
            Launch::Restricted { program, args, tmp } => {
                let (program, args) = networked(spec, program, args);
                return Ok(CommandLine {
                    program,
                    args,
                    tmp: Some(tmp),
                    confined: false,
                });
            }
            Launch::Unconfined => {}
        }
    }
    let (program, args) = networked(spec, spec.program.clone(), spec.args.clone());
    Ok(CommandLine {
        program,
        args,
        tmp: None,
        confined: false,
    })
}

/// What [`command_line`] starts, and what the group keeps of how.
struct CommandLine {
    program: String,
    args: Vec<String>,
    /// A Landlock-restricted program's private temporary directory.
    tmp: Option<CallTmp>,
    /// Started through bwrap (see [`ProcessGroup`]'s field of the same name).
    confined: bool,
}

/// `program args` in the network `spec` asks for.
fn networked(spec: &ProcessSpec, program: String, args: Vec<String>) -> (String, Vec<String>) {
    match &spec.isolation {
        Some(iso) => iso.wrap(&program, &args),
        None => (program, args),
    }
}

async fn shutdown(
    child: &mut Child,
    pid: i32,
    polite: bool,
    grace: Duration,
) -> Option<ExitStatus> {
    let group = Pid::from_raw(pid);
    if polite {
        // ESRCH (nobody left) is fine, here and below.
        let _ = killpg(group, Signal::SIGTERM);
        let _ = tokio::time::timeout(grace, child.wait()).await;
    }
    let _ = killpg(group, Signal::SIGKILL);
    child.wait().await.ok()
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let (pid, grace) = (self.pid, self.grace);
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    shutdown(&mut child, pid, true, grace).await;
                    orphans::forget(pid);
                    orphans::sweep().await;
                });
            }
            Err(_) => {
                // No runtime to wait in: kill now and leave the reaping to tokio (the pid stays
                // registered, its status is tokio's).
                let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }
}
