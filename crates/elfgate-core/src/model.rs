//! Sessions, runs and messages: the persisted domain records.

use crate::engine_type::EngineType;
use crate::ids::{MessageId, RunId, SessionId};
use crate::provider_kind::ProviderKind;
use crate::usage::TokenUsage;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::str::FromStr;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The client's prompt.
    User,
    /// The model's answer.
    Assistant,
    /// Tool results fed back to the model.
    Tool,
    /// A system prompt or note.
    System,
}

impl Role {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
            Role::System => "system",
        }
    }
}

impl FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "user" => Ok(Role::User),
            "assistant" => Ok(Role::Assistant),
            "tool" => Ok(Role::Tool),
            "system" => Ok(Role::System),
            other => Err(format!("unknown role '{other}'")),
        }
    }
}

/// One typed block of a message's content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// The model's visible reasoning.
    Thinking {
        /// The reasoning text.
        thinking: String,
        /// Provider signature that must be sent back unchanged (Anthropic), if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// A tool call requested by the model.
    ToolUse {
        /// The provider's call id.
        id: String,
        /// The tool's name.
        name: String,
        /// The arguments, as JSON.
        input: Value,
    },
    /// The result of a tool call.
    ToolResult {
        /// The id of the call this answers.
        tool_use_id: String,
        /// The result text the model sees.
        content: String,
        /// Whether the call failed (or was denied, timed out, interrupted).
        #[serde(default)]
        is_error: bool,
    },
    /// A document (a PDF, or another file type a provider takes as such), inline (base64) or by
    /// URL; each provider kind's client sends it the way its API takes files.
    Document {
        /// MIME type, e.g. application/pdf.
        media_type: String,
        /// The file's name, when the client gave one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// Base64 data, when inline.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data: Option<String>,
        /// A URL, when not inline.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        url: Option<String>,
    },
    /// A block of a provider's own server-side tool, kept verbatim: Anthropic's
    /// `server_tool_use` (the search the model ran) and `web_search_tool_result` (what it found,
    /// encrypted). Sent back unchanged to a provider of the same kind, which needs them to go on
    /// from that turn; left out for other kinds, to which they mean nothing.
    ProviderBlock {
        /// The provider kind that wrote it (e.g. `anthropic`).
        provider_kind: ProviderKind,
        /// The block as the provider sent it.
        block: Value,
    },
    /// An image, inline (base64) or by URL.
    Image {
        /// MIME type, e.g. image/png.
        media_type: String,
        /// Base64 data, when inline.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data: Option<String>,
        /// A URL, when not inline.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        url: Option<String>,
    },
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text { text: text.into() }
    }
}

/// A provider block as people read it: its type and what the tool was asked, e.g.
/// `server_tool_use {"query":"rust"}` (a result's content is encrypted for the provider).
pub fn provider_block_label(block: &Value) -> String {
    let kind = block["type"].as_str().unwrap_or("provider_block");
    match block.get("input") {
        Some(input) => format!("{kind} {input}"),
        None => kind.to_string(),
    }
}

/// A persisted chat message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    /// The message id.
    pub id: MessageId,
    /// The session it belongs to.
    pub session_id: SessionId,
    /// The run that produced it.
    pub run_id: Option<RunId>,
    /// The message it answers or follows (branching history).
    pub parent_id: Option<MessageId>,
    /// Who wrote it.
    pub role: Role,
    /// Its content.
    pub blocks: Vec<ContentBlock>,
    /// The model that wrote it (assistant messages).
    pub model: Option<String>,
    /// Input tokens billed for producing it.
    pub input_tokens: Option<u64>,
    /// Output tokens billed for producing it.
    pub output_tokens: Option<u64>,
    /// When it was stored.
    pub created_at: DateTime<Utc>,
}

impl Message {
    /// A new message with a fresh id, stamped now.
    pub fn new(
        session_id: SessionId,
        run_id: Option<RunId>,
        parent_id: Option<MessageId>,
        role: Role,
        blocks: Vec<ContentBlock>,
    ) -> Self {
        Message {
            id: MessageId::new(),
            session_id,
            run_id,
            parent_id,
            role,
            blocks,
            model: None,
            input_tokens: None,
            output_tokens: None,
            created_at: Utc::now(),
        }
    }

