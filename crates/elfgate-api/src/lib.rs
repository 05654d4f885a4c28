//! The HTTP API's request and response bodies for sessions and runs: what clients send and read,
//! declared once for the daemon's handlers, its service layer, its OpenAPI document and its
//! clients (the terminal client reads and writes these same types).
//!
//! Requests are strict on the daemon's side: a field a body does not know is refused, never
//! ignored (an ignored field fails open). Types without a flattened part say
//! `deny_unknown_fields`; serde cannot deny fields beside a `flatten`, so such a type ends with
//! an [`UnknownFields`] collecting what no field took, which the daemon refuses.

pub mod budgets;
pub mod keys;
pub mod spend;

use elfgate_core::{
    Attachment, ChannelPermissions, Decision, EngineConfig, EngineType, Message, MessageId, OnBusy,
    PermissionMode, RunId, RunStatus, Scope, Session, SessionId, ThinkingLevel,
};
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// What no field of a body with a flattened part took; declared last, as
/// `#[serde(flatten, skip_serializing)] #[schema(ignore)] pub unknown: UnknownFields`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct UnknownFields(BTreeMap<String, IgnoredAny>);

impl UnknownFields {
    /// The first (in name order) of the fields no field of the type took.
    pub fn first(&self) -> Option<&str> {
        self.0.keys().next().map(String::as_str)
    }
}

/// Per-run settings a prompt may carry (both on create and on resume).
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunOverrides {
    /// Provider name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
    /// Model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// System prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// How much the model reasons; over engineConfig.thinkingLevel. Kept as text here so that
    /// an unknown level is a 400 naming the accepted ones.
    #[schema(value_type = Option<ThinkingLevel>)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking_level: Option<String>,
    /// Engine settings, key by key over the session's. Parsed after the body so that a wrong
    /// key or type is a 422 naming it.
    #[schema(value_type = Option<EngineConfig>)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine_config: Option<Value>,
    /// Permission mode (tinyelf).
    #[schema(value_type = Option<PermissionMode>)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<String>,
    /// Files and images.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attachments: Option<Vec<Attachment>>,
    /// What the channel's user may do: stored with the session and applied to every later run
    /// and tool run until a prompt sends new ones. Also accepted as `channelUserPermissions`.
    #[serde(alias = "channelUserPermissions")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channel_permissions: Option<ChannelPermissions>,
    /// Client idempotency key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_msg_id: Option<String>,
    /// Extra arguments of the CLI (cli engine), each in the backend's allow list; stored with
    /// the session as engineConfig.cliArgs (over an engineConfig.cliArgs of the same request).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cli_args: Option<Vec<String>>,
    /// The kind of chat channel this prompt came from (e.g. slack), stored on its run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channel_source: Option<String>,
    /// The channel (a chat, a room) it came from, stored on its run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channel_id: Option<String>,
    /// Who sent it in that channel, stored on its run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channel_sender_id: Option<String>,
}

impl RunOverrides {
    /// The chat channel the prompt came from (the three fields are written out here: serde
    /// cannot nest a flattened struct in one that is flattened next to the unknown-field
    /// catcher).
    pub fn channel(&self) -> elfgate_core::ChannelOrigin {
        elfgate_core::ChannelOrigin {
            channel_source: self.channel_source.clone(),
            channel_id: self.channel_id.clone(),
            channel_sender_id: self.channel_sender_id.clone(),
        }
    }
}

/// Body of POST /v1/sessions.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateSessionRequest {
    /// Engine wire name. An unknown one is 422.
    #[schema(value_type = EngineType)]
    pub engine: String,
    /// First prompt.
    pub prompt: String,
    /// Title for lists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Project directory for tools.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project_path: Option<String>,
    /// CLI backend (cli engine). An unknown one is 422.
    #[schema(value_type = Option<elfgate_core::CliBackend>)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cli_backend: Option<String>,
    /// Agent profile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// MCP servers of this session over the daemon's, and daemon servers it does without
    /// (tinyelf): `{"servers": {NAME: {...}}, "disable": [NAME]}`. Stored with the session's
    /// engineConfig (as its mcpConfig key); a malformed one is a 422 naming the field.
    #[schema(value_type = Option<elfgate_core::McpSessionConfig>)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp_config: Option<Value>,
    /// The configured ACP agent of a `cliBackend: "acp"` session (`[engines.cli.acp.agents]`);
    /// stored with the session's engineConfig (as its acpAgent key).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acp_agent: Option<String>,
    /// The model's long context (the specification's session-context field): stored with the
    /// session's engineConfig (as its useExtendedContext key).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub use_extended_context: Option<bool>,
    /// Who besides its owner sees the session: `private` (the owner alone) or `team` (the
    /// owner's team: members steer it, viewers read it); default `[auth] default_visibility`.
    /// Another value is 422.
    #[schema(value_type = Option<elfgate_core::Visibility>)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub visibility: Option<String>,
    /// Run settings.
    #[serde(flatten)]
    pub overrides: RunOverrides,
    /// Fields of no use here: refused.
    #[serde(flatten, skip_serializing)]
    #[schema(ignore)]
    pub unknown: UnknownFields,
}

