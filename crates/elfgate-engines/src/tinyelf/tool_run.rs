//! Tool runs outside turns: one registered tool (built-in, a skill tool, or an MCP tool of the
//! session's servers) run in a session's project without a model call,
//! through the same pipeline as the model's calls (hooks, firewall, guardian, permission tiers and
//! prompts, timeout), recorded in the session's history as a tool_use and its tool_result. The run
//! is an ordinary run of the session (admitted, interruptible, with its events); the HTTP layer
//! waits for its answer.

use super::context::blocks::SystemPrompt;
use super::context::{skill_tools, skills};
use super::runner::{Agent, Runner};
use super::{Flavor, Prepared, TinyElfEngine, mcp, pipeline};
use crate::streaming::RequestedToolCall;
use elfgate_core::{
    ContentBlock, EngineSessionContext, EngineType, ErrorCode, EventPayload, FinishReason,
    McpSessionConfig, Message, Role, RunId, RunOutcome, SessionId, ToolCallStatus, ToolRun,
};
use elfgate_tools::ToolRegistry;
use elfgate_tools::gate::{ToolRunAnswer, ToolRunError, ToolRuns};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use tokio::sync::oneshot;

/// Runs waiting for their answer, by run id.
pub(crate) type Waiters = std::sync::Mutex<HashMap<RunId, oneshot::Sender<ToolRunAnswer>>>;

impl TinyElfEngine {
    /// The tools a tool run may name in `project`: the built-in ones and the skill tools (spawn
    /// needs a model's run and is not one of them), as many as `enabled` (the run's enabledTools)
    /// leaves in, as a model's run of the session would be offered.
    async fn tool_run_registry(
        &self,
        project: Option<&Path>,
        enabled: Option<&[String]>,
    ) -> ToolRegistry {
        let inner = &self.inner;
        let skills =
            Arc::new(skills::discover(&inner.firewall, &inner.config.skills_dirs, project).await);
        let is_on = |name: &str| enabled.is_none_or(|names| names.iter().any(|n| n == name));
        let builtin = match enabled {
            Some(names) => inner.tools.only(names),
            None => inner.tools.clone(),
        };
        skill_tools::with_skill_tools(builtin, &skills, is_on)
    }

    /// The run's enabledTools: the session's engineConfig over the daemon's `enabled_tools`.
    fn enabled_tools<'a>(&'a self, session_cfg: Option<&'a [String]>) -> Option<&'a [String]> {
        session_cfg.or(self.inner.config.enabled_tools.as_deref())
    }
    /// The run of one tool.
    pub(super) async fn run_tool(&self, ctx: EngineSessionContext, call: ToolRun) -> RunOutcome {
        let waiter = self
            .inner
            .tool_waiters
            .lock()
            .ok()
            .and_then(|mut w| w.remove(&ctx.run_id));
        let prepared = match self.prepare(&ctx, Flavor::Agent).await {
            Ok(p) => p,
            Err(outcome) => return outcome,
        };
        ctx.events
            .emit(EventPayload::Init {
                system_info: ctx.system_info(json!({
                    "engine": EngineType::TinyElf.as_str(),
                    "provider": prepared.provider_name,
                    "model": prepared.model,
                    "projectPath": prepared.project.as_ref().map(|p| p.display().to_string()),
                    "toolRun": call.name,
                    "permissionMode": ctx.permission_mode.unwrap_or_default(),
                    "sandbox": self.sandbox_facts(),
                })),
            })
            .await;
        let answer = match self
            .call_tool(&ctx, prepared, call, elfgate_tools::Caller::Client)
            .await
        {
            Ok(a) => a,
            Err(outcome) => return outcome,
        };
        let finish = if answer.status == ToolCallStatus::Interrupted {
            FinishReason::Interrupted
        } else {
            FinishReason::Stop
        };
        if let Some(tx) = waiter {
            let _ = tx.send(answer);
        }
        RunOutcome::new(finish)
    }

