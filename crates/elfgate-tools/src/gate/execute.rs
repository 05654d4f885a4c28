//! The gates from a permitted call on: execute with the tool's timeout, read how it ended, and
//! the PostToolUse hooks.

use super::Refusal;
use crate::hooks::{HookEvent, Hooks};
use crate::tool::{Tool, ToolContext, ToolError, ToolOutput};
use elfgate_core::{Gate, ToolCallStatus};
use futures_util::future::BoxFuture;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// How long a tool gets to clean up after its timeout fired.
pub const CLEANUP_GRACE: Duration = Duration::from_secs(5);

/// Text of the synthetic result of an interrupted call.
pub const INTERRUPTED_RESULT: &str =
    "[interrupted: the user stopped the run before this tool call finished]";

/// How a tool's execution ended.
#[derive(Debug)]
pub enum Executed {
    /// It returned.
    Finished(Result<ToolOutput, ToolError>),
    /// It ran past its timeout and was stopped (`ctx.cancel` fired, then [`CLEANUP_GRACE`]).
    TimedOut,
}

/// Runs `tool` on `input` for at most `timeout`; past it, `ctx.cancel` fires and the tool gets
/// [`CLEANUP_GRACE`] to stop.
pub async fn execute(
    tool: &dyn Tool,
    input: Value,
    ctx: &ToolContext,
    timeout: Duration,
) -> Executed {
    let mut exec: BoxFuture<'_, Result<ToolOutput, ToolError>> = Box::pin(tool.execute(input, ctx));
    tokio::select! {
        r = &mut exec => Executed::Finished(r),
        _ = tokio::time::sleep(timeout) => {
            ctx.cancel.cancel();
            // What it answers while it stops does not matter: the call timed out.
            let _ = tokio::time::timeout(CLEANUP_GRACE, &mut exec).await;
            Executed::TimedOut
        }
    }
}

/// A call's end as the agent reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    /// The result's text.
    pub content: String,
    /// How the call ended.
    pub status: ToolCallStatus,
    /// The tool asked the loop to stop.
    pub yield_run: bool,
    /// The firewall refused it inside the tool (a path swapped after the first check, a skill's
    /// file outside its folder): to audit as a refusal.
    pub refused: Option<Refusal>,
}

impl Ended {
    fn plain(content: String, status: ToolCallStatus) -> Self {
        Ended {
            content,
            status,
            yield_run: false,
            refused: None,
        }
    }

    /// The end of a call the run's interrupt cut short.
    pub fn interrupted() -> Self {
        Ended::plain(INTERRUPTED_RESULT.to_string(), ToolCallStatus::Interrupted)
    }

    /// Reads how tool `name` ended: `interrupted` (the run was) wins over a timeout (after
    /// `timeout`), which wins over what the tool answered; an input error names the `schema`.
    pub fn of(
        executed: Executed,
        interrupted: bool,
        name: &str,
        timeout: Duration,
        schema: impl FnOnce() -> Value,
    ) -> Self {
        if interrupted {
            return Ended::interrupted();
        }
        let result = match executed {
            Executed::TimedOut => {
                return Ended::plain(
                    format!(
                        "Error: {name} timed out after {:.1}s and was stopped",
                        timeout.as_secs_f64()
                    ),
                    ToolCallStatus::Timeout,
                );
            }
            Executed::Finished(r) => r,
        };
        match result {
            Ok(out) => Ended {
                content: out.content,
                status: if out.is_error {
                    ToolCallStatus::Error
                } else {
                    ToolCallStatus::Success
                },
                yield_run: out.yield_run,
                refused: None,
            },
            Err(ToolError::Firewall(e)) => {
                let refusal = Refusal::new(Gate::Firewall, format!("blocked by the firewall: {e}"));
                Ended {
                    content: format!("Tool call denied: {}", refusal.why),
                    status: ToolCallStatus::Denied,
                    yield_run: false,
                    refused: Some(refusal),
                }
            }
            Err(ToolError::InvalidInput(e)) => Ended::plain(
                format!(
                    "Error: invalid input for {name}: {e}. Expected: {}",
                    schema()
                ),
                ToolCallStatus::Error,
            ),
            Err(ToolError::Interrupted) => Ended::interrupted(),
            Err(e) => Ended::plain(format!("Error: {e}"), ToolCallStatus::Error),
        }
    }
}

