//! Anthropic Messages client.

use crate::TokenUsage;
use crate::client::Wire;
use crate::http::{self, Decoder, EventQueue, Text};
use crate::signature;
use crate::text_template::TextTemplate;
use crate::{
    ContentBlock, LlmError, LlmEvent, LlmFinishReason, LlmRequest, ProviderKind, Role,
    ThinkingLevel, ToolChoice,
};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::borrow::Cow;
use std::collections::HashMap;

/// The API version header value.
const ANTHROPIC_VERSION: &str = "2023-06-01";
/// `max_tokens` when the request sets none (the API requires it).
const DEFAULT_MAX_TOKENS: u32 = 8192;

/// `POST {base_url}/v1/messages`, key as `x-api-key`.
pub(crate) struct AnthropicWire {
    url: String,
}

impl AnthropicWire {
    pub(crate) fn new(base_url: &str) -> Self {
        let base = base_url.trim_end_matches('/');
        // Tolerate a base URL that already includes the version segment.
        let url = if base.ends_with("/v1") {
            format!("{base}/messages")
        } else {
            format!("{base}/v1/messages")
        };
        AnthropicWire { url }
    }
}

impl Wire for AnthropicWire {
    const KIND: ProviderKind = ProviderKind::Anthropic;
    type Decoder = AnthropicDecoder;

    fn url(&self, _model: &str) -> Result<Cow<'_, str>, LlmError> {
        Ok(Cow::Borrowed(&self.url))
    }

    fn body(&self, req: &LlmRequest, model: &str) -> Value {
        build_body(req, model)
    }

    fn headers(&self, req: reqwest::RequestBuilder, key: Option<&str>) -> reqwest::RequestBuilder {
        let req = req.header("anthropic-version", ANTHROPIC_VERSION);
        match key {
            Some(key) => req.header("x-api-key", key),
            None => req,
        }
    }

    fn decoder(&self) -> AnthropicDecoder {
        AnthropicDecoder::default()
    }
}

/// The thinking budget for a level, if thinking is enabled.
fn thinking_budget(level: ThinkingLevel) -> Option<u32> {
    match level {
        ThinkingLevel::None => None,
        ThinkingLevel::Low => Some(1024),
        ThinkingLevel::Medium => Some(4096),
        ThinkingLevel::High => Some(16384),
    }
}

/// Builds the JSON request body.
pub(crate) fn build_body(req: &LlmRequest, model: &str) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), Value::String(model.to_string()));
    let budget = thinking_budget(req.thinking);
    let mut max_tokens = req.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS).max(1);
    if let Some(b) = budget
        && max_tokens <= b
    {
        // The budget counts against max_tokens; keep room for the answer.
        max_tokens = max_tokens.saturating_add(b);
    }
    body.insert("max_tokens".into(), json!(max_tokens));

    let mut system = req.system.clone().unwrap_or_default();
    // The stable prefix must be cut before anything is appended to the system text.
    let prefix_len = Some(req.cache_prefix_len)
        .filter(|n| *n > 0 && *n <= system.len() && system.is_char_boundary(*n))
        .unwrap_or(0);
    for m in req.messages.iter().filter(|m| m.role == Role::System) {
        for b in &m.blocks {
            if let ContentBlock::Text { text } = b
                && !text.is_empty()
            {
                if !system.is_empty() {
                    system.push_str("\n\n");
                }
                system.push_str(text);
            }
        }
    }
    if prefix_len > 0 {
        body.insert("system".into(), system_blocks(&system, prefix_len));
    } else if !system.is_empty() {
        body.insert("system".into(), Value::String(system));
    }
    body.insert("messages".into(), Value::Array(map_messages(req)));
    if let Some(t) = req.temperature
        && budget.is_none()
    {
        body.insert("temperature".into(), json!(t));
    }
    body.insert("stream".into(), Value::Bool(true));
    if !req.tools.is_empty() {
        let tools = req
            .tools
            .iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "description": t.description,
                    "input_schema": t.input_schema,
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = &req.tool_choice {
        let choice = match choice {
            ToolChoice::Auto => json!({"type": "auto"}),
            ToolChoice::None => json!({"type": "none"}),
            ToolChoice::Required => json!({"type": "any"}),
            ToolChoice::Tool(name) => json!({"type": "tool", "name": name}),
        };
        body.insert("tool_choice".into(), choice);
    }
    if !req.stop.is_empty() {
        body.insert("stop_sequences".into(), json!(req.stop));
    }
    if let Some(b) = budget {
        body.insert(
            "thinking".into(),
            json!({ "type": "enabled", "budget_tokens": b }),
        );
    }
    if let Some((ProviderKind::Anthropic, fields)) = &req.passthrough {
        for (k, v) in fields {
            body.insert(k.clone(), v.clone());
        }
    }
    Value::Object(body)
}

