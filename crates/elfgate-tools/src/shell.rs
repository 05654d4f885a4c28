//! shell: runs a command with bash in the project, in its own process group; the whole group is
//! killed on interrupt or timeout (and whenever the call is dropped).

use crate::tool::{
    FirewallTargets, PermissionTier, Tool, ToolContext, ToolError, ToolKind, ToolOutput,
};
use async_trait::async_trait;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::Deserialize;
use serde_json::{Value, json};
use std::process::Stdio;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Kills a process group when dropped (unless disarmed).
#[derive(Debug)]
struct GroupGuard {
    pgid: Option<i32>,
}

impl GroupGuard {
    fn kill(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            // ESRCH (already gone) is fine.
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// shell: `bash -c COMMAND` in the project directory.
#[derive(Debug, Clone)]
pub struct Shell {
    /// Most bytes of stdout and of stderr kept (each).
    pub max_output_bytes: usize,
}

impl Default for Shell {
    fn default() -> Self {
        Shell {
            max_output_bytes: 100_000,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShellArgs {
    command: String,
}

/// Reads a pipe to its end, keeping at most `cap` bytes; returns the kept bytes and the total.
async fn read_capped(mut r: impl AsyncRead + Unpin, cap: usize) -> (Vec<u8>, usize) {
    let mut kept = Vec::new();
    let mut total = 0usize;
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                total += n;
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    (kept, total)
}

fn section(name: &str, (bytes, total): &(Vec<u8>, usize)) -> String {
    let mut s = String::from_utf8_lossy(bytes).into_owned();
    if *total > bytes.len() {
        s.push_str(&format!(
            "\n[... {name} capped: {} of {total} bytes shown ...]",
            bytes.len()
        ));
    }
    s
}

#[async_trait]
impl Tool for Shell {
    fn name(&self) -> &str {
        "shell"
    }
    fn description(&self) -> &str {
        "Run a shell command with bash in the project directory. Returns the exit code, stdout and stderr (capped)."
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "properties": {
            "command": {"type": "string", "description": "The bash command line"}
        }, "required": ["command"]})
    }
    fn tier(&self) -> PermissionTier {
        PermissionTier::AlwaysConfirm
    }
    fn kind(&self) -> ToolKind {
        ToolKind::Execute
    }
    fn firewall_targets(&self, input: &Value) -> FirewallTargets {
        FirewallTargets {
            paths: Vec::new(),
            command: input
                .get("command")
                .and_then(Value::as_str)
                .map(str::to_string),
        }
    }
    async fn execute(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let a: ShellArgs =
            serde_json::from_value(input).map_err(|e| ToolError::InvalidInput(e.to_string()))?;
        ctx.firewall.check_command(&a.command)?;
        let cwd = ctx.resolve(".")?;
        let mut child = tokio::process::Command::new("bash")
            .arg("-c")
            .arg(&a.command)
            .current_dir(&cwd)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let mut guard = GroupGuard {
            pgid: child.id().and_then(|p| i32::try_from(p).ok()),
        };
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let cap = self.max_output_bytes;
        let done = {
            let collect = async {
                let out = async {
                    match stdout {
                        Some(s) => read_capped(s, cap).await,
                        None => (Vec::new(), 0),
                    }
                };
                let err = async {
                    match stderr {
                        Some(s) => read_capped(s, cap).await,
                        None => (Vec::new(), 0),
                    }
                };
                let (o, e) = tokio::join!(out, err);
                let status = child.wait().await;
                (o, e, status)
            };
            tokio::pin!(collect);
            tokio::select! {
                biased;
                _ = ctx.cancel.cancelled() => None,
                r = &mut collect => Some(r),
            }
        };
        let Some((out, err, status)) = done else {
            guard.kill();
            let _ = child.wait().await;
            return Err(ToolError::Interrupted);
        };
        // The leader exited; make sure nothing it left in its group lives on.
        guard.kill();
        let status = status?;
        let code = status.code();
        let mut text = match code {
            Some(c) => format!("exit code: {c}\n"),
            None => "exit code: none (killed by a signal)\n".to_string(),
        };
        text.push_str("--- stdout ---\n");
        text.push_str(&section("stdout", &out));
        text.push_str("\n--- stderr ---\n");
        text.push_str(&section("stderr", &err));
        Ok(ToolOutput {
            content: text,
            is_error: code != Some(0),
            yield_run: false,
        })
    }
}