    /// Calls `call` through the pipeline and records it (a tool_use and its tool_result).
    async fn call_tool(
        &self,
        ctx: &EngineSessionContext,
        prepared: Prepared,
        call: ToolRun,
        caller: elfgate_tools::Caller,
    ) -> Result<ToolRunAnswer, RunOutcome> {
        let inner = &self.inner;
        let Prepared {
            provider_name: _,
            provider,
            model,
            project,
            rs,
        } = prepared;
        let base = self
            .tool_run_registry(
                project.as_deref(),
                self.enabled_tools(ctx.engine_config.enabled_tools.as_deref()),
            )
            .await;
        // The session's MCP servers, as a model's run of it would have them.
        let mcp = inner
            .mcp
            .as_ref()
            .map(|m| Arc::new(mcp::McpRun::new(m, ctx)));
        let tools = match &mcp {
            Some(m) => match m.tools(&base, &ctx.cancel).await {
                Some(t) => t,
                None => return Err(RunOutcome::new(FinishReason::Interrupted)),
            },
            None => base,
        };
        let guardian = self.guardian(ctx, &provider, &model).await;
        let runner = Runner::new(
            inner.clone(),
            ctx.clone(),
            provider,
            model.clone(),
            rs,
            project,
            guardian,
        );
        let agent = Agent {
            label: None,
            depth: 0,
            tools,
            cancel: ctx.cancel.clone(),
            model,
            system: SystemPrompt::default(),
            max_iterations: 1,
            mcp,
            tool_filter: None,
        };
        let id = format!("toolu_api_{}", uuid::Uuid::now_v7().simple());
        let requested = RequestedToolCall {
            id: id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.to_string(),
        };
        let result =
            pipeline::run_call(&runner, &agent, &requested, &call.arguments, None, caller).await;

        let session_id = ctx.session_id();
        let parent = match inner.store.latest_message(session_id).await {
            Ok(m) => m.map(|m| m.id),
            Err(e) => {
                return Err(crate::streaming::fail(ctx, ErrorCode::Storage, e.report()).await);
            }
        };
        let use_msg = Message::new(
            session_id,
            Some(ctx.run_id),
            parent,
            Role::Assistant,
            vec![ContentBlock::ToolUse {
                id: id.clone(),
                name: call.name,
                input: call.arguments,
            }],
        );
        let tool_msg = Message::new(
            session_id,
            Some(ctx.run_id),
            Some(use_msg.id),
            Role::Tool,
            vec![result.block.clone()],
        );
        for m in [&use_msg, &tool_msg] {
            if let Err(e) = ctx.recorder.add_message(m).await {
                return Err(crate::streaming::fail(ctx, ErrorCode::Storage, e.0).await);
            }
        }
        ctx.events
            .emit(EventPayload::AssistantMessage { message: use_msg })
            .await;
        let (content, is_error) = match &result.block {
            ContentBlock::ToolResult {
                content, is_error, ..
            } => (content.clone(), *is_error),
            _ => (String::new(), true),
        };
        Ok(ToolRunAnswer {
            tool_use_id: id,
            status: result.status,
            content,
            is_error,
        })
    }
}

#[async_trait::async_trait]
impl ToolRuns for TinyElfEngine {
    /// Whether a workflow may name tool `name`: a built-in or skill tool (of `project`, when
    /// given), or `mcp__SERVER__TOOL` of a server in the configuration (its tools are known once
    /// it runs: a tool it does not have fails the step then).
    async fn knows_tool(&self, project: Option<&Path>, name: &str) -> bool {
        if let Some(rest) = name.strip_prefix("mcp__") {
            let server = rest.split("__").next().unwrap_or_default();
            return self.inner.mcp.as_ref().is_some_and(|m| {
                m.statuses()
                    .iter()
                    .any(|s| s.scope == "global" && s.name == server)
            });
        }
        self.tool_run_registry(project, None)
            .await
            .get(name)
            .is_some()
    }

    /// Checks that `name` is a registered tool of the session (an MCP tool of the servers its
    /// `mcp_config` gives it, starting them if need be) and that `arguments` fit its schema.
    async fn check_tool_run(
        &self,
        project: Option<&Path>,
        session: SessionId,
        mcp_config: Option<&McpSessionConfig>,
        enabled_tools: Option<&[String]>,
        name: &str,
        arguments: &Value,
    ) -> Result<(), ToolRunError> {
        let enabled = self.enabled_tools(enabled_tools);
        let mut tools = self.tool_run_registry(project, enabled).await;
        if name.starts_with("mcp__")
            && let Some(m) = &self.inner.mcp
        {
            for t in m.session_tools(session, mcp_config, None).await.tools {
                tools.register(t);
            }
        }
        let tool = match tools.get(name) {
            Some(t) => t,
            None if enabled.is_some()
                && self
                    .tool_run_registry(project, None)
                    .await
                    .get(name)
                    .is_some() =>
            {
                return Err(ToolRunError::NotEnabled {
                    tool: name.to_string(),
                    enabled: enabled.unwrap_or_default().join(", "),
                });
            }
            None => return Err(ToolRunError::UnknownTool(name.to_string())),
        };
        elfgate_tools::schema::check_input(&tool.schema(), arguments).map_err(|why| {
            ToolRunError::BadArguments {
                tool: name.to_string(),
                why: why.to_string(),
            }
        })
    }

    /// The answer of tool run `run_id`, once it has run; the sender is dropped when the run ends
    /// without one (it could not start, or its result could not be stored).
    fn await_tool_run(&self, run_id: RunId) -> oneshot::Receiver<ToolRunAnswer> {
        let (tx, rx) = oneshot::channel();
        if let Ok(mut w) = self.inner.tool_waiters.lock() {
            w.insert(run_id, tx);
        }
        rx
    }

    /// Forgets a tool run that was never admitted.
    fn forget_tool_run(&self, run_id: RunId) {
        if let Ok(mut w) = self.inner.tool_waiters.lock() {
            w.remove(&run_id);
        }
    }

    /// Runs one tool through the pipeline as a step of another engine's run (a workflow's tool
    /// step): recorded in the session's history and its events as a tool run is, without an
    /// `init` of its own. Err: the run's outcome (a failure already reported).
    async fn run_step_tool(
        &self,
        ctx: &EngineSessionContext,
        call: ToolRun,
    ) -> Result<ToolRunAnswer, RunOutcome> {
        let prepared = self.prepare(ctx, Flavor::Agent).await?;
        self.call_tool(ctx, prepared, call, elfgate_tools::Caller::Workflow)
            .await
    }
}