/// The system prompt as text blocks: the stable prefix first, marked with `cache_control` so that
/// the provider caches everything up to it (tools and prefix), then the rest, which may change
/// from call to call.
fn system_blocks(system: &str, prefix_len: usize) -> Value {
    let (prefix, rest) = system.split_at(prefix_len);
    let mut blocks = vec![json!({
        "type": "text",
        "text": prefix,
        "cache_control": {"type": "ephemeral"},
    })];
    if !rest.is_empty() {
        blocks.push(json!({ "type": "text", "text": rest }));
    }
    Value::Array(blocks)
}

/// A tool_use input as the object the API requires. Raw (string) input that
/// parses as a JSON object is used as such; anything else becomes `{}`.
fn tool_input(input: &Value) -> Value {
    match input {
        Value::Object(_) => input.clone(),
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(v @ Value::Object(_)) => v,
            _ => json!({}),
        },
        _ => json!({}),
    }
}

fn map_block(block: &ContentBlock, role: Role) -> Option<Value> {
    match block {
        ContentBlock::Text { text } if !text.is_empty() => {
            Some(json!({ "type": "text", "text": text }))
        }
        ContentBlock::Text { .. } => None,
        ContentBlock::Image {
            media_type,
            data,
            url,
        } if role != Role::Assistant => match (data, url) {
            (Some(d), _) => Some(json!({
                "type": "image",
                "source": { "type": "base64", "media_type": media_type, "data": d },
            })),
            (None, Some(u)) => Some(json!({
                "type": "image",
                "source": { "type": "url", "url": u },
            })),
            (None, None) => None,
        },
        ContentBlock::Image { .. } => None,
        // Only a signature Anthropic made: it verifies them.
        ContentBlock::Thinking {
            thinking,
            signature: Some(sig),
        } if role == Role::Assistant => signature::for_kind(ProviderKind::Anthropic, sig)
            .map(|sig| json!({ "type": "thinking", "thinking": thinking, "signature": sig })),
        ContentBlock::Thinking { .. } => None,
        ContentBlock::ToolUse { id, name, input } if role == Role::Assistant => Some(json!({
            "type": "tool_use", "id": id, "name": name, "input": tool_input(input),
        })),
        ContentBlock::ToolUse { .. } => None,
        ContentBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
        } if role != Role::Assistant => Some(json!({
            "type": "tool_result", "tool_use_id": tool_use_id, "content": content, "is_error": is_error,
        })),
        ContentBlock::ToolResult { .. } => None,
    }
}

