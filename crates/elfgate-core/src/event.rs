//! The event stream: the envelope every event carries and the payload of each event type.
//!
//! The type names keep the seed's IPC names so that a client can move from IPC to SSE unchanged.

use crate::error_code::ErrorCode;
use crate::event_type::EventType;
use crate::ids::{RunId, SessionId};
use crate::model::{ContentBlock, FinishReason, Message};
use crate::usage::TokenUsage;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What kind of streamed text a delta carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeltaKind {
    /// Answer text.
    Text,
    /// Reasoning text.
    Thinking,
}

/// A piece of streamed text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Delta {
    /// Text or thinking.
    pub kind: DeltaKind,
    /// The piece.
    pub text: String,
    /// The reasoning's signature (Anthropic), on a thinking delta of its own with empty text, as
    /// soon as the provider sends it: the gateway's Anthropic stream must put it on the thinking
    /// block before the text that follows starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

/// How a tool call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ToolCallStatus {
    /// The tool ran and succeeded.
    Success,
    /// The tool ran and failed.
    Error,
    /// The pipeline or the client refused it.
    Denied,
    /// It ran past its timeout.
    Timeout,
    /// An interrupt stopped it.
    Interrupted,
}

impl ToolCallStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolCallStatus::Success => "success",
            ToolCallStatus::Error => "error",
            ToolCallStatus::Denied => "denied",
            ToolCallStatus::Timeout => "timeout",
            ToolCallStatus::Interrupted => "interrupted",
        }
    }
}

#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if hands the field by reference"
)]
fn is_false(b: &bool) -> bool {
    !*b
}

/// Figures of a finished run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunStats {
    /// Tokens over all LLM calls.
    #[serde(flatten)]
    pub usage: TokenUsage,
    /// Set when `outputTokens` holds, for at least one call, an estimate from the streamed text
    /// (about four bytes a token) instead of the provider's figure: a call that ended before the
    /// provider reported its usage (an interrupt, a broken stream). Absent when every figure is
    /// the provider's.
    #[serde(default, skip_serializing_if = "is_false")]
    pub output_tokens_estimated: bool,
    /// Set when `inputTokens` holds, for at least one call, an estimate from the request's size
    /// (about four bytes a token): a call that ended before the provider reported any usage.
    /// Absent when every figure is the provider's (Anthropic reports the prompt's at the start).
    #[serde(default, skip_serializing_if = "is_false")]
    pub input_tokens_estimated: bool,
    /// LLM iterations.
    pub iterations: u32,
    /// Wall time of the run.
    pub duration_ms: u64,
    /// Why it ended.
    pub finish_reason: FinishReason,
    /// Why the model itself stopped its last answer (`max_tokens`: cut at the output limit),
    /// beside the run's own finish reason. Absent when no answer came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_finish_reason: Option<ModelFinish>,
    /// The stop sequence the last answer ended at, when the provider says which.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_sequence: Option<String>,
    /// A workflow's run: the tokens and cost of each step that ended, in order (absent for the
    /// other engines).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepUsage>,
    /// What the run cost in US dollars: its priced model calls' costs summed (from the
    /// estimated figures where they are marked so), or the CLI's own figure. Absent when no
    /// call was priced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// What one workflow step spent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StepUsage {
    /// The step's id.
    pub step_id: String,
    /// Its tokens (none for tool and if steps).
    #[serde(flatten)]
    pub usage: TokenUsage,
    /// Its cost, where the model's prices are configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// Why a model stopped an answer, in the daemon's words (each door maps it to its API's own:
/// `max_tokens` is OpenAI's `length`, Anthropic's `max_tokens`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ModelFinish {
    /// A natural end.
    Stop,
    /// Cut at the output token limit.
    MaxTokens,
    /// The model asked for tool calls.
    ToolCalls,
    /// It wrote one of the request's stop sequences.
    StopSequence,
    /// The provider filtered or refused the output.
    ContentFilter,
    /// Another reason of the provider's.
    #[serde(other)]
    Other,
}

/// A machine code and a human message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErrorInfo {
    /// Short machine-readable code, e.g. `upstream_status` (see docs/api.md).
    pub code: ErrorCode,
    /// What happened, for a human.
    pub message: String,
    /// The provider's HTTP status, with code `upstream_status`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_status: Option<u16>,
}

