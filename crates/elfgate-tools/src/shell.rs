//! shell: runs a command with bash in the project through [`crate::process`]: its own process
//! group (ended whole on interrupt, timeout, drop, and when the leader exits), the session's
//! clean environment and, by default, a network namespace of its own.

use crate::process::{Captured, End, run};
use crate::project_changes::Listing;
use crate::terminal::signal_name;
use crate::tool::{
    BuiltinTool, FirewallTargets, PermissionTier, ToolContext, ToolDecl, ToolError, ToolKind,
    ToolOutput,
};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

/// shell: `bash -c COMMAND` in the project directory.
#[derive(Debug, Clone)]
pub struct Shell {
    /// Most bytes of stdout and of stderr kept (each).
    pub max_output_bytes: usize,
    /// Most files the result names as created, changed or deleted by the command.
    pub max_listed_changes: usize,
}

impl Default for Shell {
    fn default() -> Self {
        Shell {
            max_output_bytes: 100_000,
            max_listed_changes: 50,
        }
    }
}

/// The tool's arguments (their JSON schema is the tool's; this comment is not in it).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShellArgs {
    /// The bash command line
    command: String,
}

fn section(name: &str, c: &Captured) -> String {
    let mut s = String::from_utf8_lossy(&c.bytes).into_owned();
    if c.capped() {
        s.push_str(&format!(
            "\n[... {name} capped: {} of {} bytes shown ...]",
            c.bytes.len(),
            c.total
        ));
    }
    s
}

#[async_trait]
impl BuiltinTool for Shell {
    type Args = ShellArgs;
    const DECL: ToolDecl = ToolDecl {
        name: "shell",
        description: "Run a shell command with bash in the project directory. Returns the exit code, stdout and stderr (capped).",
        tier: PermissionTier::AlwaysConfirm,
        kind: ToolKind::Execute,
        works_in_project: true,
    };
    fn targets(&self, input: &Value) -> FirewallTargets {
        FirewallTargets {
            paths: Vec::new(),
            command: input
                .get("command")
                .and_then(Value::as_str)
                .map(str::to_string),
        }
    }
    async fn run(&self, a: ShellArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        ctx.firewall.check_command(&a.command)?;
        let cwd = ctx.resolve(".")?;
        let mut spec = ctx.child.spec("bash", &["-c", &a.command], &cwd);
        spec.stdout_cap = self.max_output_bytes;
        spec.stderr_cap = self.max_output_bytes;
        // What it does to the project is listed (walked off the runtime's threads).
        let project = ctx.project_path.clone();
        let listing = move || Listing::take(&project);
        let before = tokio::task::spawn_blocking(listing.clone()).await.ok();
        // No timeout of its own: the pipeline's tool timeout fires ctx.cancel.
        let out = run(&spec, &ctx.cancel).await?;
        let after = tokio::task::spawn_blocking(listing).await.ok();
        let status = match out.end {
            End::Exited(s) => s,
            End::Cancelled | End::TimedOut => return Err(ToolError::Interrupted),
        };
        use std::os::unix::process::ExitStatusExt;
        let code = status.code();
        let mut text = match (code, status.signal()) {
            (Some(c), _) => format!("exit code: {c}\n"),
            (None, Some(n)) => format!("exit code: none (killed by {})\n", signal_name(n)),
            (None, None) => "exit code: none (killed by a signal)\n".to_string(),
        };
        text.push_str("--- stdout ---\n");
        text.push_str(&section("stdout", &out.stdout));
        text.push_str("\n--- stderr ---\n");
        text.push_str(&section("stderr", &out.stderr));
        if let (Some(before), Some(after)) = (before, after) {
            let changes = before.changes(&after, self.max_listed_changes);
            if !changes.is_empty() {
                text.push_str("\n--- files created, changed or deleted in the project ---\n");
                text.push_str(&changes.join("\n"));
            }
        }
        Ok(ToolOutput {
            content: text,
            is_error: code != Some(0),
            yield_run: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::firewall::ExecutionFirewall;
    use crate::tool::Tool as _;
    use serde_json::json;
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    use tokio_util::sync::CancellationToken;

    /// A safety net for waits on a condition; never expected to run out.
    const GUARD: Duration = Duration::from_secs(30);

    fn ctx(dir: &std::path::Path) -> ToolContext {
        ToolContext {
            project_path: dir.to_path_buf(),
            session_id: elfgate_core::SessionId::new(),
            cancel: CancellationToken::new(),
            firewall: Arc::new(ExecutionFirewall::new(vec![], &[]).unwrap()),
            store: None,
            child: crate::process::ChildSetup::default(),
        }
    }

    #[tokio::test]
    async fn reports_exit_code_output_and_caps_it() {
        let dir = tempfile::tempdir().unwrap();
        let sh = Shell {
            max_output_bytes: 10,
            ..Shell::default()
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
        assert!(t0.elapsed() < GUARD);
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
        let t1 = Instant::now();
        while !matches!(state, None | Some('Z' | 'X')) && t1.elapsed() < GUARD {
            tokio::time::sleep(Duration::from_millis(10)).await;
            state = state_of();
        }
        assert!(matches!(state, None | Some('Z' | 'X')), "{state:?}");
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
        let t0 = Instant::now();
        while !marker.exists() {
            assert!(t0.elapsed() < GUARD, "the command never started");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        cancel.cancel();
        let r = tokio::time::timeout(GUARD, task).await.unwrap().unwrap();
        assert!(matches!(r, Err(ToolError::Interrupted)));
    }
}