/// Maps the conversation to Messages API messages: tool results become user
/// messages and consecutive same-role messages are merged.
pub(crate) fn map_messages(req: &LlmRequest) -> Vec<Value> {
    let mut merged: Vec<(&'static str, Vec<Value>)> = Vec::with_capacity(req.messages.len());
    for msg in &req.messages {
        let role = match msg.role {
            Role::System => continue, // folded into the system prompt
            Role::User | Role::Tool => "user",
            Role::Assistant => "assistant",
        };
        let blocks: Vec<Value> = msg
            .blocks
            .iter()
            .filter_map(|b| map_block(b, msg.role))
            .collect();
        if blocks.is_empty() {
            continue;
        }
        match merged.last_mut() {
            Some((r, existing)) if *r == role => existing.extend(blocks),
            _ => merged.push((role, blocks)),
        }
    }
    merged
        .into_iter()
        .map(|(role, mut blocks)| {
            if role == "user" {
                // The API wants tool_result blocks before any other user content.
                blocks
                    .sort_by_key(|b| b.get("type").and_then(Value::as_str) != Some("tool_result"));
            }
            json!({ "role": role, "content": blocks })
        })
        .collect()
}

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    message: Option<MessageStart>,
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    content_block: Option<BlockStart>,
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default)]
    usage: Option<UsageBody>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct MessageStart {
    #[serde(default)]
    usage: Option<UsageBody>,
}

#[derive(Deserialize)]
struct UsageBody {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

impl UsageBody {
    /// All prompt tokens, cached or not.
    fn total_input(&self) -> Option<u64> {
        let parts = [
            self.input_tokens,
            self.cache_creation_input_tokens,
            self.cache_read_input_tokens,
        ];
        if parts.iter().all(Option::is_none) {
            return None;
        }
        Some(parts.iter().map(|p| p.unwrap_or(0)).sum())
    }
}

#[derive(Deserialize)]
struct BlockStart {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    thinking: Option<String>,
    #[serde(default)]
    input: Option<Value>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Text<'a>>,
    // Borrowed (`http::Text`): a delta is parsed per token; its text is copied once, into the
    // queued delta.
    #[serde(default, borrow)]
    text: Option<Text<'a>>,
    #[serde(default, borrow)]
    thinking: Option<Text<'a>>,
    #[serde(default)]
    signature: Option<String>,
    #[serde(default, borrow)]
    partial_json: Option<Text<'a>>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    stop_sequence: Option<String>,
}

struct PendingToolUse {
    id: String,
    name: String,
    json: String,
    /// Input given in full at block start (non-streaming proxies).
    initial_input: Option<Value>,
}

/// Decodes Messages API stream events.
#[derive(Default)]
pub(crate) struct AnthropicDecoder {
    input_tokens: u64,
    cache_read_tokens: u64,
    cache_write_tokens: u64,
    tools: HashMap<usize, PendingToolUse>,
    /// The last text or thinking delta written without escapes, against which the next ones are
    /// read (`true`: thinking).
    delta_template: TextTemplate<bool>,
}

fn stop_reason(s: &str) -> LlmFinishReason {
    match s {
        "end_turn" | "stop_sequence" => LlmFinishReason::Stop,
        "max_tokens" => LlmFinishReason::Length,
        "tool_use" => LlmFinishReason::ToolCalls,
        "refusal" => LlmFinishReason::ContentFilter,
        other => LlmFinishReason::Other(other.to_string()),
    }
}

impl AnthropicDecoder {
    /// Keeps a delta event whose text serde borrowed (written without escapes) as the template
    /// for the next ones; forgets the old template otherwise.
    fn learn_delta(&mut self, data: &str, text: &Text<'_>, thinking: bool) {
        match &text.0 {
            Cow::Borrowed(t) => self.delta_template.learn(data, t, thinking),
            Cow::Owned(_) => self.delta_template.forget(),
        }
    }

