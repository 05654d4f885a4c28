//! Anthropic Messages → the internal form, and the run's items → a Messages answer (one JSON
//! object, or the message_start … message_stop event stream).

use super::body::Fields;
use super::error::GatewayError;
use super::openai_in::last_user_text;
use super::run::Out;
use super::{Inbound, Stop};
use elfgate_core::{ContentBlock, Role, ThinkingLevel};
use elfgate_llm::{LlmMessage, LlmRequest, ToolChoice, ToolSpec};
use serde_json::{Value, json};

fn bad(param: String, what: String) -> GatewayError {
    GatewayError::invalid(Some(param), what)
}

/// Parses a Messages body.
pub fn parse(body: &Value) -> Result<Inbound, GatewayError> {
    let f = Fields(body);
    let model = f.req_str("model")?.to_string();
    let raw = f.req_array("messages")?;
    let stream = f.bool("stream")?.unwrap_or(false);
    let system = match f.get("system") {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        // cache_control marks on system blocks are not carried by the internal form.
        Some(Value::Array(blocks)) => Some(
            blocks
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n\n"),
        ),
        Some(_) => {
            return Err(bad(
                "system".into(),
                "'system' must be a string or an array of text blocks".into(),
            ));
        }
    };
    let mut messages = Vec::new();
    let mut more_system = Vec::new();
    for (i, m) in raw.iter().enumerate() {
        message(i, m, &mut messages, &mut more_system)?;
    }
    let system = match (system, more_system.is_empty()) {
        (s, true) => s,
        (None, false) => Some(more_system.join("\n\n")),
        (Some(s), false) => Some(format!("{s}\n\n{}", more_system.join("\n\n"))),
    };
    let tools = f
        .array("tools")?
        .map(|ts| {
            ts.iter()
                .enumerate()
                .map(|(i, t)| {
                    Ok(ToolSpec {
                        name: t["name"]
                            .as_str()
                            .ok_or_else(|| {
                                bad(
                                    format!("tools.{i}.name"),
                                    format!("tools[{i}] needs 'name'"),
                                )
                            })?
                            .to_string(),
                        description: t["description"].as_str().unwrap_or_default().to_string(),
                        input_schema: t
                            .get("input_schema")
                            .cloned()
                            .unwrap_or_else(|| json!({"type": "object"})),
                    })
                })
                .collect::<Result<Vec<_>, GatewayError>>()
        })
        .transpose()?
        .unwrap_or_default();
    let tool_choice = match f.get("tool_choice") {
        None => None,
        Some(c) => Some(match c["type"].as_str() {
            Some("auto") => ToolChoice::Auto,
            Some("any") => ToolChoice::Required,
            Some("none") => ToolChoice::None,
            Some("tool") if c["name"].is_string() => {
                ToolChoice::Tool(c["name"].as_str().unwrap_or_default().to_string())
            }
            _ => {
                return Err(bad(
                    "tool_choice".into(),
                    "'tool_choice' must be {\"type\": \"auto\"|\"any\"|\"none\"|\"tool\"}".into(),
                ));
            }
        }),
    };
    let thinking = match f.get("thinking") {
        Some(t) if t["type"] == "enabled" => match t["budget_tokens"].as_u64().unwrap_or(0) {
            0..=4095 => ThinkingLevel::Low,
            4096..=16383 => ThinkingLevel::Medium,
            _ => ThinkingLevel::High,
        },
        _ => ThinkingLevel::default(),
    };
    let prompt = last_user_text(&messages);
    Ok(Inbound {
        model,
        request: LlmRequest {
            model: String::new(),
            system,
            messages,
            temperature: f.f32("temperature")?,
            max_tokens: f.u32("max_tokens")?,
            thinking,
            tools,
            tool_choice,
            stop: f.strings("stop_sequences")?,
            response_format: None,
        },
        prompt,
        stream,
    })
}