/// Answer of POST /v1/sessions.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateSessionResponse {
    /// The new session.
    pub session_id: SessionId,
    /// Its first run.
    pub run_id: RunId,
    /// Where to follow it.
    pub events_url: String,
    /// True when `clientMsgId` matched an earlier request: nothing new was created.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub duplicate: bool,
}

/// Body of POST /v1/sessions/{id}/messages.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageRequest {
    /// The prompt.
    pub prompt: String,
    /// What to do when a run is going on.
    #[serde(default)]
    pub on_busy: OnBusy,
    /// The message this prompt follows (branching).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<MessageId>,
    /// Run settings.
    #[serde(flatten)]
    pub overrides: RunOverrides,
    /// Fields of no use here: refused.
    #[serde(flatten, skip_serializing)]
    #[schema(ignore)]
    pub unknown: UnknownFields,
}

/// Answer of POST /v1/sessions/{id}/messages.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageResponse {
    /// The session.
    pub session_id: SessionId,
    /// The new run.
    pub run_id: RunId,
    /// running or queued; for a duplicate, the earlier run's status.
    pub status: RunStatus,
    /// True when `clientMsgId` matched an earlier prompt: no new run was started.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub duplicate: bool,
}

/// Answer of POST /v1/sessions/{id}/interrupt.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InterruptResponse {
    /// Whether a run was going on and was told to stop.
    pub interrupted: bool,
    /// That run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<RunId>,
    /// What became of the run.
    pub status: InterruptStatus,
}

/// A session with its live status.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionView {
    /// The stored session.
    #[serde(flatten)]
    pub session: Session,
    /// Whether a run is going on.
    pub status: SessionStatus,
    /// The run going on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_run_id: Option<RunId>,
    /// Runs waiting behind it.
    #[serde(default)]
    pub queued_runs: usize,
    /// In the session list only: the text of the session's first prompt (its first text block,
    /// at most 200 characters), for showing a session without a title. Absent when it has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_prompt: Option<String>,
    /// In one session's view only (`GET /v1/sessions/{id}`): the tokens of its ended runs' model
    /// calls, summed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<elfgate_core::TokenUsage>,
    /// In one session's view only: what its ended runs' priced model calls cost, in US dollars;
    /// absent when none was priced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// Body of POST /v1/sessions/{id}/permissions/{requestId}.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Answer of POST /v1/sessions/{id}/permissions/{requestId}.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PermissionAnswered {
    /// The request answered.
    pub request_id: String,
    /// allow or deny.
    pub decision: Decision,
    /// once or session.
    pub scope: Scope,
}

/// Whether a session has a run going on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SessionStatus {
    /// No run.
    Idle,
    /// A run is going on.
    Running,
    /// Its latest run ended at a spent budget (`budget_paused`): `POST …/resume` (or a new
    /// prompt) goes on once the budget has room.
    Paused,
}

impl SessionStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Idle => "idle",
            SessionStatus::Running => "running",
            SessionStatus::Paused => "paused",
        }
    }
}

/// What an interrupt did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum InterruptStatus {
    /// Nothing was running.
    Idle,
    /// The run was told to stop; the answer did not wait for it to end.
    Interrupting,
    /// The run has ended.
    Interrupted,
}

impl InterruptStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            InterruptStatus::Idle => "idle",
            InterruptStatus::Interrupting => "interrupting",
            InterruptStatus::Interrupted => "interrupted",
        }
    }
}

/// Body of POST /v1/sessions/{id}/interrupt (may be empty).
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InterruptRequest {
    /// Wait until the run has ended before answering.
    #[serde(default)]
    pub wait: bool,
}

/// A page of sessions (GET /v1/sessions).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionList {
    /// The sessions, newest first.
    pub sessions: Vec<SessionView>,
    /// Pass as `cursor` for the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<SessionId>,
}

/// A session's persisted messages (GET /v1/sessions/{id}/messages).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MessageList {
    /// Oldest first.
    pub messages: Vec<Message>,
}

/// A session's blocked tool calls (GET /v1/sessions/{id}/audit).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditList {
    /// Oldest first.
    pub audit: Vec<elfgate_core::AuditRecord>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_written_by_their_wire_names() {
        for s in [SessionStatus::Idle, SessionStatus::Running] {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        for s in [
            InterruptStatus::Idle,
            InterruptStatus::Interrupting,
            InterruptStatus::Interrupted,
        ] {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
    }

    #[test]
    fn a_request_written_by_a_client_leaves_out_what_it_does_not_set() {
        let body = CreateSessionRequest {
            engine: "chat".into(),
            prompt: "hi".into(),
            ..CreateSessionRequest::default()
        };
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            serde_json::json!({"engine": "chat", "prompt": "hi"})
        );
    }
}