impl ErrorInfo {
    /// Builds an error info.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorInfo {
            code,
            message: message.into(),
            upstream_status: None,
        }
    }

    /// The same, carrying the provider's HTTP status.
    pub fn with_upstream_status(mut self, status: Option<u16>) -> Self {
        self.upstream_status = status;
        self
    }
}

/// What a workflow's step does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum StepKind {
    /// Runs a tool.
    Tool,
    /// Asks a model once.
    Model,
    /// Runs an agent loop.
    Agent,
    /// Decides whether the next step runs.
    If,
}

impl StepKind {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            StepKind::Tool => "tool",
            StepKind::Model => "model",
            StepKind::Agent => "agent",
            StepKind::If => "if",
        }
    }
}

/// How a workflow's step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum StepStatus {
    /// It did its work.
    Success,
    /// It failed (the run ends, unless the step says continueOnError).
    Error,
    /// An `if` before it was false and said skipNext.
    Skipped,
    /// The run was interrupted during it.
    Interrupted,
}

/// A retry about to happen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryInfo {
    /// 1-based retry number.
    pub attempt: u32,
    /// Retries allowed in all.
    pub max_attempts: u32,
    /// How long until the retry.
    pub delay_ms: u64,
    /// What failed.
    pub reason: String,
}

/// The payload of an event; its variant name is the event `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum EventPayload {
    /// Engine and daemon information at the start of a run.
    #[schema(rename_all = "camelCase")]
    Init {
        /// Free-form facts: engine, model, provider, daemon version.
        system_info: Value,
    },
    /// The session was created.
    #[schema(rename_all = "camelCase")]
    SessionCreated {},
    /// The user's message was stored.
    #[schema(rename_all = "camelCase")]
    UserMessage {
        /// The stored message.
        message: Message,
    },
    /// A piece of streamed text.
    #[schema(rename_all = "camelCase")]
    StreamDelta {
        /// The piece.
        delta: Delta,
    },
    /// A tool call starts.
    #[schema(rename_all = "camelCase")]
    ToolCallStart {
        /// The tool_use block.
        block: ContentBlock,
    },
    /// A tool call ended.
    #[schema(rename_all = "camelCase")]
    ToolCallEnd {
        /// The tool_result block.
        block: ContentBlock,
        /// How it ended.
        status: ToolCallStatus,
    },
    /// The assistant's message was stored.
    #[schema(rename_all = "camelCase")]
    AssistantMessage {
        /// The stored message.
        message: Message,
    },
    /// The engine asks the client to allow a tool call.
    #[schema(rename_all = "camelCase")]
    PermissionRequest {
        /// Answer with POST /v1/sessions/{id}/permissions/{requestId}.
        request_id: String,
        /// The tool.
        tool_name: String,
        /// Its arguments.
        input: Value,
        /// Its permission tier.
        tier: crate::modes::PermissionTier,
        /// When it is denied without an answer.
        expires_at: DateTime<Utc>,
    },
    /// A permission request was answered (or expired).
    #[schema(rename_all = "camelCase")]
    PermissionResolved {
        /// The request.
        request_id: String,
        /// allow or deny.
        decision: crate::modes::Decision,
    },
    /// Figures of the finished run; always right before `complete`.
    #[schema(rename_all = "camelCase")]
    Result {
        /// The figures.
        stats: RunStats,
    },
    /// What the turn decided and used (tools called, blocked calls, tokens, cost): after
    /// `result`, before `complete`, for the agent loop's runs.
    #[schema(rename_all = "camelCase")]
    PostTurn {
        /// The record.
        turn: crate::TurnRecord,
    },
    /// The run ended; exactly one per run.
    #[schema(rename_all = "camelCase")]
    Complete {
        /// Why.
        finish_reason: FinishReason,
    },
    /// Something failed.
    #[schema(rename_all = "camelCase")]
    Error {
        /// What.
        error: ErrorInfo,
    },
    /// An upstream call is retried.
    #[schema(rename_all = "camelCase")]
    Retry {
        /// When and why.
        retry: RetryInfo,
    },
    /// A spending budget had no room for the next model call: the run ends with
    /// `budget_paused` and the session is paused until the budget has room again.
    #[schema(rename_all = "camelCase")]
    BudgetPaused {
        /// The budget.
        budget: crate::budget::BudgetNotice,
    },
    /// A budget's soft limit (`softUsd`) was passed: once per period.
    #[schema(rename_all = "camelCase")]
    BudgetWarning {
        /// The budget (`limitUsd` is its soft limit).
        budget: crate::budget::BudgetNotice,
    },
    /// A workflow's step starts.
    #[schema(rename_all = "camelCase")]
    StepStart {
        /// The step's id.
        step_id: String,
        /// Its position in the workflow, from 0.
        index: u32,
        /// What it does: tool, model, agent or if.
        kind: StepKind,
        /// Its try, from 1 (more with the step's retries).
        attempt: u32,
    },
    /// A workflow's step ended.
    #[schema(rename_all = "camelCase")]
    StepEnd {
        /// The step's id.
        step_id: String,
        /// How it ended.
        status: StepStatus,
        /// Its output (a tool's result text, a model's answer, an if's value): what later
        /// steps' templates see as `steps.ID.output`.
        output: Value,
        /// Why it failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A progress note.
    #[schema(rename_all = "camelCase")]
    Processing {
        /// The note.
        message: String,
    },
    /// The client's cursor is older than what is kept, or it fell behind: reload state.
    #[schema(rename_all = "camelCase")]
    Reset {
        /// Events from this seq on can be replayed.
        from_seq: u64,
    },
}