fn message(
    i: usize,
    m: &Value,
    out: &mut Vec<LlmMessage>,
    system: &mut Vec<String>,
) -> Result<(), GatewayError> {
    let role = match m["role"].as_str() {
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        // Some clients (claude-code among them) put system text among the messages.
        Some("system") => Role::System,
        _ => {
            return Err(bad(
                format!("messages.{i}.role"),
                format!("messages[{i}]: 'role' must be \"user\", \"assistant\" or \"system\""),
            ));
        }
    };
    let blocks: Vec<Value> = match &m["content"] {
        Value::String(s) => vec![json!({"type": "text", "text": s})],
        Value::Array(a) => a.clone(),
        _ => {
            return Err(bad(
                format!("messages.{i}.content"),
                format!("messages[{i}]: 'content' must be a string or an array of blocks"),
            ));
        }
    };
    let mut own = Vec::new();
    let mut results = Vec::new();
    for b in &blocks {
        match b["type"].as_str() {
            Some("text") => own.push(ContentBlock::text(b["text"].as_str().unwrap_or_default())),
            Some("image") => {
                let s = &b["source"];
                own.push(ContentBlock::Image {
                    media_type: s["media_type"].as_str().unwrap_or_default().to_string(),
                    data: s["data"].as_str().map(str::to_string),
                    url: s["url"].as_str().map(str::to_string),
                });
            }
            Some("thinking") => own.push(ContentBlock::Thinking {
                thinking: b["thinking"].as_str().unwrap_or_default().to_string(),
                signature: b["signature"].as_str().map(str::to_string),
            }),
            Some("tool_use") => own.push(ContentBlock::ToolUse {
                id: b["id"].as_str().unwrap_or_default().to_string(),
                name: b["name"].as_str().unwrap_or_default().to_string(),
                input: b["input"].clone(),
            }),
            Some("tool_result") => {
                let content = match &b["content"] {
                    Value::String(s) => s.clone(),
                    Value::Array(parts) => parts
                        .iter()
                        .filter_map(|p| p["text"].as_str())
                        .collect::<Vec<_>>()
                        .join("\n"),
                    _ => String::new(),
                };
                results.push(ContentBlock::ToolResult {
                    tool_use_id: b["tool_use_id"].as_str().unwrap_or_default().to_string(),
                    content,
                    is_error: b["is_error"].as_bool().unwrap_or(false),
                });
            }
            // redacted_thinking, documents and the like have no counterpart.
            _ => {}
        }
    }
    if role == Role::System {
        for b in own {
            if let ContentBlock::Text { text } = b {
                system.push(text);
            }
        }
        return Ok(());
    }
    if !results.is_empty() {
        out.push(LlmMessage {
            role: Role::Tool,
            blocks: results,
        });
    }
    if !own.is_empty() {
        out.push(LlmMessage { role, blocks: own });
    }
    Ok(())
}

/// Anthropic's stop reason.
pub fn stop_reason(stop: Stop) -> &'static str {
    match stop {
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
                content.push(json!({"type": "tool_use", "id": id, "name": name, "input": input}))
            }
            _ => {}
        }
    }
    let (stop, input, output) = end.end_parts();
    json!({
        "id": id, "type": "message", "role": "assistant", "model": model, "content": content,
        "stop_reason": stop_reason(stop), "stop_sequence": null,
        "usage": {"input_tokens": input, "output_tokens": output},
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
                    "usage": {"input_tokens": 0, "output_tokens": 0}}}),
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
                // Known only at the answer's end: sent if the reasoning block is still open.
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
            Out::Error { code, message } => {
                self.close(&mut s);
                let e = GatewayError::upstream(code, message.clone()).anthropic_body();
                s.push_str(&frame("error", e));
            }
            Out::End {
                stop,
                input_tokens,
                output_tokens,
            } => {
                self.close(&mut s);
                s.push_str(&frame(
                    "message_delta",
                    json!({"type": "message_delta",
                           "delta": {"stop_reason": stop_reason(*stop), "stop_sequence": null},
                           "usage": {"input_tokens": input_tokens,
                                     "output_tokens": output_tokens}}),
                ));
                s.push_str(&frame("message_stop", json!({"type": "message_stop"})));
            }
        }
        s
    }
}