    /// The concatenated text blocks.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for b in &self.blocks {
            if let ContentBlock::Text { text } = b {
                out.push_str(text);
            }
        }
        out
    }
}

/// A session: one conversation with one engine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    /// The session id.
    pub id: SessionId,
    /// The engine it runs on.
    pub engine: EngineType,
    /// A title for lists.
    pub title: Option<String>,
    /// The configured provider it uses.
    pub provider_id: Option<String>,
    /// The model it uses.
    pub model: Option<String>,
    /// The CLI backend (cli engine).
    pub cli_backend: Option<crate::CliBackend>,
    /// The project directory tools act in.
    pub project_path: Option<String>,
    /// An agent profile id.
    pub agent_id: Option<String>,
    /// The system prompt.
    pub system_prompt: Option<String>,
    /// The permission mode.
    pub permission_mode: Option<crate::PermissionMode>,
    /// Engine-specific settings.
    pub engine_config: Value,
    /// The CLI backend's own session id, for resume.
    pub cli_session_id: Option<String>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// Who owns it (`owner`, `team`, `visibility`): its creator, the creator's team, and who
    /// else sees it.
    #[serde(flatten)]
    pub ownership: crate::Ownership,
}

/// Where a run is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Waiting behind another run of the same session.
    Queued,
    /// Running now.
    Running,
    /// Ended normally (stop or max_iterations).
    Completed,
    /// Stopped by an interrupt or a daemon restart.
    Interrupted,
    /// Ended by an error.
    Failed,
}

impl RunStatus {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Failed => "failed",
        }
    }
}

impl FromStr for RunStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "queued" => Ok(RunStatus::Queued),
            "running" => Ok(RunStatus::Running),
            "completed" => Ok(RunStatus::Completed),
            "interrupted" => Ok(RunStatus::Interrupted),
            "failed" => Ok(RunStatus::Failed),
            other => Err(format!("unknown run status '{other}'")),
        }
    }
}

/// Why a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model finished its answer.
    Stop,
    /// The agent loop hit its iteration limit.
    MaxIterations,
    /// A client interrupted the run.
    Interrupted,
    /// An error ended the run.
    Error,
    /// The daemon stopped (crash or kill) while the run was going.
    DaemonRestart,
    /// The fleet node running it went away (killed, cut off or paused past its lease); another
    /// node ended it.
    NodeLost,
    /// Its fleet node stopped (SIGTERM) and the run did not end within the node's drain time.
    NodeShutdown,
    /// The next model call would have passed the run's or the session's token budget
    /// (engineConfig `maxTotalTokens`, `maxSessionTokens`).
    BudgetExhausted,
    /// A spending budget (a key's, user's or team's, or the session's or workflow's
    /// `maxCostUsd`) had no room for the next model call: the session is paused, its state kept,
    /// until the budget is raised or reset or its period rolls over.
    BudgetPaused,
}

impl FinishReason {
    /// The wire and stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::MaxIterations => "max_iterations",
            FinishReason::Interrupted => "interrupted",
            FinishReason::Error => "error",
            FinishReason::DaemonRestart => "daemon_restart",
            FinishReason::NodeLost => "node_lost",
            FinishReason::NodeShutdown => "node_shutdown",
            FinishReason::BudgetExhausted => "budget_exhausted",
            FinishReason::BudgetPaused => "budget_paused",
        }
    }

    /// The run status this reason leaves behind.
    pub fn run_status(self) -> RunStatus {
        match self {
            FinishReason::Stop
            | FinishReason::MaxIterations
            | FinishReason::BudgetExhausted
            | FinishReason::BudgetPaused => RunStatus::Completed,
            FinishReason::Interrupted
            | FinishReason::DaemonRestart
            | FinishReason::NodeLost
            | FinishReason::NodeShutdown => RunStatus::Interrupted,
            FinishReason::Error => RunStatus::Failed,
        }
    }
}