    /// Keeps the prompt figures of `message_start`, or of a `message_delta` that repeats them
    /// (zeros there do not erase what `message_start` said).
    fn note_usage(&mut self, u: &UsageBody) {
        if let Some(n) = u.total_input().filter(|n| *n > 0) {
            self.input_tokens = n;
        }
        if let Some(n) = u.cache_read_input_tokens.filter(|n| *n > 0) {
            self.cache_read_tokens = n;
        }
        if let Some(n) = u.cache_creation_input_tokens.filter(|n| *n > 0) {
            self.cache_write_tokens = n;
        }
    }
}

impl Decoder for AnthropicDecoder {
    fn on_event(
        &mut self,
        _event: &str,
        data: &str,
        out: &mut EventQueue,
    ) -> Result<bool, LlmError> {
        if let Some((thinking, text)) = self.delta_template.matching(data) {
            http::push_delta(out, thinking, Text(Cow::Borrowed(text)));
            return Ok(false);
        }
        let ev: Event<'_> = serde_json::from_str(data)
            .map_err(|e| LlmError::Protocol(format!("invalid event JSON: {e}")))?;
        match ev.kind.as_ref() {
            "message_start" => {
                if let Some(u) = ev.message.and_then(|m| m.usage) {
                    self.note_usage(&u);
                    // The prompt's figures are known now: reported at once, so that a call cut
                    // before message_delta (an interrupt, a dropped stream) still counts them.
                    // Output 0: not reported yet (message_start's is a placeholder), so that the
                    // streamed text is counted instead if the call never gets further.
                    if self.input_tokens > 0 {
                        out.push_back(Ok(LlmEvent::Usage(TokenUsage {
                            input_tokens: self.input_tokens,
                            output_tokens: 0,
                            cache_read_tokens: self.cache_read_tokens,
                            cache_write_tokens: self.cache_write_tokens,
                        })));
                    }
                }
            }
            "content_block_start" => {
                let (Some(index), Some(block)) = (ev.index, ev.content_block) else {
                    return Err(LlmError::Protocol(
                        "content_block_start without index or block".into(),
                    ));
                };
                match block.kind.as_str() {
                    "tool_use" | "server_tool_use" => {
                        self.tools.insert(
                            index,
                            PendingToolUse {
                                id: block.id.unwrap_or_default(),
                                name: block.name.unwrap_or_default(),
                                json: String::new(),
                                initial_input: block.input,
                            },
                        );
                    }
                    "text" => {
                        if let Some(t) = block.text {
                            http::push_delta(out, false, Text(t.into()));
                        }
                    }
                    "thinking" => {
                        if let Some(t) = block.thinking {
                            http::push_delta(out, true, Text(t.into()));
                        }
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let Some(delta) = ev.delta else {
                    return Ok(false);
                };
                match delta.kind.as_ref().map(|k| k.0.as_ref()) {
                    Some("text_delta") => {
                        if let Some(t) = delta.text {
                            self.learn_delta(data, &t, false);
                            http::push_delta(out, false, t);
                        }
                    }
                    Some("thinking_delta") => {
                        if let Some(t) = delta.thinking {
                            self.learn_delta(data, &t, true);
                            http::push_delta(out, true, t);
                        }
                    }
                    Some("signature_delta") => {
                        if let Some(s) = delta.signature {
                            out.push_back(Ok(LlmEvent::ThinkingSignature(s)));
                        }
                    }
                    Some("input_json_delta") => {
                        if let (Some(index), Some(part)) = (ev.index, delta.partial_json)
                            && let Some(tool) = self.tools.get_mut(&index)
                        {
                            tool.json.push_str(&part.0);
                        }
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                if let Some(tool) = ev.index.and_then(|i| self.tools.remove(&i)) {
                    let arguments = if !tool.json.is_empty() {
                        tool.json
                    } else {
                        match tool.initial_input {
                            Some(Value::Object(o)) if !o.is_empty() => Value::Object(o).to_string(),
                            _ => "{}".to_string(),
                        }
                    };
                    out.push_back(Ok(LlmEvent::ToolCall {
                        id: tool.id,
                        name: tool.name,
                        arguments,
                    }));
                }
            }
            "message_delta" => {
                if let Some(d) = ev.delta
                    && let Some(reason) = d.stop_reason
                {
                    let finish = match d.stop_sequence {
                        Some(seq) if reason == "stop_sequence" => {
                            LlmFinishReason::StopSequence(seq)
                        }
                        _ => stop_reason(&reason),
                    };
                    out.push_back(Ok(LlmEvent::Finish(finish)));
                }
                if let Some(u) = ev.usage {
                    self.note_usage(&u);
                    if let Some(output) = u.output_tokens {
                        out.push_back(Ok(LlmEvent::Usage(TokenUsage {
                            input_tokens: self.input_tokens,
                            output_tokens: output,
                            cache_read_tokens: self.cache_read_tokens,
                            cache_write_tokens: self.cache_write_tokens,
                        })));
                    }
                }
            }
            "message_stop" => return Ok(true),
            "error" => {
                let message = ev
                    .error
                    .as_ref()
                    .and_then(|e| http::message_from_json(&json!({ "error": e })))
                    .unwrap_or_else(|| "unknown error".to_string());
                return Err(LlmError::Upstream(message));
            }
            _ => {} // ping and future event types
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LlmMessage, ToolSpec};
    use std::collections::VecDeque;

    #[test]
    fn only_anthropic_signatures_go_back_to_anthropic() {
        let thinking = |sig: String| ContentBlock::Thinking {
            thinking: "hmm".into(),
            signature: Some(sig),
        };
        assert_eq!(
            map_block(&thinking("EqQB".into()), Role::Assistant),
            Some(json!({"type": "thinking", "thinking": "hmm", "signature": "EqQB"}))
        );
        for foreign in [ProviderKind::Gemini, ProviderKind::OpenaiResponses] {
            let block = thinking(signature::tag(foreign, "EqQB"));
            assert_eq!(map_block(&block, Role::Assistant), None, "{foreign:?}");
        }
    }

    #[test]
    fn body_mapping() {
        let req = LlmRequest {
            model: "claude-x".into(),
            system: Some("sys".into()),
            cache_prefix_len: 0,
            messages: vec![
                LlmMessage {
                    role: Role::User,
                    blocks: vec![
                        ContentBlock::text("hi"),
                        ContentBlock::Image {
                            media_type: "image/png".into(),
                            data: Some("AAAA".into()),
                            url: None,
                        },
                    ],
                },
                LlmMessage {
                    role: Role::User,
                    blocks: vec![ContentBlock::Image {
                        media_type: "image/png".into(),
                        data: None,
                        url: Some("https://x/i.png".into()),
                    }],
                },
                LlmMessage {
                    role: Role::Assistant,
                    blocks: vec![
                        ContentBlock::Thinking {
                            thinking: "t".into(),
                            signature: Some("sig".into()),
                        },
                        ContentBlock::Thinking {
                            thinking: "unsigned".into(),
                            signature: None,
                        },
                        ContentBlock::text(""),
                        ContentBlock::ToolUse {
                            id: "tu1".into(),
                            name: "read".into(),
                            input: json!({"p": 1}),
                        },
                    ],
                },
                LlmMessage {
                    role: Role::Tool,
                    blocks: vec![ContentBlock::ToolResult {
                        tool_use_id: "tu1".into(),
                        content: "ok".into(),
                        is_error: false,
                    }],
                },
                LlmMessage {
                    role: Role::User,
                    blocks: vec![ContentBlock::text("next")],
                },
            ],
            temperature: Some(0.3),
            max_tokens: Some(2000),
            thinking: ThinkingLevel::Medium,
            tools: vec![ToolSpec {
                name: "read".into(),
                description: "reads".into(),
                input_schema: json!({"type": "object"}),
            }],
            ..Default::default()
        };
        let body = build_body(&req, "claude-x");
        let expected = json!({
            "model": "claude-x",
            "max_tokens": 6096,
            "system": "sys",
            "stream": true,
            "thinking": {"type": "enabled", "budget_tokens": 4096},
            "tools": [{"name": "read", "description": "reads", "input_schema": {"type": "object"}}],
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "hi"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
                    {"type": "image", "source": {"type": "url", "url": "https://x/i.png"}},
                ]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "t", "signature": "sig"},
                    {"type": "tool_use", "id": "tu1", "name": "read", "input": {"p": 1}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "tu1", "content": "ok", "is_error": false},
                    {"type": "text", "text": "next"},
                ]},
            ],
        });
        assert_eq!(body, expected);
    }

