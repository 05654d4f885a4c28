//! Wire-format encoders, one module per provider format. The formats share one plan of what
//! to say ([`Content`]) and differ only in how they frame it.

pub(crate) mod anthropic;
pub(crate) mod gemini;
mod openai_chat;
pub(crate) mod responses;

use bytes::{Bytes, BytesMut};
use serde_json::Value;

/// Signature sent for every thinking block.
pub const SIGNATURE: &str = "sig-mock";

/// Prompt-cache counters of one reply (cache.rs works them out).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheUse {
    /// Prompt tokens read from the cache.
    pub read: u64,
    /// Prompt tokens written to the cache.
    pub write: u64,
}

/// The provider wire format a request speaks; recorded with each request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Format {
    /// OpenAI Chat Completions (`POST /v1/chat/completions`).
    #[serde(rename = "openai-chat")]
    OpenAiChat,
    /// Anthropic Messages (`POST /v1/messages`).
    #[serde(rename = "anthropic")]
    Anthropic,
    /// OpenAI Responses (`POST /v1/responses`).
    #[serde(rename = "openai-responses")]
    OpenAiResponses,
    /// Gemini API (`POST /v1beta/models/{model}:generateContent` and `:streamGenerateContent`).
    #[serde(rename = "gemini")]
    Gemini,
}

/// A tool call to emit.
#[derive(Clone, Debug)]
pub struct ToolCall {
    /// Explicit id, or a generated one.
    pub id: Option<String>,
    /// Tool name.
    pub name: String,
    /// Raw JSON argument text (may be malformed on purpose).
    pub arguments: String,
}

/// How a stream is cut short.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// Abort the connection.
    Drop,
    /// Send nothing more, forever.
    Stall,
    /// Send a provider-shaped mid-stream error, then end.
    Error,
}

/// What the mock answers, independent of format.
#[derive(Clone, Debug, Default)]
pub struct Content {
    /// Thinking chunks.
    pub thinking: Vec<String>,
    /// Text chunks.
    pub text: Vec<String>,
    /// Tool calls after the text.
    pub tools: Vec<ToolCall>,
    /// Finish reason override (any format's vocabulary).
    pub finish: Option<String>,
    /// Cut the stream after this many text chunks.
    pub cut: Option<(usize, Cut)>,
    /// The request's stop sequence the text was cut at (see [`Content::stop_at`]).
    pub stop_sequence: Option<String>,
    /// The query of the provider's own web search, run before the text (Anthropic).
    pub server_search: Option<String>,
}

impl Content {
    /// Completion/output token count reported in usage.
    pub fn completion_tokens(&self) -> u64 {
        (self.thinking.len() + self.text.len() + self.tools.len()) as u64
    }

    /// The text chunks streamed before the cut (all of them without one), and the cut.
    fn text_before_cut(&self) -> (&[String], Option<Cut>) {
        match self.cut {
            Some((k, cut)) => (&self.text[..k.min(self.text.len())], Some(cut)),
            None => (&self.text, None),
        }
    }

    /// Ends the text just before the first place where one of `stops` occurs, as a model does
    /// when it writes a stop sequence (the sequence itself is not sent), and drops the tool calls
    /// that would have followed. Only Anthropic's wire format reports which sequence it was; the
    /// others report a natural stop.
    pub fn stop_at(&mut self, stops: &[String]) {
        let joined = self.text.concat();
        let Some((at, seq)) = stops
            .iter()
            .filter(|s| !s.is_empty())
            .filter_map(|s| joined.find(s.as_str()).map(|at| (at, s)))
            .min_by_key(|(at, _)| *at)
        else {
            return;
        };
        let mut kept = Vec::new();
        let mut len = 0;
        for chunk in &self.text {
            if len + chunk.len() <= at {
                kept.push(chunk.clone());
                len += chunk.len();
                continue;
            }
            let head = &chunk[..at - len];
            if !head.is_empty() {
                kept.push(head.to_string());
            }
            break;
        }
        self.text = kept;
        self.tools.clear();
        self.finish = None;
        self.stop_sequence = Some(seq.clone());
    }