impl EventPayload {
    /// The event's `type`.
    pub fn kind(&self) -> EventType {
        match self {
            EventPayload::Init { .. } => EventType::Init,
            EventPayload::SessionCreated {} => EventType::SessionCreated,
            EventPayload::UserMessage { .. } => EventType::UserMessage,
            EventPayload::StreamDelta { .. } => EventType::StreamDelta,
            EventPayload::ToolCallStart { .. } => EventType::ToolCallStart,
            EventPayload::ToolCallEnd { .. } => EventType::ToolCallEnd,
            EventPayload::AssistantMessage { .. } => EventType::AssistantMessage,
            EventPayload::PermissionRequest { .. } => EventType::PermissionRequest,
            EventPayload::PermissionResolved { .. } => EventType::PermissionResolved,
            EventPayload::Result { .. } => EventType::Result,
            EventPayload::PostTurn { .. } => EventType::PostTurn,
            EventPayload::Complete { .. } => EventType::Complete,
            EventPayload::Error { .. } => EventType::Error,
            EventPayload::Retry { .. } => EventType::Retry,
            EventPayload::BudgetPaused { .. } => EventType::BudgetPaused,
            EventPayload::BudgetWarning { .. } => EventType::BudgetWarning,
            EventPayload::StepStart { .. } => EventType::StepStart,
            EventPayload::StepEnd { .. } => EventType::StepEnd,
            EventPayload::Processing { .. } => EventType::Processing,
            EventPayload::Reset { .. } => EventType::Reset,
        }
    }

    /// The event's `type` name.
    pub fn type_name(&self) -> &'static str {
        self.kind().as_str()
    }
}

/// One event as a reader of the stream or the log gets it back from its JSON: the envelope's ids
/// and the typed payload (what [`EventRecord::build`] wrote). A `reset`, sent outside the log,
/// has no seq.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventEnvelope {
    /// Per-session sequence number; absent on a `reset`.
    #[serde(default)]
    pub seq: Option<u64>,
    /// The session it belongs to.
    pub session_id: SessionId,
    /// The run it belongs to, if any.
    #[serde(default)]
    pub run_id: Option<RunId>,
    /// The event itself.
    #[serde(flatten)]
    pub payload: EventPayload,
}

/// A payload sent to a single subscriber outside the log (a `reset`): no seq, run or time, since
/// it is not part of the session's stream. Its JSON is the type, the session, then the payload's
/// own fields.
struct Unlogged<'a> {
    session_id: SessionId,
    payload: &'a EventPayload,
}

impl Serialize for Unlogged<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeMap};
        let fields = serde_json::to_value(self.payload).map_err(S::Error::custom)?;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("type", self.payload.type_name())?;
        map.serialize_entry("sessionId", &self.session_id)?;
        if let Value::Object(fields) = &fields {
            for (k, v) in fields.iter().filter(|(k, _)| *k != "type") {
                map.serialize_entry(k, v)?;
            }
        }
        map.end()
    }
}