    #[test]
    fn defaults_without_thinking() {
        let req = LlmRequest {
            temperature: Some(0.5),
            messages: vec![LlmMessage {
                role: Role::User,
                blocks: vec![ContentBlock::text("x")],
            }],
            ..Default::default()
        };
        let body = build_body(&req, "m");
        assert_eq!(body["max_tokens"], json!(8192));
        assert_eq!(body["temperature"], json!(0.5));
        assert!(body.get("thinking").is_none());
        assert!(body.get("system").is_none());
        assert!(body.get("tools").is_none());
    }

    /// One decoder over a whole stream (its delta template learned, used and dropped) decodes
    /// each event as serde does, errors included.
    #[test]
    fn a_stream_read_against_its_delta_template_decodes_what_serde_decodes() {
        let delta = |index: u32, kind: &str, field: &str, text: &str| {
            format!(
                r#"{{"type":"content_block_delta","index":{index},"delta":{{"type":"{kind}","{field}":"{text}"}}}}"#
            )
        };
        let text = |t: &str| delta(1, "text_delta", "text", t);
        let frames = vec![
            r#"{"type":"message_start","message":{"id":"m","usage":{"input_tokens":12,"output_tokens":1}}}"#.to_string(),
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#.to_string(),
            delta(0, "thinking_delta", "thinking", "let me"),
            delta(0, "thinking_delta", "thinking", " think"),
            delta(0, "signature_delta", "signature", "SIG"),
            r#"{"type":"content_block_stop","index":0}"#.to_string(),
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#.to_string(),
            text("Hi"),
            text(" there"),
            text(""),
            text("é😀 naïve and a longer piece of text"),
            text(r"line\nbreak"),
            text(r#"a \"quote\""#),
            text(r"\u00e9 and \/"),
            text("tab	here"),
            text(r#"x"}}"#),
            text("again"),
            format!("{} x", text("garbage after")),
            text("again")[..30].to_string(),
            // The same bytes around another kind of text: not a text delta.
            delta(1, "text_delta", "partial_json", "p"),
            text("last"),
            r#"{"type":"content_block_stop","index":1}"#.to_string(),
            r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"tu","name":"read","input":{}}}"#.to_string(),
            delta(2, "input_json_delta", "partial_json", "{}"),
            r#"{"type":"content_block_stop","index":2}"#.to_string(),
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":7}}"#.to_string(),
            r#"{"type":"message_stop"}"#.to_string(),
        ];
        let (mut fast, mut slow) = (AnthropicDecoder::default(), AnthropicDecoder::default());
        let mut templated = 0;
        for f in &frames {
            templated += usize::from(fast.delta_template.matching(f).is_some());
            // The reference never reads against a template.
            slow.delta_template.forget();
            let (mut qf, mut qs) = (VecDeque::new(), VecDeque::new());
            let a = fast.on_event("", f, &mut qf).map_err(|e| e.to_string());
            let b = slow.on_event("", f, &mut qs).map_err(|e| e.to_string());
            assert_eq!(a, b, "{f}");
            assert_eq!(format!("{qf:?}"), format!("{qs:?}"), "{f}");
        }
        // " think", " there", "", the long one, "last" ("again" follows escapes and errors: it
        // is parsed and makes the template again).
        assert_eq!(templated, 5);
    }

