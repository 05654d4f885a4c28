//! Wire-format encoders for the OpenAI Chat Completions and Anthropic Messages APIs.

use bytes::{Bytes, BytesMut};
use serde_json::{Value, json};

use crate::behavior::fragments;

/// Signature sent for every thinking block.
pub const SIGNATURE: &str = "sig-mock";
/// OpenAI completion id.
pub const OPENAI_ID: &str = "chatcmpl-mock";
/// Anthropic message id.
pub const ANTHROPIC_ID: &str = "msg_mock";

/// Which provider dialect a request speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAI Chat Completions.
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
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

/// What the mock answers, independent of dialect.
#[derive(Clone, Debug, Default)]
pub struct Content {
    /// Thinking chunks.
    pub thinking: Vec<String>,
    /// Text chunks.
    pub text: Vec<String>,
    /// Tool calls after the text.
    pub tools: Vec<ToolCall>,
    /// Finish reason override (either dialect's vocabulary).
    pub finish: Option<String>,
    /// Cut the stream after this many text chunks.
    pub cut: Option<(usize, Cut)>,
}

impl Content {
    /// Completion/output token count reported in usage.
    pub fn completion_tokens(&self) -> u64 {
        (self.thinking.len() + self.text.len() + self.tools.len()) as u64
    }

    fn openai_finish(&self) -> String {
        match self.finish.as_deref() {
            Some("end_turn") => "stop".into(),
            Some("tool_use") => "tool_calls".into(),
            Some("max_tokens") => "length".into(),
            Some(other) => other.into(),
            None if self.tools.is_empty() => "stop".into(),
            None => "tool_calls".into(),
        }
    }

    fn anthropic_stop(&self) -> String {
        match self.finish.as_deref() {
            Some("stop") => "end_turn".into(),
            Some("tool_calls") => "tool_use".into(),
            Some("length") => "max_tokens".into(),
            Some(other) => other.into(),
            None if self.tools.is_empty() => "end_turn".into(),
            None => "tool_use".into(),
        }
    }

    fn tool_id(&self, dialect: Dialect, i: usize) -> String {
        match self.tools.get(i).and_then(|t| t.id.clone()) {
            Some(id) => id,
            None if dialect == Dialect::OpenAi => format!("call_mock_{i}"),
            None => format!("toolu_mock_{i}"),
        }
    }
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

// ---------------------------------------------------------------- OpenAI

fn oa_chunk(model: &str, created: u64, delta: Value, finish: Value) -> Bytes {
    data_frame(&json!({
        "id": OPENAI_ID,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }))
}

fn oa_cut(b: &mut Builder, cut: Cut) -> End {
    match cut {
        Cut::Drop => End::Drop,
        Cut::Stall => End::Stall,
        Cut::Error => {
            b.push(
                data_frame(&json!({"error": {
                    "message": "mock mid-stream error (error_after)",
                    "type": "server_error",
                    "code": null,
                }})),
                false,
            );
            End::Complete
        }
    }
}

/// Build the OpenAI streaming body.
pub fn openai_stream(
    c: &Content,
    model: &str,
    created: u64,
    include_usage: bool,
    prompt_tokens: u64,
) -> Plan {
    let mut b = Builder {
        frames: Vec::with_capacity(c.thinking.len() + c.text.len() + 6),
    };
    b.push(
        oa_chunk(
            model,
            created,
            json!({"role": "assistant", "content": ""}),
            Value::Null,
        ),
        false,
    );
    for t in &c.thinking {
        b.push(
            oa_chunk(model, created, json!({"reasoning_content": t}), Value::Null),
            true,
        );
    }
    for (i, t) in c.text.iter().enumerate() {
        if let Some((k, cut)) = c.cut
            && k == i
        {
            let end = oa_cut(&mut b, cut);
            return Plan {
                frames: b.frames,
                end,
            };
        }
        b.push(
            oa_chunk(model, created, json!({"content": t}), Value::Null),
            true,
        );
    }
    if let Some((k, cut)) = c.cut
        && k >= c.text.len()
    {
        let end = oa_cut(&mut b, cut);
        return Plan {
            frames: b.frames,
            end,
        };
    }
    for (i, tc) in c.tools.iter().enumerate() {
        b.push(
            oa_chunk(
                model,
                created,
                json!({"tool_calls": [{
                    "index": i,
                    "id": c.tool_id(Dialect::OpenAi, i),
                    "type": "function",
                    "function": {"name": tc.name, "arguments": ""},
                }]}),
                Value::Null,
            ),
            false,
        );
        for frag in fragments(&tc.arguments) {
            b.push(
                oa_chunk(
                    model,
                    created,
                    json!({"tool_calls": [{"index": i, "function": {"arguments": frag}}]}),
                    Value::Null,
                ),
                false,
            );
        }
    }
    b.push(
        oa_chunk(model, created, json!({}), Value::String(c.openai_finish())),
        false,
    );
    if include_usage {
        let ct = c.completion_tokens();
        b.push(
            data_frame(&json!({
                "id": OPENAI_ID,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": ct,
                    "total_tokens": prompt_tokens + ct,
                },
            })),
            false,
        );
    }
    b.push(Bytes::from_static(b"data: [DONE]\n\n"), false);
    Plan {
        frames: b.frames,
        end: End::Complete,
    }
}