    fn openai_finish(&self) -> String {
        match self.finish.as_deref() {
            Some("end_turn" | "STOP") => "stop".into(),
            Some("tool_use") => "tool_calls".into(),
            Some("max_tokens" | "MAX_TOKENS") => "length".into(),
            Some(other) => other.into(),
            None if self.tools.is_empty() => "stop".into(),
            None => "tool_calls".into(),
        }
    }

    fn anthropic_stop(&self) -> String {
        if self.stop_sequence.is_some() {
            return "stop_sequence".into();
        }
        match self.finish.as_deref() {
            Some("stop" | "STOP") => "end_turn".into(),
            Some("tool_calls") => "tool_use".into(),
            Some("length" | "MAX_TOKENS") => "max_tokens".into(),
            Some(other) => other.into(),
            None if self.tools.is_empty() => "end_turn".into(),
            None => "tool_use".into(),
        }
    }

    /// The id of tool call `i`: the scripted one, or `<prefix><i>`.
    fn tool_id(&self, prefix: &str, i: usize) -> String {
        match self.tools.get(i).and_then(|t| t.id.clone()) {
            Some(id) => id,
            None => format!("{prefix}{i}"),
        }
    }
}

/// Per-request facts every encoder needs besides the [`Content`].
#[derive(Clone, Copy, Debug)]
pub struct Reply<'a> {
    /// The model string, echoed back.
    pub model: &'a str,
    /// Unix seconds.
    pub created: u64,
    /// Prompt/input token estimate (cached tokens included).
    pub prompt_tokens: u64,
    /// Prompt-cache counters.
    pub cache: CacheUse,
    /// OpenAI Chat `stream_options.include_usage`.
    pub include_usage: bool,
    /// Responses API `include: ["reasoning.encrypted_content"]`.
    pub include_encrypted_reasoning: bool,
}

/// One piece of a streamed body.
#[derive(Debug)]
pub struct Frame {
    /// Encoded bytes.
    pub bytes: Bytes,
    /// Whether the configured per-token delay applies before this frame.
    pub delayed: bool,
}

/// How a stream ends after its frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// Finish the body normally.
    Complete,
    /// Abort the body with an error (truncated stream).
    Drop,
    /// Never finish.
    Stall,
}

/// A complete streaming plan.
#[derive(Debug)]
pub struct Plan {
    /// Frames in order.
    pub frames: Vec<Frame>,
    /// What happens after the frames.
    pub end: End,
}

impl Plan {
    /// Merge consecutive frames into chunks of up to `max` bytes (used when there is no delay).
    pub fn coalesce(self, max: usize) -> Self {
        let mut out = Vec::new();
        let mut buf = BytesMut::new();
        for f in self.frames {
            if !buf.is_empty() && buf.len() + f.bytes.len() > max {
                out.push(Frame {
                    bytes: buf.split().freeze(),
                    delayed: false,
                });
            }
            buf.extend_from_slice(&f.bytes);
        }
        if !buf.is_empty() {
            out.push(Frame {
                bytes: buf.freeze(),
                delayed: false,
            });
        }
        Self {
            frames: out,
            end: self.end,
        }
    }
}

fn data_frame(v: &Value) -> Bytes {
    let mut s = String::with_capacity(192);
    s.push_str("data: ");
    s.push_str(&v.to_string());
    s.push_str("\n\n");
    Bytes::from(s)
}

fn event_frame(event: &str, v: &Value) -> Bytes {
    let mut s = String::with_capacity(192);
    s.push_str("event: ");
    s.push_str(event);
    s.push_str("\ndata: ");
    s.push_str(&v.to_string());
    s.push_str("\n\n");
    Bytes::from(s)
}

struct Builder {
    frames: Vec<Frame>,
}

impl Builder {
    fn push(&mut self, bytes: Bytes, delayed: bool) {
        self.frames.push(Frame { bytes, delayed });
    }
}

/// The streamed body of a successful reply.
pub fn stream(format: Format, c: &Content, r: &Reply<'_>) -> Plan {
    match format {
        Format::OpenAiChat => openai_chat::stream(c, r),
        Format::Anthropic => anthropic::stream(c, r),
        Format::OpenAiResponses => responses::stream(c, r),
        Format::Gemini => gemini::stream(c, r),
    }
}

