//! OpenAI-compatible Chat Completions client.

use crate::TokenUsage;
use crate::client::Wire;
use crate::http::{self, Decoder, EventQueue, Text};
use crate::openai_fast;
use crate::{
    ContentBlock, LlmError, LlmEvent, LlmFinishReason, LlmRequest, ProviderKind, Role,
    ThinkingLevel, ToolChoice,
};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// `POST {base_url}/chat/completions`, key as `Authorization: Bearer`.
pub(crate) struct OpenAiWire {
    url: String,
}

impl OpenAiWire {
    pub(crate) fn new(base_url: &str) -> Self {
        let url = format!("{}/chat/completions", base_url.trim_end_matches('/'));
        OpenAiWire { url }
    }
}

impl Wire for OpenAiWire {
    const KIND: ProviderKind = ProviderKind::Openai;
    type Decoder = OpenAiDecoder;

    fn url(&self, _model: &str) -> Result<Cow<'_, str>, LlmError> {
        Ok(Cow::Borrowed(&self.url))
    }

    fn body(&self, req: &LlmRequest, model: &str) -> Value {
        build_body(req, model)
    }

    fn decoder(&self) -> OpenAiDecoder {
        OpenAiDecoder::default()
    }
}

/// Builds the JSON request body.
pub(crate) fn build_body(req: &LlmRequest, model: &str) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), Value::String(model.to_string()));
    body.insert("messages".into(), Value::Array(map_messages(req)));
    body.insert("stream".into(), Value::Bool(true));
    body.insert("stream_options".into(), json!({ "include_usage": true }));
    if let Some(t) = req.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(m) = req.max_tokens {
        body.insert("max_tokens".into(), json!(m));
    }
    if !req.tools.is_empty() {
        let tools = req
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.input_schema,
                    }
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = &req.tool_choice {
        let choice = match choice {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::None => json!("none"),
            ToolChoice::Required => json!("required"),
            ToolChoice::Tool(name) => json!({"type": "function", "function": {"name": name}}),
        };
        body.insert("tool_choice".into(), choice);
    }
    if !req.stop.is_empty() {
        body.insert("stop".into(), json!(req.stop));
    }
    if let Some(format) = &req.response_format {
        body.insert("response_format".into(), format.clone());
    }
    let effort = match req.thinking {
        ThinkingLevel::None => None,
        ThinkingLevel::Low => Some("low"),
        ThinkingLevel::Medium => Some("medium"),
        ThinkingLevel::High => Some("high"),
    };
    if let Some(effort) = effort {
        body.insert("reasoning_effort".into(), Value::String(effort.into()));
    }
    Value::Object(body)
}

fn joined_text(blocks: &[ContentBlock]) -> String {
    let mut out = String::new();
    for b in blocks {
        if let ContentBlock::Text { text } = b {
            if !out.is_empty() && !text.is_empty() {
                out.push('\n');
            }
            out.push_str(text);
        }
    }
    out
}

fn image_url(media_type: &str, data: Option<&str>, url: Option<&str>) -> Option<String> {
    match (data, url) {
        (Some(d), _) => Some(format!("data:{media_type};base64,{d}")),
        (None, Some(u)) => Some(u.to_string()),
        (None, None) => None,
    }
}

