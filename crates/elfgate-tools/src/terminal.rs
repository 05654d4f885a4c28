//! Terminals: commands an agent outside the agent loop starts and then watches (an ACP agent's
//! `terminal/*` requests, served by the cli engine). A terminal runs in a process group of its own
//! through [`crate::process`], with the same environment and network as the shell tool's
//! commands; its stdout and stderr are read together into one buffer that keeps the latest bytes
//! up to a limit, readable while it runs; it can be waited for, killed (its group, at once) and
//! dropped (which kills it too).
//!
//! [`ShellRules`] are the checks a command passes before it starts, the same gates as the shell
//! tool's calls ([`crate::gate`]): the PreToolUse hooks (as tool `shell`), then the firewall's
//! command rules and a working directory inside the project and out of the deny zones.

use crate::firewall::ExecutionFirewall;
use crate::gate::{self, Refusal};
use crate::hooks::{HookEvent, Hooks};
use crate::process::{ChildEnv, ChildSetup, Isolation, Network, ProcessError, ProcessGroup};
use crate::process::{DEFAULT_GRACE, ProcessSpec};
use crate::sandbox::Sandbox;
use crate::tool::FirewallTargets;
use elfgate_core::Gate;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How a terminal's command ended: its exit code, or the signal that ended it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TerminalExit {
    /// The exit code, when it exited by itself.
    pub code: Option<i32>,
    /// The signal's number, when one ended it.
    pub signal: Option<i32>,
}

impl TerminalExit {
    fn of(status: ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt;
        TerminalExit {
            code: status.code(),
            signal: status.signal(),
        }
    }

    /// The signal's name (`SIGKILL`), when one ended it.
    pub fn signal_name(&self) -> Option<String> {
        self.signal.map(signal_name)
    }
}

/// The name of signal `n` (`SIGKILL`), or `signal N` for a number without one.
pub fn signal_name(n: i32) -> String {
    nix::sys::signal::Signal::try_from(n)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("signal {n}"))
}

/// What a terminal has printed so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TerminalOutput {
    /// Its latest output (stdout and stderr as they came), at most the limit's bytes, starting
    /// at a character boundary.
    pub text: String,
    /// Whether earlier output was dropped to keep within the limit.
    pub truncated: bool,
    /// How it ended, once it has.
    pub exit: Option<TerminalExit>,
}

#[derive(Debug, Default)]
struct Buffer {
    bytes: Vec<u8>,
    truncated: bool,
}

impl Buffer {
    fn push(&mut self, chunk: &[u8], limit: usize) {
        self.bytes.extend_from_slice(chunk);
        if self.bytes.len() > limit {
            let cut = self.bytes.len() - limit;
            self.bytes.drain(..cut);
            self.truncated = true;
        }
    }

    fn text(&self) -> String {
        // Dropped bytes may have cut a character: start at the next one.
        let start = if self.truncated {
            self.bytes
                .iter()
                .position(|b| b & 0xC0 != 0x80)
                .unwrap_or(self.bytes.len())
        } else {
            0
        };
        String::from_utf8_lossy(&self.bytes[start..]).into_owned()
    }
}

/// A command running (or run) in a process group of its own.
#[derive(Debug)]
pub struct Terminal {
    output: Arc<Mutex<Buffer>>,
    exit: watch::Receiver<Option<TerminalExit>>,
    kill: CancellationToken,
}

impl Terminal {
    /// Starts `spec` (its stdin closed; its own stdout and stderr caps are not used) keeping the
    /// last `limit` bytes of its output. `kill` ends it whenever it fires (a child of the run's
    /// cancellation, say); dropping the terminal fires it too.
    pub fn start(
        spec: &ProcessSpec,
        limit: usize,
        kill: CancellationToken,
    ) -> Result<Terminal, ProcessError> {
        let mut group = ProcessGroup::spawn(spec)?;
        let output = Arc::new(Mutex::new(Buffer::default()));
        let (tx, exit) = watch::channel(None);
        let limit = limit.max(1);
        let readers: Vec<_> = [
            group
                .take_stdout()
                .map(|r| Box::new(r) as Box<dyn AsyncRead + Send + Unpin>),
            group
                .take_stderr()
                .map(|r| Box::new(r) as Box<dyn AsyncRead + Send + Unpin>),
        ]
        .into_iter()
        .flatten()
        .map(|r| tokio::spawn(read_into(r, output.clone(), limit)))
        .collect();
        let killed = kill.clone();
        tokio::spawn(async move {
            let status = tokio::select! {
                biased;
                _ = killed.cancelled() => group.stop(false).await,
                s = group.wait() => {
                    // What the leader left running in its group goes with it.
                    group.stop(false).await;
                    s.ok()
                }
            };
            // Output still held open by a process allowed to live on is not waited for.
            let all = futures_util::future::join_all(readers);
            let _ = tokio::time::timeout(DEFAULT_GRACE, all).await;
            let exit = status.map(TerminalExit::of).unwrap_or(TerminalExit {
                code: None,
                signal: Some(nix::sys::signal::Signal::SIGKILL as i32),
            });
            let _ = tx.send(Some(exit));
        });
        Ok(Terminal { output, exit, kill })
    }