/// Build the OpenAI non-streaming response object.
pub fn openai_message(c: &Content, model: &str, created: u64, prompt_tokens: u64) -> Value {
    let text = c.text.concat();
    let mut message = json!({
        "role": "assistant",
        "content": if text.is_empty() && !c.tools.is_empty() { Value::Null } else { Value::String(text) },
    });
    if !c.thinking.is_empty() {
        message["reasoning_content"] = Value::String(c.thinking.concat());
    }
    if !c.tools.is_empty() {
        message["tool_calls"] = c
            .tools
            .iter()
            .enumerate()
            .map(|(i, tc)| {
                json!({
                    "id": c.tool_id(Dialect::OpenAi, i),
                    "type": "function",
                    "function": {"name": tc.name, "arguments": tc.arguments},
                })
            })
            .collect();
    }
    let ct = c.completion_tokens();
    json!({
        "id": OPENAI_ID,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": c.openai_finish(),
        }],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": ct,
            "total_tokens": prompt_tokens + ct,
        },
    })
}

/// OpenAI-shaped error body.
pub fn openai_error(status: u16, message: &str) -> Value {
    let kind = match status {
        429 => "rate_limit_error",
        401 => "authentication_error",
        400..=499 => "invalid_request_error",
        _ => "server_error",
    };
    json!({"error": {"message": message, "type": kind, "code": null}})
}

// ---------------------------------------------------------------- Anthropic

fn an_cut(b: &mut Builder, cut: Cut) -> End {
    match cut {
        Cut::Drop => End::Drop,
        Cut::Stall => End::Stall,
        Cut::Error => {
            b.push(
                event_frame(
                    "error",
                    &json!({"type": "error", "error": {
                        "type": "overloaded_error",
                        "message": "Overloaded (mock mid-stream error, error_after)",
                    }}),
                ),
                false,
            );
            End::Complete
        }
    }
}

fn an_block_stop(b: &mut Builder, index: usize) {
    b.push(
        event_frame(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ),
        false,
    );
}

/// Build the Anthropic streaming body.
pub fn anthropic_stream(c: &Content, model: &str, input_tokens: u64) -> Plan {
    let mut b = Builder {
        frames: Vec::with_capacity(c.thinking.len() + c.text.len() + 12),
    };
    b.push(
        event_frame(
            "message_start",
            &json!({"type": "message_start", "message": {
                "id": ANTHROPIC_ID,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": null,
                "stop_sequence": null,
                "usage": {"input_tokens": input_tokens, "output_tokens": 1},
            }}),
        ),
        false,
    );
    b.push(event_frame("ping", &json!({"type": "ping"})), false);
    let mut index = 0usize;
    if !c.thinking.is_empty() {
        b.push(
            event_frame(
                "content_block_start",
                &json!({"type": "content_block_start", "index": index,
                        "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
            ),
            false,
        );
        for t in &c.thinking {
            b.push(
                event_frame(
                    "content_block_delta",
                    &json!({"type": "content_block_delta", "index": index,
                            "delta": {"type": "thinking_delta", "thinking": t}}),
                ),
                true,
            );
        }
        b.push(
            event_frame(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "signature_delta", "signature": SIGNATURE}}),
            ),
            false,
        );
        an_block_stop(&mut b, index);
        index += 1;
    }
    if !c.text.is_empty() {
        for (i, t) in c.text.iter().enumerate() {
            if let Some((k, cut)) = c.cut
                && k == i
            {
                let end = an_cut(&mut b, cut);
                return Plan {
                    frames: b.frames,
                    end,
                };
            }
            if i == 0 {
                b.push(
                    event_frame(
                        "content_block_start",
                        &json!({"type": "content_block_start", "index": index,
                                "content_block": {"type": "text", "text": ""}}),
                    ),
                    false,
                );
            }
            b.push(
                event_frame(
                    "content_block_delta",
                    &json!({"type": "content_block_delta", "index": index,
                            "delta": {"type": "text_delta", "text": t}}),
                ),
                true,
            );
        }
        if let Some((k, cut)) = c.cut
            && k >= c.text.len()
        {
            let end = an_cut(&mut b, cut);
            return Plan {
                frames: b.frames,
                end,
            };
        }
        an_block_stop(&mut b, index);
        index += 1;
    } else if let Some((_, cut)) = c.cut {
        let end = an_cut(&mut b, cut);
        return Plan {
            frames: b.frames,
            end,
        };
    }
    for (i, tc) in c.tools.iter().enumerate() {
        b.push(
            event_frame(
                "content_block_start",
                &json!({"type": "content_block_start", "index": index,
                        "content_block": {"type": "tool_use", "id": c.tool_id(Dialect::Anthropic, i),
                                          "name": tc.name, "input": {}}}),
            ),
            false,
        );
        for frag in fragments(&tc.arguments) {
            b.push(
                event_frame(
                    "content_block_delta",
                    &json!({"type": "content_block_delta", "index": index,
                            "delta": {"type": "input_json_delta", "partial_json": frag}}),
                ),
                false,
            );
        }
        an_block_stop(&mut b, index);
        index += 1;
    }
    b.push(
        event_frame(
            "message_delta",
            &json!({"type": "message_delta",
                    "delta": {"stop_reason": c.anthropic_stop(), "stop_sequence": null},
                    "usage": {"output_tokens": c.completion_tokens()}}),
        ),
        false,
    );
    b.push(
        event_frame("message_stop", &json!({"type": "message_stop"})),
        false,
    );
    Plan {
        frames: b.frames,
        end: End::Complete,
    }
}

