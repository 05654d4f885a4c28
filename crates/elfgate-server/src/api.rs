//! The HTTP API's request and response bodies for sessions and runs: what clients send and read,
//! declared once for the handlers, the service layer and the OpenAPI document.

use crate::extract::{StrictBody, UnknownFields};
use elfgate_core::{
    Attachment, ChannelPermissions, EngineConfig, EngineType, MessageId, OnBusy, PermissionMode,
    RunId, Session, SessionId, ThinkingLevel,
};
use elfgate_tools::{Decision, Scope};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Per-run settings a prompt may carry (both on create and on resume).
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunOverrides {
    /// Provider name.
    pub provider_id: Option<String>,
    /// Model.
    pub model: Option<String>,
    /// System prompt.
    pub system_prompt: Option<String>,
    /// How much the model reasons; over engineConfig.thinkingLevel. Kept as text here so that
    /// an unknown level is a 400 naming the accepted ones.
    #[schema(value_type = Option<ThinkingLevel>)]
    pub thinking_level: Option<String>,
    /// Engine settings, key by key over the session's. Parsed after the body so that a wrong
    /// key or type is a 422 naming it.
    #[schema(value_type = Option<EngineConfig>)]
    pub engine_config: Option<Value>,
    /// Permission mode (tinyelf).
    #[schema(value_type = Option<PermissionMode>)]
    pub permission_mode: Option<String>,
    /// Files and images.
    pub attachments: Option<Vec<Attachment>>,
    /// What the channel's user may do: stored with the session and applied to every later run
    /// and tool run until a prompt sends new ones. Also accepted as `channelUserPermissions`.
    #[serde(alias = "channelUserPermissions")]
    pub channel_permissions: Option<ChannelPermissions>,
    /// Client idempotency key.
    pub client_msg_id: Option<String>,
    /// Extra arguments of the CLI (cli engine), each in the backend's allow list; stored with
    /// the session as engineConfig.cliArgs (over an engineConfig.cliArgs of the same request).
    pub cli_args: Option<Vec<String>>,
}

/// Body of POST /v1/sessions.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateSessionRequest {
    /// Engine wire name. An unknown one is 422.
    #[schema(value_type = EngineType)]
    pub engine: String,
    /// First prompt.
    pub prompt: String,
    /// Title for lists.
    pub title: Option<String>,
    /// Project directory for tools.
    pub project_path: Option<String>,
    /// CLI backend (cli engine). An unknown one is 422.
    #[schema(value_type = Option<elfgate_core::CliBackend>)]
    pub cli_backend: Option<String>,
    /// Agent profile.
    pub agent_id: Option<String>,
    /// MCP servers of this session over the daemon's, and daemon servers it does without
    /// (tinyelf): `{"servers": {NAME: {...}}, "disable": [NAME]}`. Stored with the session's
    /// engineConfig (as its mcpConfig key); a malformed one is a 422 naming the field.
    #[schema(value_type = Option<elfgate_core::McpSessionConfig>)]
    pub mcp_config: Option<Value>,
    /// Run settings.
    #[serde(flatten)]
    pub overrides: RunOverrides,
    /// Fields of no use here: refused.
    #[serde(flatten)]
    #[schema(ignore)]
    pub unknown: UnknownFields,
}

impl StrictBody for CreateSessionRequest {
    fn unknown_fields(&self) -> Option<&UnknownFields> {
        Some(&self.unknown)
    }
}

/// Answer of POST /v1/sessions.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateSessionResponse {
    /// The new session.
    pub session_id: SessionId,
    /// Its first run.
    pub run_id: RunId,
    /// Where to follow it.
    pub events_url: String,
    /// True when `clientMsgId` matched an earlier request: nothing new was created.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub duplicate: bool,
}

/// Body of POST /v1/sessions/{id}/messages.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageRequest {
    /// The prompt.
    pub prompt: String,
    /// What to do when a run is going on.
    #[serde(default)]
    pub on_busy: OnBusy,
    /// The message this prompt follows (branching).
    pub parent_id: Option<MessageId>,
    /// Run settings.
    #[serde(flatten)]
    pub overrides: RunOverrides,
    /// Fields of no use here: refused.
    #[serde(flatten)]
    #[schema(ignore)]
    pub unknown: UnknownFields,
}

impl StrictBody for SendMessageRequest {
    fn unknown_fields(&self) -> Option<&UnknownFields> {
        Some(&self.unknown)
    }
}

/// Answer of POST /v1/sessions/{id}/messages.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageResponse {
    /// The session.
    pub session_id: SessionId,
    /// The new run.
    pub run_id: RunId,
    /// running or queued; for a duplicate, the earlier run's status.
    pub status: &'static str,
    /// True when `clientMsgId` matched an earlier prompt: no new run was started.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub duplicate: bool,
}

/// Answer of POST /v1/sessions/{id}/interrupt.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InterruptResponse {
    /// Whether a run was going on and was told to stop.
    pub interrupted: bool,
    /// That run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<RunId>,
    /// idle, interrupting (not waited for) or interrupted (ended).
    pub status: &'static str,
}

/// A session with its live status.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionView {
    /// The stored session.
    #[serde(flatten)]
    pub session: Session,
    /// idle or running.
    pub status: &'static str,
    /// The run going on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_run_id: Option<RunId>,
    /// Runs waiting behind it.
    pub queued_runs: usize,
    /// In the session list only: the text of the session's first prompt (its first text block,
    /// at most 200 characters), for showing a session without a title. Absent when it has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_prompt: Option<String>,
}

/// Body of POST /v1/sessions/{id}/permissions/{requestId}.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PermissionBody {
    /// allow or deny.
    #[schema(example = "allow")]
    pub decision: Decision,
    /// once (the default) or session.
    #[serde(default)]
    #[schema(example = "once")]
    pub scope: Scope,
    /// A note for the model, e.g. why it was denied.
    #[serde(default)]
    pub message: Option<String>,
}

impl StrictBody for PermissionBody {}

/// Answer of POST /v1/sessions/{id}/permissions/{requestId}.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PermissionAnswered {
    /// The request answered.
    pub request_id: String,
    /// allow or deny.
    pub decision: Decision,
    /// once or session.
    pub scope: Scope,
}
