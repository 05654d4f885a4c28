//! The run's items → Anthropic Messages answers: one `message` object, or the stream of
//! message_start, content_block_start/delta/stop, message_delta and message_stop events.

use super::Stop;
use super::error::anthropic_body;
use super::run::Out;
use crate::error::ApiError;
use elfgate_llm::wire::anthropic::Usage;
use serde_json::{Value, json};

/// Anthropic's stop reason; `stop_sequence` when the provider named the sequence it stopped at.
pub fn stop_reason(stop: Stop, sequence: Option<&str>) -> &'static str {
    match stop {
        Stop::End if sequence.is_some() => "stop_sequence",
        Stop::End => "end_turn",
        Stop::Length => "max_tokens",
        Stop::ToolCalls => "tool_use",
    }
}

/// The non-streaming answer.
pub fn message_json(id: &str, model: &str, items: &[Out], end: &Out) -> Value {
    let mut content: Vec<Value> = Vec::new();
    for item in items {
        match item {
            Out::Thinking(t) => match content.last_mut() {
                Some(last) if last["type"] == "thinking" => {
                    let joined = format!("{}{t}", last["thinking"].as_str().unwrap_or_default());
                    last["thinking"] = json!(joined);
                }
                _ => content.push(json!({"type": "thinking", "thinking": t, "signature": ""})),
            },
            Out::Signature(s) => {
                if let Some(b) = content.iter_mut().find(|b| b["type"] == "thinking") {
                    b["signature"] = json!(s);
                }
            }
            Out::Text(t) => match content.last_mut() {
                Some(last) if last["type"] == "text" => {
                    let joined = format!("{}{t}", last["text"].as_str().unwrap_or_default());
                    last["text"] = json!(joined);
                }
                _ => content.push(json!({"type": "text", "text": t})),
            },
            Out::ToolCall { id, name, input } => {
                content.push(json!({"type": "tool_use", "id": id, "name": name, "input": input}));
            }
            _ => {}
        }
    }
    let (stop, input, output) = end.end_parts();
    json!({
        "id": id, "type": "message", "role": "assistant", "model": model, "content": content,
        "stop_reason": stop_reason(stop, end.stop_sequence()),
        "stop_sequence": end.stop_sequence(),
        "usage": Usage::of(input, output),
    })
}

/// Writes the run's items as Messages stream events.
#[derive(Default)]
pub struct EventWriter {
    /// The message id.
    pub id: String,
    /// The model echoed.
    pub model: String,
    started: bool,
    /// The open block: its index and type.
    open: Option<(usize, &'static str)>,
    next_index: usize,
}

fn frame(event: &str, data: Value) -> String {
    format!("event: {event}\ndata: {data}\n\n")
}

impl EventWriter {
    /// A writer for message `id`.
    pub fn new(id: String, model: String) -> Self {
        EventWriter {
            id,
            model,
            ..Default::default()
        }
    }

    fn close(&mut self, s: &mut String) {
        if let Some((index, _)) = self.open.take() {
            s.push_str(&frame(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            ));
        }
    }

    fn open_block(&mut self, s: &mut String, kind: &'static str, block: Value) -> usize {
        if self.open.map(|(_, k)| k) == Some(kind) && kind != "tool_use" {
            return self.open.map_or(0, |(i, _)| i);
        }
        self.close(s);
        let index = self.next_index;
        self.next_index += 1;
        self.open = Some((index, kind));
        s.push_str(&frame(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": block}),
        ));
        index
    }

    fn delta(s: &mut String, index: usize, delta: Value) {
        s.push_str(&frame(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index, "delta": delta}),
        ));
    }

    /// The frames of one item.
    pub fn frames(&mut self, item: &Out) -> String {
        let mut s = String::new();
        if !self.started {
            self.started = true;
            s.push_str(&frame(
                "message_start",
                json!({"type": "message_start", "message": {
                    "id": self.id, "type": "message", "role": "assistant", "model": self.model,
                    "content": [], "stop_reason": null, "stop_sequence": null,
                    "usage": Usage::of(0, 0)}}),
            ));
        }
        match item {
            Out::Thinking(t) => {
                let i = self.open_block(
                    &mut s,
                    "thinking",
                    json!({"type": "thinking", "thinking": "", "signature": ""}),
                );
                Self::delta(&mut s, i, json!({"type": "thinking_delta", "thinking": t}));
            }
            Out::Signature(sig) => {
                // The provider sends it when its reasoning ends, before the text: the block it
                // belongs to is still open then.
                if let Some((i, "thinking")) = self.open {
                    Self::delta(
                        &mut s,
                        i,
                        json!({"type": "signature_delta", "signature": sig}),
                    );
                }
            }
            Out::Text(t) => {
                let i = self.open_block(&mut s, "text", json!({"type": "text", "text": ""}));
                Self::delta(&mut s, i, json!({"type": "text_delta", "text": t}));
            }
            Out::ToolCall { id, name, input } => {
                let i = self.open_block(
                    &mut s,
                    "tool_use",
                    json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
                );
                Self::delta(
                    &mut s,
                    i,
                    json!({"type": "input_json_delta", "partial_json": input.to_string()}),
                );
            }
            Out::Error(e) => {
                self.close(&mut s);
                let e = anthropic_body(&ApiError::Upstream(e.clone()));
                s.push_str(&frame("error", e));
            }
            Out::End {
                stop,
                stop_sequence,
                input_tokens,
                output_tokens,
                ..
            } => {
                self.close(&mut s);
                let sequence = stop_sequence.as_deref();
                s.push_str(&frame(
                    "message_delta",
                    json!({"type": "message_delta",
                           "delta": {"stop_reason": stop_reason(*stop, sequence),
                                     "stop_sequence": sequence},
                           "usage": Usage::of(*input_tokens, *output_tokens)}),
                ));
                s.push_str(&frame("message_stop", json!({"type": "message_stop"})));
            }
        }
        s
    }
}