/// Build the Anthropic non-streaming message object.
pub fn anthropic_message(c: &Content, model: &str, input_tokens: u64) -> Value {
    let mut content = Vec::new();
    if !c.thinking.is_empty() {
        content.push(
            json!({"type": "thinking", "thinking": c.thinking.concat(), "signature": SIGNATURE}),
        );
    }
    if !c.text.is_empty() {
        content.push(json!({"type": "text", "text": c.text.concat()}));
    }
    for (i, tc) in c.tools.iter().enumerate() {
        // Malformed arguments are passed through as a raw string so clients notice.
        let input = serde_json::from_str::<Value>(&tc.arguments)
            .unwrap_or_else(|_| Value::String(tc.arguments.clone()));
        content.push(
            json!({"type": "tool_use", "id": c.tool_id(Dialect::Anthropic, i),
                            "name": tc.name, "input": input}),
        );
    }
    json!({
        "id": ANTHROPIC_ID,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": c.anthropic_stop(),
        "stop_sequence": null,
        "usage": {"input_tokens": input_tokens, "output_tokens": c.completion_tokens()},
    })
}

/// Anthropic-shaped error body.
pub fn anthropic_error(status: u16, message: &str) -> Value {
    let kind = match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        400..=499 => "invalid_request_error",
        _ => "api_error",
    };
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

/// Provider-shaped error body for `dialect`.
pub fn error_body(dialect: Dialect, status: u16, message: &str) -> Value {
    match dialect {
        Dialect::OpenAi => openai_error(status, message),
        Dialect::Anthropic => anthropic_error(status, message),
    }
}

// ---------------------------------------------------------------- request inspection

fn count_words_in_content(v: &Value) -> u64 {
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

/// Prompt/input token estimate: whitespace-separated words in all message texts
/// (system included), at least 1.
pub fn prompt_tokens(body: &Value) -> u64 {
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
    n.max(1)
}

fn content_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            let parts: Vec<&str> = items
                .iter()
                .filter(|p| p.get("type").and_then(Value::as_str).unwrap_or("text") == "text")
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect();
            parts.join(" ")
        }
        _ => String::new(),
    }
}

/// Text of the last `role: "user"` message (empty if none).
pub fn last_user_text(body: &Value) -> String {
    body.get("messages")
        .and_then(Value::as_array)
        .and_then(|ms| {
            ms.iter()
                .rev()
                .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        })
        .and_then(|m| m.get("content"))
        .map(content_text)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
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
        assert_eq!(prompt_tokens(&body), 2 + 3 + 1 + 2);
        assert_eq!(prompt_tokens(&json!({})), 1);
        let oa = json!({"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": [{"type": "text", "text": "hi you"}]}]});
        assert_eq!(prompt_tokens(&oa), 3);
        assert_eq!(last_user_text(&oa), "hi you");
    }

    #[test]
    fn coalesce_keeps_bytes() {
        let c = Content {
            text: vec!["a ".into(), "b".into()],
            ..Default::default()
        };
        let p = openai_stream(&c, "m", 1, true, 1);
        let all: Vec<u8> = p.frames.iter().flat_map(|f| f.bytes.to_vec()).collect();
        let q = p.coalesce(1 << 16);
        assert_eq!(q.frames.len(), 1);
        assert_eq!(q.frames[0].bytes.to_vec(), all);
    }
}