    #[test]
    fn decodes_events() {
        let frames = [
            r#"{"type":"message_start","message":{"id":"m","usage":{"input_tokens":12,"output_tokens":1}}}"#,
            r#"{"type":"ping"}"#,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hm"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"SIG"}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi"}}"#,
            r#"{"type":"content_block_stop","index":1}"#,
            r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"tu","name":"read","input":{}}}"#,
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}"#,
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"1}"}}"#,
            r#"{"type":"content_block_stop","index":2}"#,
            r#"{"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"tv","name":"ls","input":{}}}"#,
            r#"{"type":"content_block_stop","index":3}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":7}}"#,
            r#"{"type":"message_stop"}"#,
        ];
        let mut d = AnthropicDecoder::default();
        let mut q = VecDeque::new();
        let mut done = false;
        for f in frames {
            done = d.on_event("", f, &mut q).unwrap();
        }
        assert!(done);
        let events: Vec<LlmEvent> = q.into_iter().map(|e| e.unwrap()).collect();
        assert_eq!(
            events,
            vec![
                // The prompt's figures at once, the output's when the message ends.
                LlmEvent::Usage(TokenUsage {
                    input_tokens: 12,
                    output_tokens: 0,
                    cache_read_tokens: 0,
                    cache_write_tokens: 0,
                }),
                LlmEvent::ThinkingDelta("hm".into()),
                LlmEvent::ThinkingSignature("SIG".into()),
                LlmEvent::TextDelta("Hi".into()),
                LlmEvent::ToolCall {
                    id: "tu".into(),
                    name: "read".into(),
                    arguments: "{\"a\":1}".into()
                },
                LlmEvent::ToolCall {
                    id: "tv".into(),
                    name: "ls".into(),
                    arguments: "{}".into()
                },
                LlmEvent::Finish(LlmFinishReason::ToolCalls),
                LlmEvent::Usage(TokenUsage {
                    input_tokens: 12,
                    output_tokens: 7,
                    cache_read_tokens: 0,
                    cache_write_tokens: 0,
                }),
            ]
        );
    }

    #[test]
    fn stable_prefix_is_a_cached_block() {
        let req = LlmRequest {
            system: Some("stable part\n\ndate: today".into()),
            cache_prefix_len: "stable part".len(),
            messages: vec![
                LlmMessage {
                    role: Role::System,
                    blocks: vec![ContentBlock::text("extra")],
                },
                LlmMessage {
                    role: Role::User,
                    blocks: vec![ContentBlock::text("x")],
                },
            ],
            ..Default::default()
        };
        let body = build_body(&req, "m");
        assert_eq!(
            body["system"],
            json!([
                {"type": "text", "text": "stable part", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "\n\ndate: today\n\nextra"},
            ])
        );
        // A length past the text (or inside a character) marks nothing.
        let req = LlmRequest {
            system: Some("é".into()),
            cache_prefix_len: 1,
            ..Default::default()
        };
        assert_eq!(build_body(&req, "m")["system"], json!("é"));
    }

    #[test]
    fn a_named_stop_sequence_is_kept() {
        let mut d = AnthropicDecoder::default();
        let mut q = VecDeque::new();
        for f in [
            r#"{"type":"message_delta","delta":{"stop_reason":"stop_sequence","stop_sequence":"END"},"usage":{}}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{}}"#,
        ] {
            d.on_event("", f, &mut q).unwrap();
        }
        let got: Vec<LlmEvent> = q.into_iter().map(|e| e.unwrap()).collect();
        assert_eq!(
            got,
            [
                LlmEvent::Finish(LlmFinishReason::StopSequence("END".into())),
                LlmEvent::Finish(LlmFinishReason::Stop),
            ]
        );
    }

    #[test]
    fn cache_counters() {
        let frames = [
            r#"{"type":"message_start","message":{"usage":{"input_tokens":5,"cache_creation_input_tokens":100,"cache_read_input_tokens":900,"output_tokens":1}}}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}"#,
        ];
        let mut d = AnthropicDecoder::default();
        let mut q = VecDeque::new();
        for f in frames {
            d.on_event("", f, &mut q).unwrap();
        }
        let usage = q.pop_back().unwrap().unwrap();
        assert_eq!(
            usage,
            LlmEvent::Usage(TokenUsage {
                input_tokens: 1005,
                output_tokens: 3,
                cache_read_tokens: 900,
                cache_write_tokens: 100,
            })
        );
    }

    #[test]
    fn error_event() {
        let mut d = AnthropicDecoder::default();
        let mut q = VecDeque::new();
        let err = d
            .on_event(
                "error",
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
                &mut q,
            )
            .unwrap_err();
        assert!(matches!(&err, LlmError::Upstream(m) if m.contains("Overloaded")));
        assert!(err.is_retryable());
    }
}