/// Tool-call arguments as the JSON string OpenAI expects. A string input is
/// taken to be raw (possibly malformed) argument text and passed through.
fn arguments_text(input: &Value) -> String {
    match input {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn push_tool_results(blocks: &[ContentBlock], out: &mut Vec<Value>) {
    for b in blocks {
        if let ContentBlock::ToolResult {
            tool_use_id,
            content,
            ..
        } = b
        {
            out.push(json!({ "role": "tool", "tool_call_id": tool_use_id, "content": content }));
        }
    }
}

/// Maps the system prompt and conversation to Chat Completions messages.
pub(crate) fn map_messages(req: &LlmRequest) -> Vec<Value> {
    let mut out = Vec::with_capacity(req.messages.len() + 1);
    if let Some(system) = req.system.as_deref().filter(|s| !s.is_empty()) {
        out.push(json!({ "role": "system", "content": system }));
    }
    for msg in &req.messages {
        match msg.role {
            Role::System => {
                let text = joined_text(&msg.blocks);
                if !text.is_empty() {
                    out.push(json!({ "role": "system", "content": text }));
                }
            }
            Role::Tool => push_tool_results(&msg.blocks, &mut out),
            Role::User => {
                // Tool results must directly follow the assistant's tool calls.
                push_tool_results(&msg.blocks, &mut out);
                let has_image = msg
                    .blocks
                    .iter()
                    .any(|b| matches!(b, ContentBlock::Image { .. }));
                if has_image {
                    let mut parts = Vec::new();
                    for b in &msg.blocks {
                        match b {
                            ContentBlock::Text { text } if !text.is_empty() => {
                                parts.push(json!({ "type": "text", "text": text }));
                            }
                            ContentBlock::Image {
                                media_type,
                                data,
                                url,
                            } => {
                                if let Some(u) =
                                    image_url(media_type, data.as_deref(), url.as_deref())
                                {
                                    parts.push(
                                        json!({ "type": "image_url", "image_url": { "url": u } }),
                                    );
                                }
                            }
                            _ => {}
                        }
                    }
                    out.push(json!({ "role": "user", "content": parts }));
                } else if msg
                    .blocks
                    .iter()
                    .any(|b| matches!(b, ContentBlock::Text { .. }))
                {
                    out.push(json!({ "role": "user", "content": joined_text(&msg.blocks) }));
                }
            }
            Role::Assistant => {
                let text = joined_text(&msg.blocks);
                let calls: Vec<Value> = msg
                    .blocks
                    .iter()
                    .filter_map(|b| match b {
                        ContentBlock::ToolUse { id, name, input } => Some(json!({
                            "id": id,
                            "type": "function",
                            "function": { "name": name, "arguments": arguments_text(input) },
                        })),
                        _ => None,
                    })
                    .collect();
                if text.is_empty() && calls.is_empty() {
                    continue;
                }
                let mut m = Map::new();
                m.insert("role".into(), Value::String("assistant".into()));
                m.insert(
                    "content".into(),
                    if text.is_empty() {
                        Value::Null
                    } else {
                        Value::String(text)
                    },
                );
                if !calls.is_empty() {
                    m.insert("tool_calls".into(), Value::Array(calls));
                }
                out.push(Value::Object(m));
                // Tool results stored on an assistant message still need answering.
                push_tool_results(&msg.blocks, &mut out);
            }
        }
    }
    out
}

// Text borrowed where it can be (`http::Text`): a chunk is parsed per token, and its text is
// copied once, into the queued delta. (A SmallVec for `choices` would save an allocation per
// chunk, but it deserializes more slowly; see docs/benchmarks.md.)
#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(default, borrow)]
    content: Option<Text<'a>>,
    #[serde(default, borrow)]
    reasoning_content: Option<Text<'a>>,
    #[serde(default, borrow)]
    reasoning: Option<Text<'a>>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Deserialize)]
struct ToolCallDelta {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    /// Prompt tokens served from the provider's cache (counted in `prompt_tokens` too).
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Default)]
struct PendingCall {
    id: String,
    name: String,
    arguments: String,
}

/// Decodes Chat Completions chunks.
#[derive(Default)]
pub(crate) struct OpenAiDecoder {
    calls: BTreeMap<usize, PendingCall>,
    /// The stream's last plain text chunk, against which the next ones are read.
    fast: openai_fast::Template,
}

impl OpenAiDecoder {
    fn flush_calls(&mut self, out: &mut EventQueue) {
        for (_, c) in std::mem::take(&mut self.calls) {
            out.push_back(Ok(LlmEvent::ToolCall {
                id: c.id,
                name: c.name,
                arguments: c.arguments,
            }));
        }
    }

    fn merge_call(&mut self, tc: ToolCallDelta) {
        let index = match tc.index {
            Some(i) => i,
            // No index: a new id starts a new call, otherwise continue the last one.
            None => match self.calls.last_key_value() {
                Some((&k, last)) if tc.id.as_deref().is_none_or(|id| id == last.id) => k,
                Some((&k, _)) => k + 1,
                None => 0,
            },
        };
        let entry = self.calls.entry(index).or_default();
        if let Some(id) = tc.id.filter(|s| !s.is_empty()) {
            entry.id = id;
        }
        if let Some(f) = tc.function {
            if let Some(name) = f.name.filter(|s| !s.is_empty()) {
                if entry.name.is_empty() {
                    entry.name = name;
                } else if entry.name != name {
                    entry.name.push_str(&name);
                }
            }
            if let Some(args) = f.arguments {
                entry.arguments.push_str(&args);
            }
        }
    }
}

fn finish_reason(s: &str) -> LlmFinishReason {
    match s {
        "stop" | "end_turn" => LlmFinishReason::Stop,
        "length" | "max_tokens" => LlmFinishReason::Length,
        "tool_calls" | "function_call" => LlmFinishReason::ToolCalls,
        "content_filter" => LlmFinishReason::ContentFilter,
        other => LlmFinishReason::Other(other.to_string()),
    }
}

impl Decoder for OpenAiDecoder {
    fn on_event(
        &mut self,
        _event: &str,
        data: &str,
        out: &mut EventQueue,
    ) -> Result<bool, LlmError> {
        let data = data.trim();
        if data == "[DONE]" {
            self.flush_calls(out);
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        match self.fast.read(data) {
            Some(chunk) => {
                self.on_fast_chunk(chunk, out);
                Ok(false)
            }
            None => self.on_chunk(data, out),
        }
    }
}

impl OpenAiDecoder {
    /// A chunk of the common shape (see [`openai_fast`]): what [`OpenAiDecoder::on_chunk`] does with
    /// the same chunk.
    fn on_fast_chunk(&mut self, chunk: openai_fast::FastChunk<'_>, out: &mut EventQueue) {
        let Some(choice) = chunk.choice else { return };
        if let Some(r) = choice.reasoning_content.or(choice.reasoning) {
            http::push_delta(out, true, Text(Cow::Borrowed(r)));
        }
        if let Some(c) = choice.content {
            http::push_delta(out, false, Text(Cow::Borrowed(c)));
        }
        if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
            self.flush_calls(out);
            out.push_back(Ok(LlmEvent::Finish(finish_reason(reason))));
        }
    }

    /// Any chunk, parsed with serde.
    fn on_chunk(&mut self, data: &str, out: &mut EventQueue) -> Result<bool, LlmError> {
        let chunk: Chunk<'_> = serde_json::from_str(data)
            .map_err(|e| LlmError::Protocol(format!("invalid chunk JSON: {e}")))?;
        if let Some(err) = chunk.error.filter(|e| !e.is_null()) {
            let message = http::message_from_json(&serde_json::json!({ "error": err }))
                .unwrap_or_else(|| "unknown error".to_string());
            return Err(LlmError::Upstream(message));
        }
        for choice in chunk.choices.into_iter().flatten() {
            if let Some(delta) = choice.delta {
                if let Some(r) = delta.reasoning_content.or(delta.reasoning) {
                    http::push_delta(out, true, r);
                }
                if let Some(c) = delta.content {
                    http::push_delta(out, false, c);
                }
                for tc in delta.tool_calls.into_iter().flatten() {
                    self.merge_call(tc);
                }
            }
            if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
                self.flush_calls(out);
                out.push_back(Ok(LlmEvent::Finish(finish_reason(&reason))));
            }
        }
        if let Some(u) = chunk.usage {
            out.push_back(Ok(LlmEvent::Usage(TokenUsage {
                input_tokens: u.prompt_tokens.unwrap_or(0),
                output_tokens: u.completion_tokens.unwrap_or(0),
                cache_read_tokens: u
                    .prompt_tokens_details
                    .and_then(|d| d.cached_tokens)
                    .unwrap_or(0),
                // OpenAI caches prefixes by itself and reports no writes.
                cache_write_tokens: 0,
            })));
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LlmMessage, ToolSpec};
    use std::collections::VecDeque;

    fn decode(frames: &[&str]) -> (Vec<Result<LlmEvent, LlmError>>, bool) {
        let mut d = OpenAiDecoder::default();
        let mut q = VecDeque::new();
        let mut done = false;
        for f in frames {
            match d.on_event("", f, &mut q) {
                Ok(true) => {
                    done = true;
                    break;
                }
                Ok(false) => {}
                Err(e) => {
                    q.push_back(Err(e));
                    break;
                }
            }
        }
        (q.into_iter().collect(), done)
    }

    #[test]
    fn the_fast_reader_decodes_what_serde_decodes() {
        let chunks = [
            r#"{"choices":[{"delta":{"content":"tok0 "},"finish_reason":null,"index":0}],"created":1,"id":"x","model":"m","object":"chat.completion.chunk"}"#,
            r#"{"id":"x","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}"#,
            r#"{"choices":[{"delta":{"reasoning_content":"think","reasoning":"other","content":"é😀"}}]}"#,
            r#"{"choices":[{"delta":{"reasoning_content":"","reasoning":"r"}}]}"#,
            r#"{"choices":[{"delta":{"reasoning_content":null,"reasoning":"r"}}]}"#,
            r#"{"choices":[{"delta":null,"finish_reason":"stop"}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"length"}],"usage":null,"error":null}"#,
            r#"{"choices":[{"delta":{},"finish_reason":""}]}"#,
            r#"{"choices":[{"finish_reason":"weird"}]}"#,
            r#"{"choices":null}"#,
            r#"{"choices":[]}"#,
            "{}",
            r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt","system_fingerprint":"fp","service_tier":"default","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"x"}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"Hi","extra":true,"n":1.5},"other":false}]}"#,
            " { \"choices\" : [ { \"delta\" : { \"content\" : \"a b\" } } ] , \"n\" : -0.5E-3 } ",
        ];
        for data in chunks {
            assert!(
                openai_fast::read(data.trim()).is_some(),
                "not read fast: {data}"
            );
            let (mut fast, mut slow) = (OpenAiDecoder::default(), OpenAiDecoder::default());
            let (mut qf, mut qs) = (VecDeque::new(), VecDeque::new());
            let f = fast.on_event("", data, &mut qf).map_err(|e| e.to_string());
            let s = slow
                .on_chunk(data.trim(), &mut qs)
                .map_err(|e| e.to_string());
            assert_eq!(f, s, "{data}");
            assert_eq!(format!("{qf:?}"), format!("{qs:?}"), "{data}");
        }
    }

    /// One decoder over a whole stream (the fast reader's template in use, learned and
    /// dropped along the way) decodes each chunk as serde does, errors included.
    #[test]
    fn a_stream_read_against_its_template_decodes_what_serde_decodes() {
        let tok = |created: u32, field: &str, text: &str| {
            format!(
                r#"{{"choices":[{{"delta":{{"{field}":"{text}"}},"finish_reason":null,"index":0}}],"created":{created},"id":"chatcmpl-1","model":"m","object":"chat.completion.chunk"}}"#
            )
        };
        let mut stream = vec![
            r#"{"choices":[{"delta":{"content":"","role":"assistant"},"finish_reason":null,"index":0}],"created":7,"id":"chatcmpl-1","model":"m","object":"chat.completion.chunk"}"#.to_string(),
            tok(7, "reasoning_content", "let me"),
            tok(7, "reasoning_content", " think"),
            tok(7, "reasoning", "other kind"),
            tok(7, "content", "tok0 "),
            tok(7, "content", "tok1 "),
            tok(7, "content", ""),
            tok(7, "content", "é😀 naïve"),
            tok(7, "content", "a long token that spans several words of eight bytes"),
            // Escapes and control characters: serde's.
            tok(7, "content", r"line\nbreak"),
            tok(7, "content", r#"a \"quote\""#),
            tok(7, "content", r"back\\slash"),
            tok(7, "content", r"\u00e9 and \/"),
            tok(7, "content", "tab	here"),
            // Not JSON once the text is put in: the error is serde's.
            tok(7, "content", r#"x"}}],"#),
            tok(7, "content", r#"x""#),
            tok(7, "content", "tok2 "),
            // The next second: a new template.
            tok(8, "content", "tok3 "),
            tok(8, "content", "tok4 "),
            // The same bytes around a text but trailing garbage, or cut short.
            format!("{} x", tok(8, "content", "tok5 ")),
            tok(8, "content", "tok6 ")[..40].to_string(),
            tok(8, "content", "tok7 "),
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{}"}}]},"finish_reason":null,"index":0}],"created":8,"id":"chatcmpl-1","model":"m","object":"chat.completion.chunk"}"#.to_string(),
            tok(8, "content", "tok8 "),
            r#"{"choices":[{"delta":{},"finish_reason":"stop","index":0}],"created":8,"id":"chatcmpl-1","model":"m","object":"chat.completion.chunk"}"#.to_string(),
        ];
        stream.push("[DONE]".into());
        let mut fast = OpenAiDecoder::default();
        let mut slow = OpenAiDecoder::default();
        let mut templated = 0;
        for data in &stream {
            templated += usize::from(fast.fast.matching(data).is_some());
            let (mut qf, mut qs) = (VecDeque::new(), VecDeque::new());
            let f = fast.on_event("", data, &mut qf).map_err(|e| e.to_string());
            let s = if data == "[DONE]" {
                slow.on_event("", data, &mut qs)
            } else {
                slow.on_chunk(data, &mut qs)
            }
            .map_err(|e| e.to_string());
            assert_eq!(f, s, "{data}");
            assert_eq!(format!("{qf:?}"), format!("{qs:?}"), "{data}");
        }
        // The plain tokens that follow one of the same kind and second were read against the
        // template: " think", tok1, "", é😀, the long one, tok2, tok4, tok7, tok8.
        assert_eq!(templated, 9);
    }

    #[test]
    fn body_mapping() {
        let req = LlmRequest {
            model: "gpt-x".into(),
            system: Some("be brief".into()),
            cache_prefix_len: 0,
            messages: vec![
                LlmMessage {
                    role: Role::User,
                    blocks: vec![ContentBlock::text("hi")],
                },
                LlmMessage {
                    role: Role::Assistant,
                    blocks: vec![
                        ContentBlock::Thinking {
                            thinking: "hmm".into(),
                            signature: None,
                        },
                        ContentBlock::text("calling"),
                        ContentBlock::ToolUse {
                            id: "c1".into(),
                            name: "read".into(),
                            input: json!({"path": "a"}),
                        },
                        ContentBlock::ToolUse {
                            id: "c2".into(),
                            name: "ls".into(),
                            input: json!({}),
                        },
                    ],
                },
                LlmMessage {
                    role: Role::Tool,
                    blocks: vec![
                        ContentBlock::ToolResult {
                            tool_use_id: "c1".into(),
                            content: "data".into(),
                            is_error: false,
                        },
                        ContentBlock::ToolResult {
                            tool_use_id: "c2".into(),
                            content: "denied".into(),
                            is_error: true,
                        },
                    ],
                },
                LlmMessage {
                    role: Role::User,
                    blocks: vec![
                        ContentBlock::text("look"),
                        ContentBlock::Image {
                            media_type: "image/png".into(),
                            data: Some("AAAA".into()),
                            url: None,
                        },
                        ContentBlock::Image {
                            media_type: "image/jpeg".into(),
                            data: None,
                            url: Some("https://x/y.jpg".into()),
                        },
                    ],
                },
            ],
            temperature: Some(0.5),
            max_tokens: Some(100),
            thinking: ThinkingLevel::Medium,
            tools: vec![ToolSpec {
                name: "read".into(),
                description: "reads".into(),
                input_schema: json!({"type": "object"}),
            }],
            ..Default::default()
        };
        let body = build_body(&req, "gpt-x");
        let expected = json!({
            "model": "gpt-x",
            "stream": true,
            "stream_options": {"include_usage": true},
            "temperature": 0.5,
            "max_tokens": 100,
            "reasoning_effort": "medium",
            "tools": [{"type": "function", "function": {"name": "read", "description": "reads", "parameters": {"type": "object"}}}],
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "calling", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a\"}"}},
                    {"id": "c2", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": "data"},
                {"role": "tool", "tool_call_id": "c2", "content": "denied"},
                {"role": "user", "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                    {"type": "image_url", "image_url": {"url": "https://x/y.jpg"}},
                ]},
            ],
        });
        assert_eq!(body, expected);
    }

    #[test]
    fn minimal_body_omits_optionals() {
        let req = LlmRequest {
            messages: vec![LlmMessage {
                role: Role::User,
                blocks: vec![ContentBlock::text("a"), ContentBlock::text("b")],
            }],
            ..Default::default()
        };
        let body = build_body(&req, "m");
        assert_eq!(
            body,
            json!({
                "model": "m", "stream": true, "stream_options": {"include_usage": true},
                "messages": [{"role": "user", "content": "a\nb"}],
            })
        );
    }

    #[test]
    fn chunk_text_is_borrowed_unless_escaped() {
        let c: Chunk<'_> = serde_json::from_str(
            r#"{"choices":[{"delta":{"content":"plain","reasoning":"a\nb"}}]}"#,
        )
        .unwrap();
        let choices = c.choices.unwrap();
        let delta = choices[0].delta.as_ref().unwrap();
        assert!(matches!(
            delta.content.as_ref().unwrap().0,
            Cow::Borrowed("plain")
        ));
        assert!(matches!(&delta.reasoning.as_ref().unwrap().0, Cow::Owned(s) if s == "a\nb"));
    }

    #[test]
    fn decodes_text_reasoning_tools_usage() {
        let (events, done) = decode(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":"think"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"reasoning":"ing"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"Hel"}}],"usage":null}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"lo \"q\"\n"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"b","type":"function","function":{"name":"ls","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"read","arguments":"{\"pa"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"th\":1}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":4}}}"#,
            "[DONE]",
            r#"{"choices":[{"delta":{"content":"ignored"}}]}"#,
        ]);
        assert!(done);
        let events: Vec<LlmEvent> = events.into_iter().map(|e| e.unwrap()).collect();
        assert_eq!(
            events,
            // Pieces decoded together (here: all of them) are queued as one delta per kind.
            vec![
                LlmEvent::ThinkingDelta("thinking".into()),
                LlmEvent::TextDelta("Hello \"q\"\n".into()),
                LlmEvent::ToolCall {
                    id: "a".into(),
                    name: "read".into(),
                    arguments: "{\"path\":1}".into()
                },
                LlmEvent::ToolCall {
                    id: "b".into(),
                    name: "ls".into(),
                    arguments: String::new()
                },
                LlmEvent::Finish(LlmFinishReason::ToolCalls),
                LlmEvent::Usage(TokenUsage {
                    input_tokens: 10,
                    output_tokens: 5,
                    cache_read_tokens: 4,
                    cache_write_tokens: 0,
                }),
            ]
        );
    }

    #[test]
    fn tool_calls_flushed_at_done_without_finish() {
        let (events, done) = decode(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"x","function":{"name":"f","arguments":"{}"}}]}}]}"#,
            "[DONE]",
        ]);
        assert!(done);
        assert_eq!(
            events.into_iter().map(|e| e.unwrap()).collect::<Vec<_>>(),
            vec![LlmEvent::ToolCall {
                id: "x".into(),
                name: "f".into(),
                arguments: "{}".into()
            }]
        );
    }

    #[test]
    fn error_frame_is_upstream_error() {
        let (events, done) = decode(&[
            r#"{"choices":[{"delta":{"content":"a"}}]}"#,
            r#"{"error":{"message":"server overloaded","type":"server_error"}}"#,
        ]);
        assert!(!done);
        assert!(
            matches!(&events[1], Err(LlmError::Upstream(m)) if m.contains("server overloaded"))
        );
        let (events, _) = decode(&["{not json"]);
        assert!(matches!(&events[0], Err(LlmError::Protocol(_))));
    }
}
