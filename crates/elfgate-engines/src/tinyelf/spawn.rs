//! spawn: starts a sub-agent, a nested loop with its own tool set and a label, in the foreground
//! (its answer is the tool result) or in the background (its answer is drained into the parent).
//!
//! The tool checks the call and reports on it; running the sub-agent is the run's job, reached
//! through [`SubAgents`], so that the tool does not depend on the loop that calls it.

use async_trait::async_trait;
use elfgate_core::FinishReason;
use elfgate_tools::{
    BuiltinTool, PermissionTier, ToolContext, ToolDecl, ToolError, ToolKind, ToolOutput,
};
use schemars::JsonSchema;
use serde::Deserialize;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The tool's name.
pub(crate) const SPAWN: &str = "spawn";

/// A sub-agent to start.
#[derive(Debug, Clone)]
pub(crate) struct SubAgentSpec {
    pub label: String,
    pub run_id: String,
    pub task: String,
    /// Tool names it may use (None: the parent's, without spawn).
    pub tools: Option<Vec<String>>,
}

/// How a sub-agent ended.
#[derive(Debug, Clone)]
pub(crate) struct SubAgentEnd {
    pub finish: FinishReason,
    pub text: String,
}

/// What spawn needs from the run it belongs to.
#[async_trait]
pub(crate) trait SubAgents: Send + Sync {
    /// Takes one of the run's background slots; false when none is left.
    fn reserve_background(&self) -> bool;
    /// The most background sub-agents one run may start.
    fn max_background(&self) -> u32;
    /// Tells the client how sub-agents are doing (a `processing` event).
    async fn report(&self, message: String);
    /// Runs a sub-agent to its end; `cancel` stops it.
    async fn run(&self, spec: SubAgentSpec, cancel: CancellationToken) -> SubAgentEnd;
    /// Starts a background sub-agent whose answer reaches the parent later.
    fn start(&self, spec: SubAgentSpec);
}

/// The spawn tool of one run.
pub(crate) struct SpawnTool {
    agents: Arc<dyn SubAgents>,
}

impl SpawnTool {
    pub(crate) fn new(agents: Arc<dyn SubAgents>) -> Self {
        SpawnTool { agents }
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SpawnArgs {
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

#[async_trait]
impl BuiltinTool for SpawnTool {
    type Args = SpawnArgs;
    const DECL: ToolDecl = ToolDecl {
        name: SPAWN,
        description: "Start a sub-agent on a self-contained task. background=false waits and returns its answer; \
background=true returns at once and its answer arrives later as a message. Sub-agents cannot spawn.",
        tier: PermissionTier::ReadOnly,
        kind: ToolKind::Agent,
        works_in_project: false,
    };
    async fn run(&self, a: SpawnArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        if a.task.trim().is_empty() {
            return Err(ToolError::InvalidInput("task must not be empty".into()));
        }
        if a.background && !self.agents.reserve_background() {
            return Ok(ToolOutput::error(format!(
                "background sub-agent limit reached: this run already started {} (engines.tinyelf.max_background_agents); \
wait for their results, or run this task in the foreground (background: false)",
                self.agents.max_background()
            )));
        }
        let label = a
            .label
            .filter(|l| !l.trim().is_empty())
            .unwrap_or_else(|| "sub-agent".to_string());
        let spec = SubAgentSpec {
            label: label.clone(),
            run_id: uuid::Uuid::now_v7().to_string(),
            task: a.task,
            tools: a.tools,
        };
        let run_id = spec.run_id.clone();
        self.agents
            .report(format!(
                "[agent \"{label}\" ({run_id})] started{}",
                if a.background {
                    " in the background"
                } else {
                    ""
                }
            ))
            .await;
        if a.background {
            self.agents.start(spec);
            return Ok(ToolOutput::ok(format!(
                "Background agent \"{label}\" started (runId {run_id}). Its result will arrive as a message when it finishes."
            )));
        }
        let end = self.agents.run(spec, ctx.cancel.clone()).await;
        self.agents
            .report(format!(
                "[agent \"{label}\" ({run_id})] {}",
                end.finish.as_str()
            ))
            .await;
        if end.finish == FinishReason::Interrupted {
            return Err(ToolError::Interrupted);
        }
        let text = outcome_text(end.finish, &end.text);
        Ok(if end.finish == FinishReason::Stop {
            ToolOutput::ok(text)
        } else {
            ToolOutput::error(text)
        })
    }
}

/// A sub-agent's answer as its parent sees it: the tool result, or the drained background result.
pub(crate) fn outcome_text(finish: FinishReason, text: &str) -> String {
    let t = if text.is_empty() { "(no answer)" } else { text };
    match finish {
        FinishReason::Stop => t.to_string(),
        other => format!("[sub-agent ended: {}] {t}", other.as_str()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use elfgate_tools::Tool as _;

    /// Runs nothing; refuses background slots.
    struct NoAgents;

    #[async_trait]
    impl SubAgents for NoAgents {
        fn reserve_background(&self) -> bool {
            false
        }
        fn max_background(&self) -> u32 {
            0
        }
        async fn report(&self, _message: String) {}
        async fn run(&self, _spec: SubAgentSpec, _cancel: CancellationToken) -> SubAgentEnd {
            panic!("not called by these tests")
        }
        fn start(&self, _spec: SubAgentSpec) {
            panic!("not called by these tests")
        }
    }

    #[test]
    fn the_schema_says_what_the_arguments_need() {
        let schema = SpawnTool::new(Arc::new(NoAgents)).schema();
        elfgate_tools::schema::check_args_schema::<SpawnArgs>(&schema).unwrap();
    }

    #[test]
    fn outcomes_other_than_stop_say_how_it_ended() {
        assert_eq!(outcome_text(FinishReason::Stop, "42"), "42");
        assert_eq!(
            outcome_text(FinishReason::Error, ""),
            "[sub-agent ended: error] (no answer)"
        );
    }
}
