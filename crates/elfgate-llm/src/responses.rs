//! OpenAI Responses API client.

use crate::TokenUsage;
use crate::client::Wire;
use crate::http::{self, Decoder, EventQueue, Text};
use crate::signature;
use crate::{
    ContentBlock, LlmError, LlmEvent, LlmFinishReason, LlmRequest, ProviderKind, Role,
    ThinkingLevel, ToolChoice,
};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// `POST {base_url}/responses`, key as `Authorization: Bearer`.
pub(crate) struct ResponsesWire {
    url: String,
}

impl ResponsesWire {
    pub(crate) fn new(base_url: &str) -> Self {
        let url = format!("{}/responses", base_url.trim_end_matches('/'));
        ResponsesWire { url }
    }
}

impl Wire for ResponsesWire {
    const KIND: ProviderKind = ProviderKind::OpenaiResponses;
    type Decoder = ResponsesDecoder;

    fn url(&self, _model: &str) -> Result<Cow<'_, str>, LlmError> {
        Ok(Cow::Borrowed(&self.url))
    }

    fn body(&self, req: &LlmRequest, model: &str) -> Value {
        build_body(req, model)
    }

    fn decoder(&self) -> ResponsesDecoder {
        ResponsesDecoder::default()
    }
}

/// Builds the JSON request body. `store: false`: the conversation is sent whole every time, so
/// the provider need not keep it.
pub(crate) fn build_body(req: &LlmRequest, model: &str) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), Value::String(model.to_string()));
    if let Some(system) = req.system.as_deref().filter(|s| !s.is_empty()) {
        body.insert("instructions".into(), Value::String(system.to_string()));
    }
    body.insert("input".into(), Value::Array(map_input(req)));
    body.insert("stream".into(), Value::Bool(true));
    body.insert("store".into(), Value::Bool(false));
    // Reasoning models refuse `temperature` ("Unsupported parameter"), and a reasoning effort is
    // only asked of them: with one set, the temperature is left out.
    if let Some(t) = req.temperature
        && req.thinking == ThinkingLevel::None
    {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(m) = req.max_tokens {
        body.insert("max_output_tokens".into(), json!(m));
    }
    if !req.tools.is_empty() {
        let tools = req
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.input_schema,
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
            ToolChoice::Tool(name) => json!({"type": "function", "name": name}),
        };
        body.insert("tool_choice".into(), choice);
    }
    // The Responses API has no stop sequences: `req.stop` is dropped (docs/gateway.md).
    if let Some(format) = req.response_format.as_ref().and_then(text_format) {
        body.insert("text".into(), json!({ "format": format }));
    }
    let effort = match req.thinking {
        ThinkingLevel::None => None,
        ThinkingLevel::Low => Some("low"),
        ThinkingLevel::Medium => Some("medium"),
        ThinkingLevel::High => Some("high"),
    };
    if let Some(effort) = effort {
        // Without `summary` the API streams no reasoning text at all.
        body.insert(
            "reasoning".into(),
            json!({ "effort": effort, "summary": "auto" }),
        );
        // Nothing is stored upstream (`store: false`): the reasoning of earlier turns can only
        // be replayed from its encrypted content, which the API returns only when asked.
        body.insert("include".into(), json!(["reasoning.encrypted_content"]));
    }
    Value::Object(body)
}

/// Chat completions' `response_format` as the Responses API's `text.format`: the JSON schema's
/// fields move up one level (`{type: json_schema, name, schema, strict}`); `json_object` and
/// `text` are the same; anything else is not understood and dropped.
fn text_format(format: &Value) -> Option<Value> {
    match format.get("type")?.as_str()? {
        "json_schema" => {
            let mut out = Map::new();
            out.insert("type".into(), json!("json_schema"));
            if let Some(Value::Object(spec)) = format.get("json_schema") {
                for (k, v) in spec {
                    out.insert(k.clone(), v.clone());
                }
            }
            Some(Value::Object(out))
        }
        t @ ("json_object" | "text") => Some(json!({ "type": t })),
        _ => None,
    }
}

