//! Stream decoding: the API's stream events as [`LlmEvent`](crate::LlmEvent)s.

use crate::TokenUsage;
use crate::http::{self, Decoder, EventQueue, Text};
use crate::signature;
use crate::wire::responses::Usage;
use crate::{LlmError, LlmEvent, LlmFinishReason, ProviderKind};
use serde::Deserialize;
use serde_json::{Value, json};
use std::borrow::Cow;
use std::collections::BTreeMap;

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Cow<'a, str>>,
    // Borrowed (`http::Text`): a delta is parsed per token; its text is copied once, into the
    // queued delta.
    #[serde(default, borrow)]
    delta: Option<Text<'a>>,
    #[serde(default)]
    output_index: Option<usize>,
    #[serde(default)]
    item: Option<Item>,
    #[serde(default)]
    response: Option<ResponseBody>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    code: Option<Value>,
}

#[derive(Deserialize)]
struct Item {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    call_id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
    #[serde(default)]
    encrypted_content: Option<String>,
}

#[derive(Deserialize)]
struct ResponseBody {
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    incomplete_details: Option<IncompleteDetails>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct IncompleteDetails {
    #[serde(default)]
    reason: Option<String>,
}

#[derive(Default)]
struct PendingCall {
    call_id: String,
    name: String,
    arguments: String,
}

/// Decodes Responses API stream events.
#[derive(Default)]
pub(crate) struct ResponsesDecoder {
    /// Function calls being streamed, by output index.
    calls: BTreeMap<usize, PendingCall>,
    saw_tool_call: bool,
}

impl ResponsesDecoder {
    fn emit_call(&mut self, call: PendingCall, out: &mut EventQueue) {
        self.saw_tool_call = true;
        out.push_back(Ok(LlmEvent::ToolCall {
            id: call.call_id,
            name: call.name,
            arguments: call.arguments,
        }));
    }

    /// Ends the stream: calls never closed, the finish reason, then usage.
    fn finish(
        &mut self,
        reason: LlmFinishReason,
        resp: Option<ResponseBody>,
        out: &mut EventQueue,
    ) {
        for (_, c) in std::mem::take(&mut self.calls) {
            self.emit_call(c, out);
        }
        let reason = match reason {
            LlmFinishReason::Stop if self.saw_tool_call => LlmFinishReason::ToolCalls,
            r => r,
        };
        out.push_back(Ok(LlmEvent::Finish(reason)));
        if let Some(u) = resp.and_then(|r| r.usage) {
            out.push_back(Ok(LlmEvent::Usage(TokenUsage {
                input_tokens: u.input_tokens.unwrap_or(0),
                output_tokens: u.output_tokens.unwrap_or(0),
                cache_read_tokens: u.cached_tokens(),
                // The Responses API caches prefixes by itself and reports no writes.
                cache_write_tokens: 0,
            })));
        }
    }
}

fn incomplete_reason(resp: Option<&ResponseBody>) -> LlmFinishReason {
    match resp
        .and_then(|r| r.incomplete_details.as_ref())
        .and_then(|d| d.reason.as_deref())
    {
        Some("max_output_tokens") => LlmFinishReason::Length,
        Some("content_filter") => LlmFinishReason::ContentFilter,
        Some(other) => LlmFinishReason::Other(other.to_string()),
        None => LlmFinishReason::Other("incomplete".to_string()),
    }
}

impl Decoder for ResponsesDecoder {
    fn on_event(
        &mut self,
        event: &str,
        data: &str,
        out: &mut EventQueue,
    ) -> Result<bool, LlmError> {
        let data = data.trim();
        if data.is_empty() || data == "[DONE]" {
            return Ok(false);
        }
        let ev: Event<'_> = serde_json::from_str(data)
            .map_err(|e| LlmError::Protocol(format!("invalid event JSON: {e}")))?;
        // The data repeats the event name; either may be missing behind a proxy.
        let kind = ev.kind.as_deref().unwrap_or(event);
        match kind {
            "response.output_text.delta" | "response.refusal.delta" => {
                if let Some(t) = ev.delta {
                    http::push_delta(out, false, t);
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                if let Some(t) = ev.delta {
                    http::push_delta(out, true, t);
                }
            }
            "response.output_item.added" => {
                if let (Some(item), Some(index)) = (ev.item, ev.output_index)
                    && item.kind == "function_call"
                {
                    self.calls.insert(
                        index,
                        PendingCall {
                            call_id: item.call_id.or(item.id).unwrap_or_default(),
                            name: item.name.unwrap_or_default(),
                            arguments: item.arguments.unwrap_or_default(),
                        },
                    );
                }
            }
            "response.function_call_arguments.delta" => {
                if let (Some(index), Some(part)) = (ev.output_index, ev.delta)
                    && let Some(call) = self.calls.get_mut(&index)
                {
                    call.arguments.push_str(&part.0);
                }
            }
            "response.output_item.done" => {
                let Some(item) = ev.item else {
                    return Ok(false);
                };
                if item.kind == "reasoning" {
                    if let Some(enc) = item.encrypted_content.filter(|s| !s.is_empty()) {
                        out.push_back(Ok(LlmEvent::ThinkingSignature(signature::tag(
                            ProviderKind::OpenaiResponses,
                            &enc,
                        ))));
                    }
                    return Ok(false);
                }
                if item.kind != "function_call" {
                    return Ok(false);
                }
                let mut call = ev
                    .output_index
                    .and_then(|i| self.calls.remove(&i))
                    .unwrap_or_default();
                // The finished item is authoritative; the deltas only matter without it.
                if let Some(id) = item.call_id.or(item.id).filter(|s| !s.is_empty()) {
                    call.call_id = id;
                }
                if let Some(name) = item.name.filter(|s| !s.is_empty()) {
                    call.name = name;
                }
                if let Some(args) = item.arguments.filter(|s| !s.is_empty()) {
                    call.arguments = args;
                }
                self.emit_call(call, out);
            }
            "response.completed" | "response.done" => {
                self.finish(LlmFinishReason::Stop, ev.response, out);
                return Ok(true);
            }
            "response.incomplete" => {
                let reason = incomplete_reason(ev.response.as_ref());
                self.finish(reason, ev.response, out);
                return Ok(true);
            }
            "response.failed" => {
                let message = ev
                    .response
                    .and_then(|r| r.error)
                    .and_then(|e| http::message_from_json(&json!({ "error": e })))
                    .unwrap_or_else(|| "response failed".to_string());
                return Err(LlmError::Upstream(message));
            }
            "error" => {
                let message =
                    http::message_from_json(&json!({ "message": ev.message, "code": ev.code }))
                        .unwrap_or_else(|| "unknown error".to_string());
                return Err(LlmError::Upstream(message));
            }
            _ => {}
        }
        Ok(false)
    }
}
