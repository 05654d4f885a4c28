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
        let cap = self.max_output_bytes;
        // Readers run on their own so that the leader's exit is seen even while something it left
        // behind still holds the pipes.
        let out_task = child
            .stdout
            .take()
            .map(|s| tokio::spawn(read_capped(s, cap)));
        let err_task = child
            .stderr
            .take()
            .map(|s| tokio::spawn(read_capped(s, cap)));
        let status = tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => None,
            s = child.wait() => Some(s),
        };
        // Leader gone (or interrupted): nothing it started may live on; this also closes the pipes.
        guard.kill();
        let Some(status) = status else {
            let _ = child.wait().await;
            for t in [out_task, err_task].into_iter().flatten() {
                t.abort();
            }
            return Err(ToolError::Interrupted);
        };
        let collect = |t: Option<tokio::task::JoinHandle<(Vec<u8>, usize)>>| async move {
            match t {
                Some(t) => t.await.unwrap_or_default(),
                None => (Vec::new(), 0),
            }
        };
        let out = collect(out_task).await;
        let err = collect(err_task).await;
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::firewall::ExecutionFirewall;
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    use tokio_util::sync::CancellationToken;

    fn ctx(dir: &std::path::Path) -> ToolContext {
        ToolContext {
            project_path: dir.to_path_buf(),
            session_id: elfgate_core::SessionId::new(),
            cancel: CancellationToken::new(),
            firewall: Arc::new(ExecutionFirewall::new(vec![], &[]).unwrap()),
            store: None,
        }
    }

    #[tokio::test]
    async fn reports_exit_code_output_and_caps_it() {
        let dir = tempfile::tempdir().unwrap();
        let sh = Shell {
            max_output_bytes: 10,
        };
        let out = sh
            .execute(
                json!({"command": "printf 0123456789abcdef; echo oops >&2; exit 3"}),
                &ctx(dir.path()),
            )
            .await
            .unwrap();
        assert!(out.is_error);
        assert!(out.content.starts_with("exit code: 3\n"), "{}", out.content);
        assert!(
            out.content
                .contains("0123456789\n[... stdout capped: 10 of 16 bytes shown ...]")
        );
        assert!(out.content.contains("oops"));
    }

    #[tokio::test]
    async fn leftover_background_processes_do_not_hold_the_call() {
        let dir = tempfile::tempdir().unwrap();
        let t0 = Instant::now();
        let out = Shell::default()
            .execute(
                json!({"command": "sleep 600 & echo $! > bg.pid; echo done"}),
                &ctx(dir.path()),
            )
            .await
            .unwrap();
        assert!(t0.elapsed() < Duration::from_secs(30));
        assert!(out.content.contains("exit code: 0"));
        assert!(out.content.contains("done"));
        let pid: i32 = std::fs::read_to_string(dir.path().join("bg.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Killed with its group: gone or a zombie waiting for its reaper. SIGKILL is delivered
        // asynchronously, so give the kernel a bounded moment on a loaded machine.
        let state_of = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| s.rsplit_once(") ").and_then(|(_, r)| r.chars().next()))
        };
        let mut state = state_of();
        for _ in 0..500 {
            if matches!(state, None | Some('Z') | Some('X')) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
            state = state_of();
        }
        assert!(matches!(state, None | Some('Z') | Some('X')), "{state:?}");
    }

    #[tokio::test]
    async fn cancel_kills_the_group() {
        let dir = tempfile::tempdir().unwrap();
        let c = ctx(dir.path());
        let cancel = c.cancel.clone();
        let marker = dir.path().join("started");
        let task = tokio::spawn(async move {
            Shell::default()
                .execute(json!({"command": "touch started; sleep 600"}), &c)
                .await
        });
        while !marker.exists() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        cancel.cancel();
        let r = tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(r, Err(ToolError::Interrupted)));
    }
}