/// The one-piece (non-streamed) body of a successful reply.
pub fn message(format: Format, c: &Content, r: &Reply<'_>) -> Value {
    match format {
        Format::OpenAiChat => openai_chat::message(c, r),
        Format::Anthropic => anthropic::message(c, r),
        Format::OpenAiResponses => responses::message(c, r),
        Format::Gemini => gemini::message(c, r),
    }
}

/// Provider-shaped error body.
pub fn error_body(format: Format, status: u16, message: &str) -> Value {
    match format {
        Format::OpenAiChat | Format::OpenAiResponses => openai_chat::error(status, message),
        Format::Anthropic => anthropic::error(status, message),
        Format::Gemini => gemini::error(status, message),
    }
}

/// The error body a provider answers (with status 400) when the prompt, `tokens` long, is over
/// the model's context window of `limit` tokens, in each provider's real wording.
pub fn context_error(format: Format, limit: u64, tokens: u64) -> Value {
    match format {
        Format::OpenAiChat | Format::OpenAiResponses => serde_json::json!({"error": {
            "message": format!("This model's maximum context length is {limit} tokens. However, \
        your messages resulted in {tokens} tokens. Please reduce the length of the messages."),
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }}),
        Format::Anthropic => serde_json::json!({"type": "error", "error": {
            "type": "invalid_request_error",
            "message": format!("prompt is too long: {tokens} tokens > {limit} maximum"),
        }}),
        Format::Gemini => serde_json::json!({"error": {
            "code": 400,
            "message": format!("The input token count ({tokens}) exceeds the maximum number of \
        tokens allowed ({limit})."),
            "status": "INVALID_ARGUMENT",
        }}),
    }
}

/// HTTP status of a non-streamed `error_after` reply: what each provider answers when it is
/// overloaded.
pub fn error_after_status(format: Format) -> u16 {
    match format {
        Format::Anthropic => 529,
        Format::Gemini => 503,
        Format::OpenAiChat | Format::OpenAiResponses => 500,
    }
}

/// Prompt/input token estimate: whitespace-separated words in all message texts (system
/// included), at least 1.
pub fn prompt_tokens(format: Format, body: &Value) -> u64 {
    let n = match format {
        Format::OpenAiChat | Format::Anthropic => messages_prompt_words(body),
        Format::OpenAiResponses => responses::prompt_words(body),
        Format::Gemini => gemini::prompt_words(body),
    };
    n.max(1)
}

/// The stop sequences a request names: Chat Completions' `stop` (a string or a list),
/// Anthropic's `stop_sequences`, Gemini's `generationConfig.stopSequences`; the Responses API has
/// none.
pub fn stop_sequences(format: Format, body: &Value) -> Vec<String> {
    let field = match format {
        Format::OpenAiChat => body.get("stop"),
        Format::Anthropic => body.get("stop_sequences"),
        Format::Gemini => body.pointer("/generationConfig/stopSequences"),
        Format::OpenAiResponses => None,
    };
    match field {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    }
}

/// Text of the last user message (empty if none).
pub fn last_user_text(format: Format, body: &Value) -> String {
    match format {
        Format::OpenAiChat | Format::Anthropic => messages_last_user_text(body),
        Format::OpenAiResponses => responses::last_user_text(body),
        Format::Gemini => gemini::last_user_text(body),
    }
}

// ---------------------------------------------------------------- request inspection

pub(crate) fn count_words_in_content(v: &Value) -> u64 {
    match v {
        Value::String(s) => s.split_whitespace().count() as u64,
        Value::Array(items) => items.iter().map(count_words_in_content).sum(),
        Value::Object(map) => {
            let mut n = 0;
            if map.get("type").and_then(Value::as_str) == Some("thinking") {
                return 0;
            }
            if let Some(t) = map.get("text") {
                n += count_words_in_content(t);
            }
            // tool_result blocks carry their text under "content".
            if let Some(t) = map.get("content") {
                n += count_words_in_content(t);
            }
            n
        }
        _ => 0,
    }
}

/// Words in the system prompt and the `messages` of a Chat Completions or Anthropic body.
fn messages_prompt_words(body: &Value) -> u64 {
    let mut n = 0;
    if let Some(system) = body.get("system") {
        n += count_words_in_content(system);
    }
    if let Some(Value::Array(messages)) = body.get("messages") {
        for m in messages {
            if let Some(c) = m.get("content") {
                n += count_words_in_content(c);
            }
        }
    }
    n
}