    /// Its output so far and, once it has ended, how.
    pub fn output(&self) -> TerminalOutput {
        let exit = *self.exit.borrow();
        let (text, truncated) = match self.output.lock() {
            Ok(b) => (b.text(), b.truncated),
            Err(_) => (String::new(), false),
        };
        TerminalOutput {
            text,
            truncated,
            exit,
        }
    }

    /// Waits until it has ended (at once when it has).
    pub fn wait(&self) -> impl std::future::Future<Output = TerminalExit> + Send + 'static {
        let mut exit = self.exit.clone();
        async move {
            match exit.wait_for(Option::is_some).await {
                Ok(e) => e.unwrap_or(TerminalExit {
                    code: None,
                    signal: None,
                }),
                // The task that owns the process is gone: it was killed with the runtime.
                Err(_) => TerminalExit {
                    code: None,
                    signal: Some(nix::sys::signal::Signal::SIGKILL as i32),
                },
            }
        }
    }

    /// Kills its whole group (when it still runs); its output stays readable.
    pub fn kill(&self) {
        self.kill.cancel();
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        self.kill.cancel();
    }
}

async fn read_into(
    mut r: Box<dyn AsyncRead + Send + Unpin>,
    output: Arc<Mutex<Buffer>>,
    limit: usize,
) {
    let mut buf = [0u8; 8192];
    while let Ok(n) = r.read(&mut buf).await {
        if n == 0 {
            break;
        }
        if let Ok(mut b) = output.lock() {
            b.push(&buf[..n], limit);
        }
    }
}

/// The rules commands run outside the agent loop follow: the shell tool's.
#[derive(Debug, Clone)]
pub struct ShellRules {
    /// The tools' firewall.
    pub firewall: Arc<ExecutionFirewall>,
    /// The operator's hooks.
    pub hooks: Arc<Hooks>,
    /// The daemon's environment for commands, before a session's shellEnv.
    pub env: ChildEnv,
    /// The daemon's default network for commands.
    pub network: Network,
    /// The private network, where this host has one.
    pub isolation: Option<Isolation>,
    /// The sandbox commands run in; None: unconfined.
    pub sandbox: Option<Arc<Sandbox>>,
    /// Most bytes of a command's output kept (the shell tool's cap).
    pub max_output_bytes: usize,
}

/// A command line to run, as an agent asked for it.
#[derive(Debug, Clone)]
pub struct CommandRequest<'a> {
    /// The program, or a whole command line when `args` is empty.
    pub command: &'a str,
    /// Its arguments.
    pub args: &'a [String],
    /// Variables added to its environment.
    pub env: &'a BTreeMap<String, String>,
    /// Its directory, relative to the project or absolute inside it; None: the project.
    pub cwd: Option<&'a str>,
}

impl CommandRequest<'_> {
    /// The command as one line, as the firewall and the hooks see it.
    pub fn line(&self) -> String {
        if self.args.is_empty() {
            return self.command.to_string();
        }
        let mut parts = vec![shell_quote(self.command)];
        parts.extend(self.args.iter().map(|a| shell_quote(a)));
        parts.join(" ")
    }
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

impl ShellRules {
    /// The environment and network of a session's commands: its shellEnv over the daemon's
    /// variables, its shellNetwork or the daemon's.
    pub fn child_for(
        &self,
        shell_env: Option<&BTreeMap<String, String>>,
        network: Option<Network>,
    ) -> ChildSetup {
        ChildSetup {
            env: match shell_env {
                Some(vars) => self.env.with(vars),
                None => self.env.clone(),
            },
            isolation: match network.unwrap_or(self.network) {
                Network::Isolated => self.isolation.clone(),
                Network::Host => None,
            },
            sandbox: self.sandbox.clone(),
        }
    }

