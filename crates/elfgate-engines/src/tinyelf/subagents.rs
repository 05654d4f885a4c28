//! The run's side of spawn: sub-agents built from the run's settings and run with the loop.

use super::agent::run_loop;
use super::context::blocks::SystemPrompt;
use super::runner::{Agent, Runner};
use super::spawn::{SPAWN, SpawnTool, SubAgentEnd, SubAgentSpec, SubAgents};
use async_trait::async_trait;
use elfgate_core::{ContentBlock, EventPayload, Role};
use elfgate_llm::LlmMessage;
use elfgate_tools::ToolRegistry;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// Sub-agents of one run.
struct RunSubAgents {
    runner: Arc<Runner>,
    /// The top-level agent's tools, without spawn: sub-agents cannot spawn.
    tools: ToolRegistry,
}

/// `tools` with the run's spawn tool added, if `enabled` (the run's enabledTools allow it).
pub(crate) fn with_spawn(tools: ToolRegistry, runner: &Arc<Runner>, enabled: bool) -> ToolRegistry {
    if !enabled {
        return tools;
    }
    let agents = RunSubAgents {
        runner: runner.clone(),
        tools: tools.without(&[SPAWN]),
    };
    let mut tools = tools;
    tools.register(Arc::new(SpawnTool::new(Arc::new(agents))));
    tools
}

impl RunSubAgents {
    fn agent(&self, spec: &SubAgentSpec, cancel: CancellationToken) -> Agent {
        let rs = &self.runner.rs;
        let label = &spec.label;
        Agent {
            label: Some(label.clone()),
            depth: 1,
            tools: match &spec.tools {
                Some(names) => self.tools.only(names),
                None => self.tools.clone(),
            },
            cancel,
            model: rs
                .sub_agent_model
                .clone()
                .unwrap_or_else(|| self.runner.model.clone()),
            system: SystemPrompt::whole(if self.runner.has_project {
                format!(
                    "You are a sub-agent named \"{label}\" working for another agent in the \
project directory {}. Do the task with your tools and answer with the result only.",
                    self.runner.project.display()
                )
            } else {
                format!(
                    "You are a sub-agent named \"{label}\" working for another agent in a \
session without a project (no file or shell tool runs). Do the task with your tools and answer \
with the result only."
                )
            }),
            max_iterations: rs.sub_agent_max_iterations,
            // Sub-agents work with the built-in tools (the parent's, narrowed as the parent's are).
            mcp: None,
            tool_filter: None,
        }
    }
}

fn first_messages(spec: &SubAgentSpec) -> Vec<LlmMessage> {
    vec![LlmMessage {
        role: Role::User,
        blocks: vec![ContentBlock::text(spec.task.clone())],
    }]
}

#[async_trait]
impl SubAgents for RunSubAgents {
    fn reserve_background(&self) -> bool {
        self.runner.reserve_background()
    }

    fn max_background(&self) -> u32 {
        self.runner.inner.config.max_background_agents
    }

    async fn report(&self, message: String) {
        self.runner
            .ctx
            .events
            .emit(EventPayload::Processing { message })
            .await;
    }

    async fn run(&self, spec: SubAgentSpec, cancel: CancellationToken) -> SubAgentEnd {
        let agent = self.agent(&spec, cancel);
        // A nested `invoke_agent`, under the spawn call's `execute_tool`.
        let span = elfgate_core::telemetry::agent_span(&spec.label);
        let end = run_loop(self.runner.clone(), agent, first_messages(&spec), None)
            .instrument(span.clone())
            .await;
        elfgate_core::telemetry::record_finish(
            &span,
            end.finish,
            end.error.as_ref().map(|e| e.code.as_str()),
        );
        SubAgentEnd {
            finish: end.finish,
            text: end.text,
        }
    }

    fn start(&self, spec: SubAgentSpec) {
        let agent = self.agent(&spec, self.runner.bg_cancel.child_token());
        let fut = Box::pin(
            run_loop(self.runner.clone(), agent, first_messages(&spec), None)
                .instrument(elfgate_core::telemetry::agent_span(&spec.label)),
        );
        self.runner.start_background(spec.label, spec.run_id, fut);
    }
}
