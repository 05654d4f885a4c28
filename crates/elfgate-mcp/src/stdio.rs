//! A stdio server's process: started by the project's process helper (its own process group, the
//! clean child environment plus the server's `env`), stopped by closing its stdin, a grace, then
//! SIGTERM and SIGKILL to the whole group.

use crate::unavailable::Down;
use elfgate_core::McpServerConfig;
use elfgate_core::sync::lock;
use elfgate_tools::process::{ChildSetup, GroupNote, ProcessGroup};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::process::{ChildStdin, ChildStdout};

/// How much of a server's stderr is kept to explain why it failed.
const STDERR_TAIL: usize = 2048;

/// How long a server gets to exit by itself once its stdin is closed, and again after SIGTERM.
pub(crate) const GRACE: Duration = Duration::from_secs(2);

/// A running stdio server.
pub(crate) struct StdioProcess {
    group: ProcessGroup,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// Removed once the group is stopped: a daemon killed before that leaves the note, and the
    /// next one ends the group.
    _note: Option<GroupNote>,
}

impl StdioProcess {
    /// Starts `cfg.command`; returns it with the pipes the transport speaks through.
    pub(crate) fn spawn(
        cfg: &McpServerConfig,
        child: &ChildSetup,
        notes: Option<&Path>,
    ) -> Result<(StdioProcess, ChildStdout, ChildStdin), Down> {
        let program = cfg.command.clone().unwrap_or_default();
        let cwd = match &cfg.cwd {
            Some(c) => PathBuf::from(c),
            None => std::env::current_dir().map_err(|e| Down::NoWorkingDirectory(e.to_string()))?,
        };
        let mut spec = child.spec(&program, &[], &cwd);
        spec.args = cfg.args.clone();
        spec.env = child.env.with(&cfg.env);
        // Confined, it writes only in the directory it was configured to work in (its command's
        // installation is readable, as the whole file system is).
        if let Some(c) = &mut spec.confinement {
            if cfg.cwd.is_none() {
                c.project = None;
            }
            // Its program and the files its arguments name stay readable even under the
            // private /tmp.
            c.readable = std::iter::once(&program)
                .chain(cfg.args.iter())
                .map(|a| cwd.join(a))
                .filter(|p| p.is_file())
                .collect();
        }
        // Piped stdin: the helper pipes it when there is input to give.
        spec.stdin = Some(Vec::new());
        spec.grace = GRACE;
        let mut group = ProcessGroup::spawn(&spec).map_err(|e| Down::Spawn(e.to_string()))?;
        let note = notes.and_then(|dir| GroupNote::new(dir, group.id()));
        let (Some(stdin), Some(stdout)) = (group.take_stdin(), group.take_stdout()) else {
            return Err(Down::NoPipes);
        };
        let stderr = Arc::new(Mutex::new(Vec::new()));
        if let Some(mut pipe) = group.take_stderr() {
            let tail = stderr.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    let mut t = lock(&tail);
                    t.extend_from_slice(&buf[..n]);
                    let extra = t.len().saturating_sub(STDERR_TAIL);
                    t.drain(..extra);
                }
            });
        }
        Ok((
            StdioProcess {
                group,
                stderr,
                _note: note,
            },
            stdout,
            stdin,
        ))
    }

    /// The process (group) id.
    pub(crate) fn pid(&self) -> i32 {
        self.group.id()
    }

    /// The end of what it wrote on stderr, for error messages.
    pub(crate) fn stderr_tail(&self) -> String {
        let t = lock(&self.stderr);
        String::from_utf8_lossy(&t).trim().to_string()
    }

    /// Stops it: its stdin is already closed (the transport is gone); a grace for it to exit,
    /// then SIGTERM, a grace, SIGKILL to the group.
    pub(crate) async fn stop(mut self) {
        let _ = tokio::time::timeout(GRACE, self.group.wait()).await;
        self.group.stop(true).await;
    }
}