/// Runs the PostToolUse hooks matching `tool` on the payload `payload` makes, in `cwd`, without
/// waiting for them (they cannot change what happened).
pub fn post_tool_use(
    hooks: &Arc<Hooks>,
    tool: &str,
    cwd: PathBuf,
    payload: impl FnOnce() -> Value,
) {
    if !hooks.has(HookEvent::PostToolUse) {
        return;
    }
    let payload = payload();
    let (hooks, tool) = (hooks.clone(), tool.to_string());
    tokio::spawn(
        async move {
            let _ = hooks
                .run(HookEvent::PostToolUse, Some(&tool), &payload, &cwd)
                .await;
        }
        .in_current_span(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::firewall::{ExecutionFirewall, FirewallError};
    use crate::hooks::HookConfig;
    use crate::process::ChildSetup;
    use crate::tool::{PermissionTier, ToolKind};
    use async_trait::async_trait;
    use serde_json::json;
    use tokio_util::sync::CancellationToken;

    /// A safety net for waits on a condition; never expected to run out.
    const GUARD: Duration = Duration::from_secs(30);

    /// Answers `{"echo": ...}` at once, or waits for its cancel when asked to hang.
    struct Echo;

    #[async_trait]
    impl Tool for Echo {
        fn name(&self) -> &str {
            "echo"
        }
        fn description(&self) -> &str {
            "echoes"
        }
        fn schema(&self) -> Value {
            json!({"type": "object"})
        }
        fn tier(&self) -> PermissionTier {
            PermissionTier::ReadOnly
        }
        fn kind(&self) -> ToolKind {
            ToolKind::Read
        }
        async fn execute(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
            if input["hang"] == true {
                ctx.cancel.cancelled().await;
                return Err(ToolError::Interrupted);
            }
            Ok(ToolOutput::ok(input["echo"].to_string()))
        }
    }

    fn ctx(dir: &std::path::Path) -> ToolContext {
        ToolContext {
            project_path: dir.to_path_buf(),
            session_id: elfgate_core::SessionId::new(),
            cancel: CancellationToken::new(),
            firewall: Arc::new(ExecutionFirewall::new(vec![], &[]).unwrap()),
            store: None,
            child: ChildSetup::default(),
        }
    }

    #[tokio::test]
    async fn a_tool_runs_or_is_stopped_at_its_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let c = ctx(dir.path());
        let done = execute(&Echo, json!({"echo": "hi"}), &c, GUARD).await;
        let ended = Ended::of(done, false, "echo", GUARD, || json!({}));
        assert_eq!(ended.status, ToolCallStatus::Success);
        assert_eq!(ended.content, "\"hi\"");
        // A tool past its timeout is cancelled and its call says so.
        let hung = execute(&Echo, json!({"hang": true}), &c, Duration::ZERO).await;
        assert!(matches!(hung, Executed::TimedOut), "{hung:?}");
        assert!(c.cancel.is_cancelled(), "the tool was told to stop");
        let ended = Ended::of(hung, false, "echo", Duration::from_secs(2), || json!({}));
        assert_eq!(ended.status, ToolCallStatus::Timeout);
        assert_eq!(
            ended.content,
            "Error: echo timed out after 2.0s and was stopped"
        );
    }

    #[test]
    fn an_end_is_read_as_the_agent_sees_it() {
        let of = |r, interrupted| {
            Ended::of(
                Executed::Finished(r),
                interrupted,
                "t",
                GUARD,
                || json!({"type": "object"}),
            )
        };
        assert_eq!(of(Ok(ToolOutput::ok("x")), true), Ended::interrupted());
        assert_eq!(of(Err(ToolError::Interrupted), false), Ended::interrupted());
        let fw = of(
            Err(ToolError::Firewall(FirewallError::DeniedCommand {
                pattern: "rm".into(),
            })),
            false,
        );
        assert_eq!(fw.status, ToolCallStatus::Denied);
        assert_eq!(fw.refused.as_ref().map(|r| r.gate), Some(Gate::Firewall));
        assert!(
            fw.content
                .starts_with("Tool call denied: blocked by the firewall")
        );
        let bad = of(Err(ToolError::InvalidInput("no path".into())), false);
        assert_eq!(bad.status, ToolCallStatus::Error);
        assert!(
            bad.content.contains("Expected: {\"type\":\"object\"}"),
            "{}",
            bad.content
        );
        let failed = of(Ok(ToolOutput::error("nope")), false);
        assert_eq!(
            (failed.status, failed.refused),
            (ToolCallStatus::Error, None)
        );
    }

    #[tokio::test]
    async fn post_tool_use_hooks_run_without_being_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let seen = dir.path().join("seen.json");
        let hooks = Arc::new(
            Hooks::new(
                vec![HookConfig {
                    event: HookEvent::PostToolUse,
                    command: format!("cat > {}.part && mv {0}.part {0}", seen.display()),
                    matcher: None,
                    timeout_secs: 10.0,
                }],
                ChildSetup::default(),
            )
            .unwrap(),
        );
        post_tool_use(
            &hooks,
            "echo",
            dir.path().to_path_buf(),
            || json!({"event": "PostToolUse", "toolName": "echo"}),
        );
        let t0 = std::time::Instant::now();
        while !seen.exists() {
            assert!(t0.elapsed() < GUARD, "the hook never ran");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let payload: Value =
            serde_json::from_str(&std::fs::read_to_string(&seen).unwrap()).unwrap();
        assert_eq!(payload["toolName"], "echo");
    }
}
