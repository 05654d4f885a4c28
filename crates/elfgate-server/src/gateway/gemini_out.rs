//! The run's items → Gemini API answers: one `GenerateContentResponse`, or (`alt=sse`) one per
//! piece, the last carrying `finishReason` and `usageMetadata`. One builder serves both.

use super::Stop;
use super::run::Out;
use crate::error::ApiError;
use elfgate_llm::wire::gemini::UsageMetadata;
use serde_json::{Value, json};

/// Builds a generateContent answer from the run's items.
pub struct GeminiBuilder {
    response_id: String,
    model: String,
    /// Every part so far (the whole answer's).
    parts: Vec<Value>,
    /// A reasoning signature waiting for the part it belongs on (the next call or text).
    signature: Option<String>,
    finish: Option<&'static str>,
    usage: Option<UsageMetadata>,
}

impl GeminiBuilder {
    /// A builder for the answer `response_id` of `model` (as the caller named it).
    pub fn new(response_id: String, model: String) -> Self {
        GeminiBuilder {
            response_id,
            model,
            parts: Vec::new(),
            signature: None,
            finish: None,
            usage: None,
        }
    }

    fn chunk(&self, parts: Vec<Value>) -> Value {
        let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        if let Some(f) = self.finish {
            candidate["finishReason"] = json!(f);
        }
        let mut r = json!({"candidates": [candidate], "modelVersion": self.model,
                           "responseId": self.response_id});
        if let Some(usage) = self.usage {
            r["usageMetadata"] = json!(usage);
        }
        r
    }

    /// The whole answer (consecutive text parts of one kind joined).
    pub fn response(&self) -> Value {
        let mut parts: Vec<Value> = Vec::new();
        for p in &self.parts {
            let same_kind = |last: &Value| {
                last.get("text").is_some()
                    && p.get("text").is_some()
                    && last.get("thought") == p.get("thought")
                    && p.get("thoughtSignature").is_none()
            };
            match parts.last_mut() {
                Some(last) if same_kind(last) => {
                    let joined = format!(
                        "{}{}",
                        last["text"].as_str().unwrap_or_default(),
                        p["text"].as_str().unwrap_or_default()
                    );
                    last["text"] = json!(joined);
                }
                _ => parts.push(p.clone()),
            }
        }
        self.chunk(parts)
    }

    /// The part of one item, if it makes one (a signature waits for the next part).
    fn part(&mut self, item: &Out) -> Option<Value> {
        let mut part = match item {
            Out::Text(t) => json!({"text": t}),
            Out::Thinking(t) => json!({"text": t, "thought": true}),
            Out::Signature(s) => {
                self.signature = Some(s.clone());
                return None;
            }
            Out::ToolCall { id, name, input } => {
                let args = match input {
                    Value::Object(_) => input.clone(),
                    Value::String(raw) => serde_json::from_str(raw).unwrap_or(json!({})),
                    _ => json!({}),
                };
                json!({"functionCall": {"id": id, "name": name, "args": args}})
            }
            Out::Error(_) | Out::End { .. } => return None,
        };
        if part.get("thought").is_none()
            && let Some(sig) = self.signature.take()
        {
            part["thoughtSignature"] = json!(sig);
        }
        self.parts.push(part.clone());
        Some(part)
    }

    /// Takes one item; the SSE frame it makes, if any.
    pub fn frames(&mut self, item: &Out) -> String {
        match item {
            Out::Error(e) => {
                let body = error_body(&ApiError::Upstream(e.clone()));
                format!("data: {body}\n\n")
            }
            Out::End {
                stop,
                input_tokens,
                output_tokens,
                ..
            } => {
                self.finish = Some(if *stop == Stop::Length {
                    "MAX_TOKENS"
                } else {
                    "STOP"
                });
                self.usage = Some(UsageMetadata {
                    prompt_token_count: Some(*input_tokens),
                    candidates_token_count: Some(*output_tokens),
                    total_token_count: Some(input_tokens + output_tokens),
                    ..Default::default()
                });
                // A signature that found no part goes on an empty text part of its own.
                let parts = match self.signature.take() {
                    Some(sig) => {
                        let p = json!({"text": "", "thoughtSignature": sig});
                        self.parts.push(p.clone());
                        vec![p]
                    }
                    None => Vec::new(),
                };
                format!("data: {}\n\n", self.chunk(parts))
            }
            _ => match self.part(item) {
                Some(p) => format!("data: {}\n\n", self.chunk(vec![p])),
                None => String::new(),
            },
        }
    }
}

/// Google's canonical status name for an HTTP status.
fn status_name(status: u16) -> &'static str {
    match status {
        400 | 413 | 415 | 422 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        s if (400..500).contains(&s) => "FAILED_PRECONDITION",
        _ => "INTERNAL",
    }
}

/// Google's error body: `{"error": {"code", "message", "status"}}`.
pub fn error_body(e: &ApiError) -> Value {
    let code = e.status().as_u16();
    json!({"error": {"code": code, "message": e.client_message(), "status": status_name(code)}})
}
