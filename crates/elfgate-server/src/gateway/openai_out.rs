//! The run's items → OpenAI chat completion answers: one `chat.completion` object, or
//! `chat.completion.chunk` SSE frames ending with `[DONE]`.

use super::Stop;
use super::error::openai_body;
use super::run::Out;
use crate::error::ApiError;
use elfgate_llm::wire::openai::Usage;
use serde_json::{Value, json};

/// OpenAI's finish reason.
pub fn finish_reason(stop: Stop) -> &'static str {
    match stop {
        Stop::End => "stop",
        Stop::Length => "length",
        Stop::ToolCalls => "tool_calls",
    }
}

/// The usage object, with the call's cost (`cost_usd`, Elfgate's own key) when it is priced.
fn usage(input: u64, output: u64, cost_usd: Option<f64>) -> Value {
    let mut u = json!(Usage::of(input, output));
    if let (Some(cost), Some(o)) = (cost_usd, u.as_object_mut()) {
        o.insert("cost_usd".into(), json!(cost));
    }
    u
}

fn tool_call_json(index: usize, id: &str, name: &str, input: &Value) -> Value {
    let arguments = match input {
        Value::String(s) => s.clone(),
        v => v.to_string(),
    };
    json!({"index": index, "id": id, "type": "function",
           "function": {"name": name, "arguments": arguments}})
}

/// The non-streaming answer.
pub fn completion(id: &str, model: &str, created: i64, items: &[Out], end: &Out) -> Value {
    let mut text = String::new();
    let mut thinking = String::new();
    let mut calls = Vec::new();
    for item in items {
        match item {
            Out::Text(t) => text.push_str(t),
            Out::Thinking(t) => thinking.push_str(t),
            Out::ToolCall { id, name, input } => {
                let mut c = tool_call_json(calls.len(), id, name, input);
                if let Some(o) = c.as_object_mut() {
                    o.remove("index");
                }
                calls.push(c);
            }
            _ => {}
        }
    }
    let (stop, input, output) = end.end_parts();
    let mut message = json!({
        "role": "assistant",
        "content": if text.is_empty() && !calls.is_empty() { Value::Null } else { json!(text) },
        "refusal": null,
    });
    if !calls.is_empty() {
        message["tool_calls"] = json!(calls);
    }
    if !thinking.is_empty() {
        message["reasoning_content"] = json!(thinking);
    }
    json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason(stop),
                     "logprobs": null}],
        "usage": usage(input, output, end.cost_usd()),
    })
}

/// Writes the run's items as `chat.completion.chunk` frames.
pub struct ChunkWriter {
    id: String,
    model: String,
    created: i64,
    include_usage: bool,
    /// Tool calls sent so far.
    calls: usize,
    /// Whether the first chunk (with the role) went out.
    started: bool,
    /// What follows a chunk's delta: the rest of its choice and the fields every chunk repeats.
    /// A text piece is one chunk, so its frame is this tail behind the piece's own JSON instead
    /// of a `Value` built and serialized for each.
    tail: String,
}

impl ChunkWriter {
    /// A writer for completion `id` of `model`, created at `created` (Unix seconds).
    pub fn new(id: String, model: String, created: i64, include_usage: bool) -> Self {
        let rest = json!({"created": created, "id": id, "model": model,
                          "object": "chat.completion.chunk"})
        .to_string();
        // The same text serde writes for the whole chunk (its keys sorted): the choice's other
        // fields, then the chunk's own after `"choices":[...]`.
        let tail = format!(
            ",\"finish_reason\":null,\"index\":0,\"logprobs\":null}}],{}\n\n",
            &rest[1..]
        );
        ChunkWriter {
            id,
            model,
            created,
            include_usage,
            calls: 0,
            started: false,
            tail,
        }
    }

    /// The non-streaming answer of the same completion.
    pub fn completion(&self, items: &[Out], end: &Out) -> Value {
        completion(&self.id, &self.model, self.created, items, end)
    }

    fn chunk(&self, delta: Value, finish: Option<&str>) -> String {
        let c = json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": null}],
        });
        format!("data: {c}\n\n")
    }

    /// The frame of a delta with one string field, `{"KEY": text}`, written directly.
    fn piece(&self, key: &str, text: &str) -> String {
        let mut v = Vec::with_capacity(48 + key.len() + text.len() + self.tail.len());
        v.extend_from_slice(b"data: {\"choices\":[{\"delta\":{\"");
        v.extend_from_slice(key.as_bytes());
        v.extend_from_slice(b"\":");
        // Writing a string into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut v, text);
        v.push(b'}');
        v.extend_from_slice(self.tail.as_bytes());
        String::from_utf8(v).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }

    fn push_piece(&self, s: &mut String, key: &str, text: &str) {
        let p = self.piece(key, text);
        if s.is_empty() {
            *s = p;
        } else {
            s.push_str(&p);
        }
    }

    /// The frames of one item.
    pub fn frames(&mut self, item: &Out) -> String {
        let mut s = String::new();
        if !self.started {
            self.started = true;
            s.push_str(&self.chunk(json!({"role": "assistant", "content": ""}), None));
        }
        match item {
            Out::Text(t) => self.push_piece(&mut s, "content", t),
            Out::Thinking(t) => self.push_piece(&mut s, "reasoning_content", t),
            Out::Signature(_) => {}
            Out::ToolCall { id, name, input } => {
                let call = tool_call_json(self.calls, id, name, input);
                self.calls += 1;
                s.push_str(&self.chunk(json!({"tool_calls": [call]}), None));
            }
            Out::Error(e) => {
                let e = openai_body(&ApiError::Upstream(e.clone()));
                s.push_str(&format!("data: {e}\n\n"));
            }
            Out::End {
                stop,
                input_tokens,
                output_tokens,
                cost_usd,
                ..
            } => {
                s.push_str(&self.chunk(json!({}), Some(finish_reason(*stop))));
                if self.include_usage {
                    let c = json!({
                        "id": self.id, "object": "chat.completion.chunk", "created": self.created,
                        "model": self.model, "choices": [],
                        "usage": usage(*input_tokens, *output_tokens, *cost_usd),
                    });
                    s.push_str(&format!("data: {c}\n\n"));
                }
                s.push_str("data: [DONE]\n\n");
            }
        }
        s
    }
}
