//! The run's items → OpenAI Responses answers: the `response` object, or the stream of
//! response.created … response.completed events. One builder serves both: it turns each item into
//! its stream events and keeps the output items the final object lists.

use super::Stop;
use super::run::Out;
use crate::error::ApiError;
use elfgate_llm::wire::responses::Usage;
use serde_json::{Value, json};

/// What the answer echoes of the request.
#[derive(Debug, Clone, Default)]
pub struct Echo {
    /// The model, as the caller named it.
    pub model: String,
    /// `previous_response_id`.
    pub previous_response_id: Option<String>,
    /// `store`.
    pub store: bool,
    /// Whether reasoning items carry `encrypted_content`.
    pub include_encrypted_reasoning: bool,
}

/// The output item being streamed.
enum Open {
    Reasoning { id: String, text: String },
    Message { id: String, text: String },
}

/// Builds a response from the run's items.
pub struct ResponseBuilder {
    id: String,
    created_at: i64,
    echo: Echo,
    seq: u64,
    started: bool,
    output: Vec<Value>,
    open: Option<Open>,
    next_item: usize,
    /// The answer's end, once seen: its status, and the object's usage.
    status: &'static str,
    usage: Value,
    error: Value,
}

impl ResponseBuilder {
    /// A builder for response `id`.
    pub fn new(id: String, echo: Echo) -> Self {
        ResponseBuilder {
            id,
            created_at: chrono::Utc::now().timestamp(),
            echo,
            seq: 0,
            started: false,
            output: Vec::new(),
            open: None,
            next_item: 0,
            status: "in_progress",
            usage: Value::Null,
            error: Value::Null,
        }
    }