/// The text parts of a message's `content` (a string is one part).
fn content_texts(v: &Value) -> Vec<&str> {
    match v {
        Value::String(s) => vec![s.as_str()],
        Value::Array(items) => items
            .iter()
            .filter(|p| p.get("type").and_then(Value::as_str).unwrap_or("text") == "text")
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => Vec::new(),
    }
}

/// The last text part of the first user message (walking from the last one) that has text.
/// The coding CLIs put their own context (environment, reminders) in earlier parts or
/// messages and the user's prompt last; tool results carry no text.
fn last_text_part<'a>(
    mut user_messages_newest_first: impl Iterator<Item = Vec<&'a str>>,
) -> String {
    user_messages_newest_first
        .find_map(|texts| texts.last().copied())
        .unwrap_or_default()
        .to_string()
}

/// The user's text of a Chat Completions or Anthropic body.
fn messages_last_user_text(body: &Value) -> String {
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    last_text_part(
        messages
            .iter()
            .rev()
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"))
            .map(|m| m.get("content").map(content_texts).unwrap_or_default()),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn prompt_counting() {
        let body = json!({
            "system": [{"type": "text", "text": "be nice"}],
            "messages": [
                {"role": "user", "content": "hello there world"},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "x y"}, {"type": "text", "text": "ok"}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "a b"}]},
            ]
        });
        assert_eq!(prompt_tokens(Format::Anthropic, &body), 2 + 3 + 1 + 2);
        assert_eq!(prompt_tokens(Format::Anthropic, &json!({})), 1);
        let oa = json!({"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": [{"type": "text", "text": "hi you"}]}]});
        assert_eq!(prompt_tokens(Format::OpenAiChat, &oa), 3);
        assert_eq!(last_user_text(Format::OpenAiChat, &oa), "hi you");
        // The prompt is the last text block; a later tool result has none.
        let claude = json!({"messages": [
            {"role": "user", "content": [{"type": "text", "text": "<system-reminder/>"}, {"type": "text", "text": "Say hello"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "Bash", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "hi"}]},
        ]});
        assert_eq!(last_user_text(Format::Anthropic, &claude), "Say hello");
    }

    #[test]
    fn stop_sequences_cut_the_text_before_the_first_match() {
        let mut c = Content {
            text: vec!["tok0 ".into(), "tok1 ".into(), "tok2 ".into()],
            tools: vec![ToolCall {
                id: None,
                name: "t".into(),
                arguments: "{}".into(),
            }],
            ..Default::default()
        };
        c.stop_at(&["tok2".into(), "1 t".into()]);
        assert_eq!(c.text, ["tok0 ", "tok"]);
        assert_eq!(c.stop_sequence.as_deref(), Some("1 t"));
        assert!(c.tools.is_empty());
        assert_eq!(c.anthropic_stop(), "stop_sequence");
        let mut unmatched = Content {
            text: vec!["a".into()],
            ..Default::default()
        };
        unmatched.stop_at(&["zz".into(), String::new()]);
        assert_eq!(unmatched.text, ["a"]);
        assert_eq!(unmatched.stop_sequence, None);
        assert_eq!(
            stop_sequences(Format::OpenAiChat, &json!({"stop": "END"})),
            ["END"]
        );
        assert_eq!(
            stop_sequences(Format::Anthropic, &json!({"stop_sequences": ["a", "b"]})),
            ["a", "b"]
        );
    }

    #[test]
    fn coalesce_keeps_bytes() {
        let c = Content {
            text: vec!["a ".into(), "b".into()],
            ..Default::default()
        };
        let r = Reply {
            model: "m",
            created: 1,
            prompt_tokens: 1,
            cache: Default::default(),
            include_usage: true,
            include_encrypted_reasoning: false,
        };
        let p = stream(Format::OpenAiChat, &c, &r);
        let all: Vec<u8> = p.frames.iter().flat_map(|f| f.bytes.to_vec()).collect();
        let q = p.coalesce(1 << 16);
        assert_eq!(q.frames.len(), 1);
        assert_eq!(q.frames[0].bytes.to_vec(), all);
    }
}