impl EventPayload {
    /// The JSON of this payload sent outside the log to one subscriber of `session_id` (see
    /// [`EventPayload::Reset`]).
    pub fn unlogged_json(&self, session_id: SessionId) -> String {
        let unlogged = Unlogged {
            session_id,
            payload: self,
        };
        // Serializing plain data to a String cannot fail; the fallback still names the type.
        serde_json::to_string(&unlogged).unwrap_or_else(|_| {
            format!(
                "{{\"type\":\"{}\",\"sessionId\":\"{session_id}\"}}",
                self.type_name()
            )
        })
    }
}

/// One published event, typed and already serialized: the same JSON goes to every subscriber and
/// to the log, and an in-process reader (the gateway doors) matches on the payload instead of
/// parsing the JSON back.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRecord {
    /// The session it belongs to.
    pub session_id: SessionId,
    /// Per-session sequence number.
    pub seq: u64,
    /// The run it belongs to, if any.
    pub run_id: Option<RunId>,
    /// The event itself.
    pub payload: EventPayload,
    /// The whole envelope as JSON.
    pub json: String,
    /// When it was published.
    pub ts: DateTime<Utc>,
}

impl EventRecord {
    /// Serializes an envelope around `payload`: `seq`, `sessionId`, `runId` (when there is one),
    /// `ts`, then the payload's own fields, `type` first.
    pub fn build(
        session_id: SessionId,
        seq: u64,
        run_id: Option<RunId>,
        payload: EventPayload,
    ) -> Self {
        let ts = Utc::now();
        EventRecord {
            session_id,
            seq,
            run_id,
            json: envelope_json(session_id, seq, run_id, &ts, &payload),
            payload,
            ts,
        }
    }

    /// The event's `type` name.
    pub fn event_type(&self) -> &'static str {
        self.payload.type_name()
    }

    /// The event's `type`.
    pub fn kind(&self) -> EventType {
        self.payload.kind()
    }
}

/// Room for the envelope's own fields: the ids, seq and time.
const ENVELOPE_BYTES: usize = 160;

/// The envelope written directly, with the payload serialized once into the same buffer: every
/// event is built this way, and serde's `flatten` (an envelope struct around the payload) went
/// through a generic map serializer for each field. The text is the same, field for field.
fn envelope_json(
    session_id: SessionId,
    seq: u64,
    run_id: Option<RunId>,
    ts: &DateTime<Utc>,
    payload: &EventPayload,
) -> String {
    let hint = match payload {
        EventPayload::StreamDelta { delta } => delta.text.len() + 48,
        _ => 256,
    };
    let mut buf = Vec::with_capacity(ENVELOPE_BYTES + hint);
    // Writing into a Vec cannot fail.
    buf.extend_from_slice(b"{\"seq\":");
    buf.extend_from_slice(crate::decimal::digits(seq, &mut [0; 20]));
    buf.extend_from_slice(b",\"sessionId\":\"");
    push_uuid(&mut buf, &session_id.0);
    if let Some(run_id) = run_id {
        buf.extend_from_slice(b"\",\"runId\":\"");
        push_uuid(&mut buf, &run_id.0);
    }
    buf.extend_from_slice(b"\",\"ts\":\"");
    crate::timefmt::push_rfc3339_millis(&mut buf, ts);
    buf.push(b'"');
    // A delta, one per token, is written field by field: serde's map serializer costs a few
    // thousand instructions per event for these four fields. The text is the same as serde's.
    if let EventPayload::StreamDelta { delta } = payload
        && delta.signature.is_none()
    {
        buf.extend_from_slice(match delta.kind {
            DeltaKind::Text => b",\"type\":\"streamDelta\",\"delta\":{\"kind\":\"text\",\"text\":",
            DeltaKind::Thinking => {
                b",\"type\":\"streamDelta\",\"delta\":{\"kind\":\"thinking\",\"text\":"
            }
        });
        let escaped = serde_json::to_writer(&mut buf, &delta.text).is_ok();
        buf.extend_from_slice(b"}}");
        if escaped && let Ok(json) = String::from_utf8(buf) {
            return json;
        }
        return fallback_json(session_id, seq, payload);
    }
    // The payload is an internally tagged object, `{"type":...}`: its opening brace becomes the
    // comma that joins its fields to the envelope's.
    let at = buf.len();
    let joined = serde_json::to_writer(&mut buf, payload).is_ok() && buf[at..].starts_with(b"{\"");
    if joined {
        buf[at] = b',';
        if let Ok(json) = String::from_utf8(buf) {
            return json;
        }
    }
    fallback_json(session_id, seq, payload)
}