    /// The response object as it stands.
    pub fn response(&self) -> Value {
        let incomplete =
            (self.status == "incomplete").then(|| json!({"reason": "max_output_tokens"}));
        let text: String = self
            .output
            .iter()
            .filter(|i| i["type"] == "message")
            .flat_map(|i| i["content"].as_array().cloned().unwrap_or_default())
            .filter_map(|c| c["text"].as_str().map(str::to_string))
            .collect();
        json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": self.status,
            "model": self.echo.model,
            "output": self.output,
            "output_text": text,
            "usage": self.usage,
            "error": self.error,
            "incomplete_details": incomplete,
            "instructions": null,
            "metadata": {},
            "parallel_tool_calls": true,
            "temperature": null,
            "top_p": null,
            "tool_choice": "auto",
            "tools": [],
            "text": {"format": {"type": "text"}},
            "reasoning": {"effort": null, "summary": null},
            "store": self.echo.store,
            "previous_response_id": self.echo.previous_response_id,
        })
    }

    fn event(&mut self, out: &mut String, kind: &str, mut data: Value) {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.seq);
        self.seq += 1;
        out.push_str(&format!("event: {kind}\ndata: {data}\n\n"));
    }

    fn item_id(&mut self, prefix: &str) -> String {
        let n = self.next_item;
        self.next_item += 1;
        format!("{prefix}_{}_{n}", self.id.trim_start_matches("resp_"))
    }

    /// Closes the open item: its `done` events, and it joins the output.
    fn close(&mut self, out: &mut String) {
        let Some(open) = self.open.take() else {
            return;
        };
        let index = self.output.len();
        let item = match open {
            Open::Reasoning { id, text } => {
                self.event(
                    out,
                    "response.reasoning_summary_text.done",
                    json!({"item_id": id, "output_index": index, "summary_index": 0, "text": text}),
                );
                self.event(
                    out,
                    "response.reasoning_summary_part.done",
                    json!({"item_id": id, "output_index": index, "summary_index": 0,
                           "part": {"type": "summary_text", "text": text}}),
                );
                json!({"id": id, "type": "reasoning",
                       "summary": [{"type": "summary_text", "text": text}]})
            }
            Open::Message { id, text } => {
                let part = json!({"type": "output_text", "text": text, "annotations": []});
                self.event(
                    out,
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0,
                           "text": text}),
                );
                self.event(
                    out,
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0,
                           "part": part}),
                );
                json!({"id": id, "type": "message", "status": "completed", "role": "assistant",
                       "content": [part]})
            }
        };
        self.event(
            out,
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
        self.output.push(item);
    }

    /// Adds a whole item (added, then done at once).
    fn whole_item(&mut self, out: &mut String, item: Value) {
        self.close(out);
        let index = self.output.len();
        self.event(
            out,
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
        );
        self.event(
            out,
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
        self.output.push(item);
    }

    /// The stream events of one item (the first item also opens the response).
    pub fn frames(&mut self, item: &Out) -> String {
        let mut s = String::new();
        if !self.started {
            self.started = true;
            let r = self.response();
            self.event(&mut s, "response.created", json!({"response": r}));
            self.event(&mut s, "response.in_progress", json!({"response": r}));
        }
        match item {
            Out::Thinking(t) => {
                if !matches!(self.open, Some(Open::Reasoning { .. })) {
                    self.close(&mut s);
                    let id = self.item_id("rs");
                    let index = self.output.len();
                    self.event(
                        &mut s,
                        "response.output_item.added",
                        json!({"output_index": index,
                               "item": {"id": id, "type": "reasoning", "summary": []}}),
                    );
                    self.event(
                        &mut s,
                        "response.reasoning_summary_part.added",
                        json!({"item_id": id, "output_index": index, "summary_index": 0,
                               "part": {"type": "summary_text", "text": ""}}),
                    );
                    self.open = Some(Open::Reasoning {
                        id,
                        text: String::new(),
                    });
                }
                let index = self.output.len();
                if let Some(Open::Reasoning { id, text }) = &mut self.open {
                    text.push_str(t);
                    let id = id.clone();
                    self.event(
                        &mut s,
                        "response.reasoning_summary_text.delta",
                        json!({"item_id": id, "output_index": index, "summary_index": 0,
                               "delta": t}),
                    );
                }
            }
            Out::Signature(sig) => {
                // The reasoning's encrypted content: the stored signature, which a later request
                // sends back in its reasoning item (only when the caller asked for it).
                if self.echo.include_encrypted_reasoning {
                    if matches!(self.open, Some(Open::Reasoning { .. })) {
                        self.close(&mut s);
                        if let Some(last) = self.output.last_mut() {
                            last["encrypted_content"] = json!(sig);
                        }
                    } else {
                        let id = self.item_id("rs");
                        self.whole_item(
                            &mut s,
                            json!({"id": id, "type": "reasoning", "summary": [],
                                   "encrypted_content": sig}),
                        );
                    }
                }
            }
            Out::Text(t) => {
                if !matches!(self.open, Some(Open::Message { .. })) {
                    self.close(&mut s);
                    let id = self.item_id("msg");
                    let index = self.output.len();
                    self.event(
                        &mut s,
                        "response.output_item.added",
                        json!({"output_index": index,
                               "item": {"id": id, "type": "message", "status": "in_progress",
                                        "role": "assistant", "content": []}}),
                    );
                    self.event(
                        &mut s,
                        "response.content_part.added",
                        json!({"item_id": id, "output_index": index, "content_index": 0,
                               "part": {"type": "output_text", "text": "", "annotations": []}}),
                    );
                    self.open = Some(Open::Message {
                        id,
                        text: String::new(),
                    });
                }
                let index = self.output.len();
                if let Some(Open::Message { id, text }) = &mut self.open {
                    text.push_str(t);
                    let id = id.clone();
                    self.event(
                        &mut s,
                        "response.output_text.delta",
                        json!({"item_id": id, "output_index": index, "content_index": 0,
                               "delta": t}),
                    );
                }
            }
            Out::ToolCall { id, name, input } => {
                self.close(&mut s);
                let item_id = self.item_id("fc");
                let arguments = match input {
                    Value::String(raw) => raw.clone(),
                    other => other.to_string(),
                };
                let index = self.output.len();
                let mut item = json!({"id": item_id, "type": "function_call",
                                      "status": "in_progress", "call_id": id, "name": name,
                                      "arguments": ""});
                self.event(
                    &mut s,
                    "response.output_item.added",
                    json!({"output_index": index, "item": item}),
                );
                self.event(
                    &mut s,
                    "response.function_call_arguments.delta",
                    json!({"item_id": item_id, "output_index": index, "delta": arguments}),
                );
                self.event(
                    &mut s,
                    "response.function_call_arguments.done",
                    json!({"item_id": item_id, "output_index": index, "arguments": arguments}),
                );
                item["status"] = json!("completed");
                item["arguments"] = json!(arguments);
                self.event(
                    &mut s,
                    "response.output_item.done",
                    json!({"output_index": index, "item": item}),
                );
                self.output.push(item);
            }
            Out::Error(e) => {
                self.close(&mut s);
                self.status = "failed";
                let body = super::error::openai_body(&ApiError::Upstream(e.clone()));
                self.error =
                    json!({"code": body["error"]["type"], "message": body["error"]["message"]});
                let r = self.response();
                self.event(&mut s, "response.failed", json!({"response": r}));
            }
            Out::End {
                stop,
                input_tokens,
                output_tokens,
                ..
            } => {
                self.close(&mut s);
                if self.status == "failed" {
                    return s;
                }
                self.status = if *stop == Stop::Length {
                    "incomplete"
                } else {
                    "completed"
                };
                self.usage = json!(Usage::of(*input_tokens, 0, *output_tokens, 0));
                let r = self.response();
                let kind = if self.status == "incomplete" {
                    "response.incomplete"
                } else {
                    "response.completed"
                };
                self.event(&mut s, kind, json!({"response": r}));
            }
        }
        s
    }
}
