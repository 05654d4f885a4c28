//! spawn: starts a sub-agent, a nested loop with its own tool set and a label, in the foreground
//! (its answer is the tool result) or in the background (its answer is drained into the parent).

use super::agent::{Agent, LoopEnd, Runner, run_loop};
use async_trait::async_trait;
use elfgate_core::{ContentBlock, EventPayload, FinishReason, Role};
use elfgate_llm::LlmMessage;
use elfgate_tools::schema::schema_of;
use elfgate_tools::{
    PermissionTier, Tool, ToolContext, ToolError, ToolKind, ToolOutput, parse_args,
};
use futures_util::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The tool's name.
pub(crate) const SPAWN: &str = "spawn";

/// The schema and tier of spawn; the engine runs it (it needs the loop).
pub(crate) struct SpawnTool;

#[async_trait]
impl Tool for SpawnTool {
    fn name(&self) -> &str {
        SPAWN
    }
    fn description(&self) -> &str {
        "Start a sub-agent on a self-contained task. background=false waits and returns its answer; \
background=true returns at once and its answer arrives later as a message. Sub-agents cannot spawn."
    }
    fn schema(&self) -> Value {
        schema_of::<SpawnArgs>()
    }
    fn tier(&self) -> PermissionTier {
        PermissionTier::ReadOnly
    }
    fn kind(&self) -> ToolKind {
        ToolKind::Agent
    }
    async fn execute(&self, _input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        Err(ToolError::Failed("spawn is run by the engine".into()))
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SpawnArgs {
    /// What the sub-agent must do
    task: String,
    /// A short name for it
    #[serde(default)]
    label: Option<String>,
    #[serde(default)]
    background: bool,
    /// Tool names it may use (default: yours, without spawn)
    #[serde(default)]
    tools: Option<Vec<String>>,
}

fn outcome_text(end: &LoopEnd) -> String {
    let mut t = end.text.clone();
    if t.is_empty() {
        t = "(no answer)".to_string();
    }
    match end.finish {
        FinishReason::Stop => t,
        other => format!("[sub-agent ended: {}] {t}", other.as_str()),
    }
}

/// Runs spawn for `parent`. The returned future is boxed so that the loop can recurse.
pub(crate) fn run(
    runner: Arc<Runner>,
    parent: Agent,
    input: Value,
    cancel: CancellationToken,
) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
    Box::pin(async move {
        let a: SpawnArgs = parse_args(input)?;
        if a.task.trim().is_empty() {
            return Err(ToolError::InvalidInput("task must not be empty".into()));
        }
        if !parent.is_top() {
            return Ok(ToolOutput::error("sub-agents cannot spawn sub-agents"));
        }
        if a.background && !runner.reserve_background() {
            return Ok(ToolOutput::error(format!(
                "background sub-agent limit reached: this run already started {} (engines.tinyelf.max_background_agents); \
wait for their results, or run this task in the foreground (background: false)",
                runner.inner.config.max_background_agents
            )));
        }
        let label = a
            .label
            .filter(|l| !l.trim().is_empty())
            .unwrap_or_else(|| "sub-agent".to_string());
        let tools = match &a.tools {
            Some(names) => parent.tools.only(names),
            None => parent.tools.clone(),
        }
        .without(&[SPAWN]);
        let run_id = uuid::Uuid::now_v7().to_string();
        let agent_cancel = if a.background {
            runner.bg_cancel.child_token()
        } else {
            cancel
        };
        let agent = Agent {
            label: Some(label.clone()),
            depth: parent.depth + 1,
            tools,
            cancel: agent_cancel,
            model: runner
                .rs
                .sub_agent_model
                .clone()
                .unwrap_or_else(|| runner.model.clone()),
            system: format!(
                "You are a sub-agent named \"{label}\" working for another agent in the project \
directory {}. Do the task with your tools and answer with the result only.",
                runner.project.display()
            ),
            max_iterations: runner.rs.sub_agent_max_iterations,
        };
        let messages = vec![LlmMessage {
            role: Role::User,
            blocks: vec![ContentBlock::text(a.task.clone())],
        }];
        runner
            .ctx
            .events
            .emit(EventPayload::Processing {
                message: format!(
                    "[agent \"{label}\" ({run_id})] started{}",
                    if a.background {
                        " in the background"
                    } else {
                        ""
                    }
                ),
            })
            .await;
        if a.background {
            let fut: BoxFuture<'static, LoopEnd> =
                Box::pin(run_loop(runner.clone(), agent, messages, None));
            runner.start_background(label.clone(), run_id.clone(), fut);
            return Ok(ToolOutput::ok(format!(
                "Background agent \"{label}\" started (runId {run_id}). Its result will arrive as a message when it finishes."
            )));
        }
        let end = run_loop(runner.clone(), agent, messages, None).await;
        runner
            .ctx
            .events
            .emit(EventPayload::Processing {
                message: format!("[agent \"{label}\" ({run_id})] {}", end.finish.as_str()),
            })
            .await;
        if end.finish == FinishReason::Interrupted {
            return Err(ToolError::Interrupted);
        }
        let text = outcome_text(&end);
        Ok(if end.finish == FinishReason::Stop {
            ToolOutput::ok(text)
        } else {
            ToolOutput::error(text)
        })
    })
}

/// The drained text of a background result.
pub(crate) fn background_text(end: &LoopEnd) -> String {
    outcome_text(end)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_schema_says_what_the_arguments_need() {
        let schema = SpawnTool.schema();
        elfgate_tools::schema::check_args_schema::<SpawnArgs>(&schema).unwrap();
    }
}