/// An error event in place of one that could not be serialized: serializing plain data cannot
/// fail, but the log stays valid anyway.
fn fallback_json(session_id: SessionId, seq: u64, payload: &EventPayload) -> String {
    format!(
        "{{\"seq\":{seq},\"sessionId\":\"{session_id}\",\"type\":\"error\",\"error\":{{\"code\":\"internal\",\"message\":\"event {} could not be serialized\"}}}}",
        payload.type_name()
    )
}

fn push_uuid(buf: &mut Vec<u8>, id: &uuid::Uuid) {
    let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
    buf.extend_from_slice(id.hyphenated().encode_lower(&mut text).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ContentBlock, FinishReason, Message, Role};
    use chrono::SecondsFormat;

    /// The envelope as serde writes it, which [`envelope_json`] must match.
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Envelope<'a> {
        seq: u64,
        session_id: SessionId,
        #[serde(skip_serializing_if = "Option::is_none")]
        run_id: Option<RunId>,
        ts: String,
        #[serde(flatten)]
        payload: &'a EventPayload,
    }

    fn payloads() -> Vec<EventPayload> {
        vec![
            EventPayload::StreamDelta {
                delta: Delta {
                    kind: DeltaKind::Text,
                    text: "tok0 \"quoted\"\n\u{1}é😀".into(),
                    signature: None,
                },
            },
            EventPayload::StreamDelta {
                delta: Delta {
                    kind: DeltaKind::Thinking,
                    text: String::new(),
                    signature: Some("sig".into()),
                },
            },
            EventPayload::StreamDelta {
                delta: Delta {
                    kind: DeltaKind::Thinking,
                    text: "why\t\\ \u{7f}".into(),
                    signature: None,
                },
            },
            EventPayload::SessionCreated {},
            EventPayload::Init {
                system_info: serde_json::json!({"engine": "chat", "n": [1, 2.5, null]}),
            },
            EventPayload::UserMessage {
                message: Message::new(
                    SessionId::new(),
                    Some(RunId::new()),
                    None,
                    Role::User,
                    vec![ContentBlock::Text { text: "hi".into() }],
                ),
            },
            EventPayload::Complete {
                finish_reason: FinishReason::Stop,
            },
            EventPayload::Processing {
                message: "working".into(),
            },
            EventPayload::Reset { from_seq: 7 },
        ]
    }

    #[test]
    fn the_envelope_is_written_as_serde_would_write_it() {
        let session_id = SessionId::new();
        for payload in payloads() {
            for run_id in [None, Some(RunId::new())] {
                let e = EventRecord::build(session_id, 42, run_id, payload.clone());
                let expected = serde_json::to_string(&Envelope {
                    seq: 42,
                    session_id,
                    run_id,
                    ts: e.ts.to_rfc3339_opts(SecondsFormat::Millis, true),
                    payload: &payload,
                })
                .unwrap();
                assert_eq!(e.json, expected);
                assert_eq!(e.event_type(), payload.type_name());
                assert_eq!(e.payload, payload);
                let back: EventEnvelope = serde_json::from_str(&e.json).unwrap();
                assert_eq!(back.seq, Some(42));
                assert_eq!((back.session_id, back.run_id), (session_id, run_id));
                assert_eq!(back.payload, payload);
            }
        }
    }

    #[test]
    fn a_payloads_type_is_its_json_type_and_reads_back_from_its_name() {
        for payload in payloads() {
            let json = serde_json::to_value(&payload).unwrap();
            let kind = payload.kind();
            assert_eq!(json["type"], kind.as_str());
            assert_eq!(EventType::from_name(kind.as_str()), Some(kind));
        }
        assert_eq!(EventType::from_name("Complete"), None);
        assert_eq!(EventType::from_name(""), None);
    }
}