    /// Checks `req` in `project` through the tool gate's order (the PreToolUse hooks with
    /// `hook_payload` and the command line as the shell tool's input, then the firewall on the
    /// command and its directory) and makes what runs it: a command line through `bash -c`, a
    /// program with arguments as it is. Err: the gate that refused it.
    pub async fn prepare(
        &self,
        project: &Path,
        req: &CommandRequest<'_>,
        child: &ChildSetup,
        hook_payload: impl FnOnce(&str) -> Value,
    ) -> Result<ProcessSpec, Refusal> {
        let line = req.line();
        if self.hooks.has(HookEvent::PreToolUse) {
            gate::pre_tool_use(&self.hooks, "shell", &hook_payload(&line), project).await?;
        }
        let targets = FirewallTargets {
            paths: Vec::new(),
            command: Some(line),
        };
        gate::firewall(&self.firewall, project, &targets)?;
        // The directory's check is the firewall's too; its resolved path is where it runs.
        let cwd: PathBuf = self
            .firewall
            .resolve_path(project, req.cwd.unwrap_or("."))
            .map_err(|e| Refusal::new(Gate::Firewall, format!("blocked by the firewall: {e}")))?;
        if !cwd.is_dir() {
            return Err(Refusal::new(
                Gate::Firewall,
                format!("cwd: {} is not a directory", cwd.display()),
            ));
        }
        let mut spec = if req.args.is_empty() {
            child.spec("bash", &["-c", req.command], &cwd)
        } else {
            let mut spec = child.spec(req.command, &[], &cwd);
            spec.args = req.args.to_vec();
            spec
        };
        spec.env = spec.env.with(req.env);
        // Its directory may be inside the project: the whole project is its to write.
        if let Some(c) = &mut spec.confinement {
            c.project = Some(project.to_path_buf());
        }
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A safety net for waits on a condition; never expected to run out.
    const GUARD: Duration = Duration::from_secs(30);

    fn spec(dir: &Path, line: &str) -> ProcessSpec {
        ChildSetup::default().spec("bash", &["-c", line], dir)
    }

    #[tokio::test]
    async fn output_is_read_while_it_runs_and_keeps_the_latest_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let t = Terminal::start(
            &spec(dir.path(), "printf 'héllo wörld'; echo oops >&2; exit 3"),
            100,
            CancellationToken::new(),
        )
        .unwrap();
        let exit = tokio::time::timeout(GUARD, t.wait()).await.unwrap();
        assert_eq!(exit.code, Some(3));
        let out = t.output();
        assert!(out.text.contains("héllo wörld"), "{out:?}");
        assert!(out.text.contains("oops"), "{out:?}");
        assert!(!out.truncated);
        assert_eq!(out.exit, Some(exit));

        // A limit that cuts into a character starts at the next one.
        let t = Terminal::start(
            &spec(dir.path(), "printf 'aé1234'"),
            5,
            CancellationToken::new(),
        )
        .unwrap();
        tokio::time::timeout(GUARD, t.wait()).await.unwrap();
        let out = t.output();
        assert!(out.truncated);
        assert_eq!(out.text, "1234");
    }

    #[tokio::test]
    async fn a_kill_ends_the_group_and_says_by_which_signal() {
        let dir = tempfile::tempdir().unwrap();
        let kill = CancellationToken::new();
        let t = Terminal::start(
            &spec(dir.path(), "echo started; sleep 600 & sleep 600"),
            1000,
            kill.child_token(),
        )
        .unwrap();
        let t0 = std::time::Instant::now();
        while !t.output().text.contains("started") {
            assert!(t0.elapsed() < GUARD, "never started");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(t.output().exit, None);
        kill.cancel();
        let exit = tokio::time::timeout(GUARD, t.wait()).await.unwrap();
        assert_eq!(exit.code, None);
        assert_eq!(exit.signal_name().as_deref(), Some("SIGKILL"));
    }

    #[test]
    fn a_program_with_arguments_is_one_quoted_line() {
        let args = vec!["-la".to_string(), "my dir".to_string(), "it's".to_string()];
        let env = BTreeMap::new();
        let req = CommandRequest {
            command: "ls",
            args: &args,
            env: &env,
            cwd: None,
        };
        assert_eq!(req.line(), r"ls -la 'my dir' 'it'\''s'");
    }
}