/// Tool-call arguments as the JSON string the API expects; a string is raw argument text.
fn arguments_text(input: &Value) -> String {
    match input {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn message_item(role: &str, content: Vec<Value>) -> Value {
    json!({ "type": "message", "role": role, "content": content })
}

/// Maps the conversation to input items, in order: reasoning, messages, `function_call` and
/// `function_call_output` items. Thinking goes back as a reasoning item when it carries the
/// encrypted content this kind of provider made (its signature); other thinking is dropped.
pub(crate) fn map_input(req: &LlmRequest) -> Vec<Value> {
    let mut out = Vec::with_capacity(req.messages.len());
    for msg in &req.messages {
        let (role, text_type) = match msg.role {
            Role::System => ("system", "input_text"),
            Role::User | Role::Tool => ("user", "input_text"),
            Role::Assistant => ("assistant", "output_text"),
        };
        let mut content = Vec::new();
        let mut after = Vec::new();
        for b in &msg.blocks {
            match b {
                ContentBlock::Text { text } if !text.is_empty() => {
                    content.push(json!({ "type": text_type, "text": text }));
                }
                ContentBlock::Image {
                    media_type,
                    data,
                    url,
                } if msg.role == Role::User => {
                    let url = match (data, url) {
                        (Some(d), _) => format!("data:{media_type};base64,{d}"),
                        (None, Some(u)) => u.clone(),
                        (None, None) => continue,
                    };
                    content.push(json!({ "type": "input_image", "image_url": url }));
                }
                ContentBlock::Thinking {
                    thinking,
                    signature: Some(sig),
                } if msg.role == Role::Assistant => {
                    if let Some(encrypted) = signature::for_kind(ProviderKind::OpenaiResponses, sig)
                    {
                        // The reasoning came before the turn's message and calls.
                        let summary = if thinking.is_empty() {
                            json!([])
                        } else {
                            json!([{ "type": "summary_text", "text": thinking }])
                        };
                        out.push(json!({
                            "type": "reasoning",
                            "summary": summary,
                            "encrypted_content": encrypted,
                        }));
                    }
                }
                ContentBlock::ToolUse { id, name, input } if msg.role == Role::Assistant => {
                    after.push(json!({
                        "type": "function_call",
                        "call_id": id,
                        "name": name,
                        "arguments": arguments_text(input),
                    }));
                }
                ContentBlock::ToolResult {
                    tool_use_id,
                    content: result,
                    ..
                } => {
                    // A result answers a call made earlier, so it goes before the message's text.
                    out.push(json!({
                        "type": "function_call_output",
                        "call_id": tool_use_id,
                        "output": result,
                    }));
                }
                _ => {}
            }
        }
        if !content.is_empty() {
            out.push(message_item(role, content));
        }
        out.extend(after);
    }
    out
}

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

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    input_tokens_details: Option<InputDetails>,
}

#[derive(Deserialize)]
struct InputDetails {
    /// Input tokens served from the provider's cache (counted in `input_tokens` too).
    #[serde(default)]
    cached_tokens: Option<u64>,
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
                cache_read_tokens: u
                    .input_tokens_details
                    .and_then(|d| d.cached_tokens)
                    .unwrap_or(0),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{conversation, decode, fixture_json};

    fn events(body: &str) -> Vec<Result<LlmEvent, LlmError>> {
        decode(ResponsesDecoder::default(), body.as_bytes())
    }

    #[test]
    fn golden_request() {
        let body = build_body(&conversation(ProviderKind::OpenaiResponses), "gpt-test");
        let expected = fixture_json(include_str!("../tests/fixtures/responses_request.json"));
        assert_eq!(body, expected, "{body:#}");
    }

    #[test]
    fn temperature_is_sent_only_without_a_reasoning_effort() {
        let mut req = conversation(ProviderKind::OpenaiResponses);
        req.temperature = Some(0.5);
        req.thinking = ThinkingLevel::High;
        let body = build_body(&req, "m");
        assert!(body.get("temperature").is_none(), "{body:#}");
        assert_eq!(body["reasoning"]["effort"], "high");
        req.thinking = ThinkingLevel::None;
        let body = build_body(&req, "m");
        assert_eq!(body["temperature"], 0.5);
        assert!(body.get("reasoning").is_none(), "{body:#}");
    }

    #[test]
    fn tool_choice_and_response_format_are_translated_and_stop_is_dropped() {
        let mut req = conversation(ProviderKind::OpenaiResponses);
        req.stop = vec!["END".into()];
        for (choice, want) in [
            (ToolChoice::Auto, json!("auto")),
            (ToolChoice::None, json!("none")),
            (ToolChoice::Required, json!("required")),
            (
                ToolChoice::Tool("read_file".into()),
                json!({"type": "function", "name": "read_file"}),
            ),
        ] {
            req.tool_choice = Some(choice);
            assert_eq!(build_body(&req, "m")["tool_choice"], want);
        }
        req.response_format = Some(json!({"type": "json_schema", "json_schema":
            {"name": "answer", "schema": {"type": "object"}, "strict": true}}));
        let body = build_body(&req, "m");
        assert_eq!(
            body["text"],
            json!({"format": {"type": "json_schema", "name": "answer",
                              "schema": {"type": "object"}, "strict": true}})
        );
        assert!(body.get("stop").is_none());
        req.response_format = Some(json!({"type": "json_object"}));
        assert_eq!(
            build_body(&req, "m")["text"],
            json!({"format": {"type": "json_object"}})
        );
        req.response_format = Some(json!({"type": "something_new"}));
        assert!(build_body(&req, "m").get("text").is_none());
    }

    #[test]
    fn minimal_request_omits_optionals() {
        let req = LlmRequest {
            messages: vec![crate::LlmMessage {
                role: Role::User,
                blocks: vec![ContentBlock::text("hi")],
            }],
            ..Default::default()
        };
        assert_eq!(
            build_body(&req, "m"),
            json!({
                "model": "m", "stream": true, "store": false,
                "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
            })
        );
    }

    #[test]
    fn golden_stream() {
        let got: Vec<LlmEvent> = events(include_str!("../tests/fixtures/responses_stream.sse"))
            .into_iter()
            .map(|e| e.unwrap())
            .collect();
        assert_eq!(
            got,
            [
                LlmEvent::ThinkingDelta("Look ".into()),
                LlmEvent::ThinkingDelta("first.".into()),
                LlmEvent::TextDelta("Reading ".into()),
                LlmEvent::TextDelta("it.".into()),
                LlmEvent::ToolCall {
                    id: "call_1".into(),
                    name: "read_file".into(),
                    arguments: "{\"path\":\"a.txt\"}".into(),
                },
                LlmEvent::Finish(LlmFinishReason::ToolCalls),
                LlmEvent::Usage(TokenUsage {
                    input_tokens: 1,
                    output_tokens: 5,
                    cache_read_tokens: 0,
                    cache_write_tokens: 0,
                }),
            ]
        );
    }

    #[test]
    fn incomplete_response_is_a_length_finish() {
        let got = events(concat!(
            "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"a\"}\n\n",
            "event: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"response\":{\"status\":\"incomplete\",",
            "\"incomplete_details\":{\"reason\":\"max_output_tokens\"},\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n",
        ));
        assert_eq!(
            got,
            [
                Ok(LlmEvent::TextDelta("a".into())),
                Ok(LlmEvent::Finish(LlmFinishReason::Length)),
                Ok(LlmEvent::Usage(TokenUsage {
                    input_tokens: 3,
                    output_tokens: 1,
                    cache_read_tokens: 0,
                    cache_write_tokens: 0,
                })),
            ]
        );
    }

    #[test]
    fn failures_are_upstream_errors() {
        let got = events(concat!(
            "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"a\"}\n\n",
            "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\",",
            "\"error\":{\"code\":\"server_error\",\"message\":\"The model failed.\"}}}\n\n",
        ));
        assert_eq!(
            got[1],
            Err(LlmError::Upstream(
                "The model failed. (server_error)".into()
            ))
        );
        let got = events(
            "event: error\ndata: {\"type\":\"error\",\"code\":\"rate_limit_exceeded\",\"message\":\"Slow down\",\"param\":null}\n\n",
        );
        assert_eq!(
            got,
            [Err(LlmError::Upstream(
                "Slow down (rate_limit_exceeded)".into()
            ))]
        );
        // A body cut before response.completed is a dropped stream.
        let got = events("data: {\"type\":\"response.output_text.delta\",\"delta\":\"a\"}\n\n");
        assert!(matches!(got[1], Err(LlmError::Transport(_))), "{got:?}");
    }
}