impl fmt::Display for FinishReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for FinishReason {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "stop" => Ok(FinishReason::Stop),
            "max_iterations" => Ok(FinishReason::MaxIterations),
            "interrupted" => Ok(FinishReason::Interrupted),
            "error" => Ok(FinishReason::Error),
            "daemon_restart" => Ok(FinishReason::DaemonRestart),
            "node_lost" => Ok(FinishReason::NodeLost),
            "node_shutdown" => Ok(FinishReason::NodeShutdown),
            "budget_exhausted" => Ok(FinishReason::BudgetExhausted),
            "budget_paused" => Ok(FinishReason::BudgetPaused),
            other => Err(format!("unknown finish reason '{other}'")),
        }
    }
}

/// Where a run's prompt came from when a chat channel sent it (the specification's
/// channelSource, channelId and channelSenderId): stored on the run, handed to hooks and the
/// guardian, shown in the run's record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChannelOrigin {
    /// The kind of channel (e.g. slack, telegram).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_source: Option<String>,
    /// The channel (a chat, a room).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_id: Option<String>,
    /// Who sent the prompt in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_sender_id: Option<String>,
}

impl ChannelOrigin {
    /// Longest value of each field, in characters.
    pub const MAX_CHARS: usize = 256;

    /// No field is set.
    pub fn is_empty(&self) -> bool {
        self.channel_source.is_none()
            && self.channel_id.is_none()
            && self.channel_sender_id.is_none()
    }

    /// The fields with their wire names.
    pub fn fields(&self) -> [(&'static str, Option<&str>); 3] {
        [
            ("channelSource", self.channel_source.as_deref()),
            ("channelId", self.channel_id.as_deref()),
            ("channelSenderId", self.channel_sender_id.as_deref()),
        ]
    }

    /// Adds the fields that are set to a hook's JSON object, under their wire names.
    pub fn add_to(&self, payload: &mut serde_json::Value) {
        if let serde_json::Value::Object(map) = payload {
            for (name, v) in self.fields() {
                if let Some(v) = v {
                    map.insert(name.to_string(), serde_json::Value::String(v.to_string()));
                }
            }
        }
    }

    /// The first field that is empty or longer than [`Self::MAX_CHARS`], with why.
    pub fn problem(&self) -> Option<String> {
        self.fields().into_iter().find_map(|(name, v)| match v {
            Some(v) if v.trim().is_empty() => Some(format!("{name} must not be empty")),
            Some(v) if v.chars().count() > Self::MAX_CHARS => Some(format!(
                "{name} is longer than {} characters",
                Self::MAX_CHARS
            )),
            _ => None,
        })
    }
}

/// One run of an engine for one prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Run {
    /// The run id.
    pub id: RunId,
    /// The session it belongs to.
    pub session_id: SessionId,
    /// Where it is.
    pub status: RunStatus,
    /// Why it ended, once it has.
    pub finish_reason: Option<FinishReason>,
    /// Tokens over all LLM calls.
    #[serde(flatten)]
    pub usage: TokenUsage,
    /// LLM iterations.
    pub iterations: u32,
    /// When it started (or was queued).
    pub started_at: DateTime<Utc>,
    /// When it ended.
    pub ended_at: Option<DateTime<Utc>>,
    /// The error that ended it, if any (on the wire: `code: message`).
    #[schema(value_type = Option<String>)]
    pub error: Option<crate::run_error::RunError>,
    /// The client's idempotency key of the prompt that started it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_msg_id: Option<String>,
    /// The chat channel the prompt came from, if one sent it.
    #[serde(flatten)]
    pub channel: ChannelOrigin,
    /// What its priced model calls cost in US dollars, from the spend ledger once it ended
    /// (`GET …/runs/{runId}`); absent when none was priced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// The id of the trace its spans are in (32 lowercase hex digits), when runs are traced
    /// (`[telemetry]`): the `init` event's `traceId`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}
