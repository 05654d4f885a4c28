//! Tool calls outside a model's turn: a client's tool run (`POST /v1/sessions/{id}/tools/{name}`)
//! and a workflow's tool step. The HTTP layer and the workflow engine reach them through
//! [`ToolRuns`], not through the engine that owns the tools; each call still passes every gate.

use async_trait::async_trait;
use elfgate_core::{
    EngineSessionContext, McpSessionConfig, RunId, RunOutcome, SessionId, ToolCallStatus, ToolRun,
};
use serde_json::Value;
use std::path::Path;
use tokio::sync::oneshot;

/// Why a tool run cannot start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolRunError {
    /// No tool of that name is registered.
    #[error("unknown tool '{0}'")]
    UnknownTool(String),
    /// The session's enabledTools (or the daemon's enabled_tools) leave the tool out.
    #[error("tool '{tool}' is not enabled in this session (enabledTools: {enabled})")]
    NotEnabled {
        /// The tool.
        tool: String,
        /// The tools that are, comma-separated.
        enabled: String,
    },
    /// The arguments do not match the tool's schema.
    #[error("bad arguments for {tool}: {why}")]
    BadArguments {
        /// The tool.
        tool: String,
        /// What is wrong.
        why: String,
    },
}

/// What a tool run answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolRunAnswer {
    /// The id of the recorded tool_use.
    pub tool_use_id: String,
    /// How the call ended.
    pub status: ToolCallStatus,
    /// The result as the model would have seen it.
    pub content: String,
    /// Whether the result is an error.
    pub is_error: bool,
}

/// The tool calls a client or a workflow makes without a model, each through the tool gate.
#[async_trait]
pub trait ToolRuns: Send + Sync {
    /// Whether a workflow may name tool `name` (in `project`, when given).
    async fn knows_tool(&self, project: Option<&Path>, name: &str) -> bool;

    /// Checks that `name` is a tool of the session (its `enabled_tools`, the MCP servers its
    /// `mcp_config` gives it) and that `arguments` fit its schema, before a run is stored.
    async fn check_tool_run(
        &self,
        project: Option<&Path>,
        session: SessionId,
        mcp_config: Option<&McpSessionConfig>,
        enabled_tools: Option<&[String]>,
        name: &str,
        arguments: &Value,
    ) -> Result<(), ToolRunError>;

    /// The answer of tool run `run_id`, once it has run; the sender is dropped when the run
    /// ends without one.
    fn await_tool_run(&self, run_id: RunId) -> oneshot::Receiver<ToolRunAnswer>;

    /// Forgets a tool run that was never admitted.
    fn forget_tool_run(&self, run_id: RunId);

    /// Runs one tool as a step of another engine's run (a workflow's tool step), recorded in
    /// the session's history and events. Err: the run's outcome (a failure already reported).
    async fn run_step_tool(
        &self,
        ctx: &EngineSessionContext,
        call: ToolRun,
    ) -> Result<ToolRunAnswer, RunOutcome>;
}
