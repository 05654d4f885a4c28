//! Gemini API (`streamGenerateContent`) client.

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
use std::collections::HashMap;

/// `POST {base_url}/v1beta/models/{model}:streamGenerateContent?alt=sse`, key as `x-goog-api-key`.
pub(crate) struct GeminiWire {
    /// The base URL up to and including the API version segment.
    base: String,
}

impl GeminiWire {
    pub(crate) fn new(base_url: &str) -> Self {
        let base = base_url.trim_end_matches('/');
        // Tolerate a base URL that already includes the version segment.
        let base = if base.ends_with("/v1beta") || base.ends_with("/v1") {
            base.to_string()
        } else {
            format!("{base}/v1beta")
        };
        GeminiWire { base }
    }
}

impl Wire for GeminiWire {
    const KIND: ProviderKind = ProviderKind::Gemini;
    type Decoder = GeminiDecoder;

    /// The model goes into the path: one path segment, escaped as such.
    fn url(&self, model: &str) -> Result<Cow<'_, str>, LlmError> {
        let model = model.strip_prefix("models/").unwrap_or(model);
        let mut url = reqwest::Url::parse(&self.base)
            .map_err(|e| LlmError::Protocol(format!("invalid base URL '{}': {e}", self.base)))?;
        url.path_segments_mut()
            .map_err(|()| LlmError::Protocol(format!("invalid base URL '{}'", self.base)))?
            .push("models")
            .push(&format!("{model}:streamGenerateContent"));
        url.set_query(Some("alt=sse"));
        Ok(Cow::Owned(url.into()))
    }

    fn body(&self, req: &LlmRequest, _model: &str) -> Value {
        build_body(req)
    }

    fn headers(&self, req: reqwest::RequestBuilder, key: Option<&str>) -> reqwest::RequestBuilder {
        match key {
            Some(key) => req.header("x-goog-api-key", key),
            None => req,
        }
    }

    fn decoder(&self) -> GeminiDecoder {
        GeminiDecoder::new()
    }
}

/// The thinking budget for a level; `None` leaves the model's own default.
fn thinking_budget(level: ThinkingLevel) -> Option<u32> {
    match level {
        ThinkingLevel::None => None,
        ThinkingLevel::Low => Some(1024),
        ThinkingLevel::Medium => Some(4096),
        ThinkingLevel::High => Some(16384),
    }
}

/// Builds the JSON request body (the model is in the URL).
pub(crate) fn build_body(req: &LlmRequest) -> Value {
    let mut body = Map::new();
    body.insert("contents".into(), Value::Array(map_contents(req)));
    let mut system: Vec<&str> = req.system.as_deref().into_iter().collect();
    for m in req.messages.iter().filter(|m| m.role == Role::System) {
        for b in &m.blocks {
            if let ContentBlock::Text { text } = b {
                system.push(text);
            }
        }
    }
    system.retain(|s| !s.is_empty());
    if !system.is_empty() {
        let parts: Vec<Value> = system.iter().map(|t| json!({ "text": t })).collect();
        body.insert("systemInstruction".into(), json!({ "parts": parts }));
    }
    if !req.tools.is_empty() {
        let decls: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                // `parametersJsonSchema` takes a JSON Schema as is; `parameters` only an
                // OpenAPI subset that would reject some of the tools' schemas.
                json!({
                    "name": t.name,
                    "description": t.description,
                    "parametersJsonSchema": t.input_schema,
                })
            })
            .collect();
        body.insert("tools".into(), json!([{ "functionDeclarations": decls }]));
    }
    if let Some(choice) = &req.tool_choice {
        let config = match choice {
            ToolChoice::Auto => json!({ "mode": "AUTO" }),
            ToolChoice::None => json!({ "mode": "NONE" }),
            ToolChoice::Required => json!({ "mode": "ANY" }),
            ToolChoice::Tool(name) => json!({ "mode": "ANY", "allowedFunctionNames": [name] }),
        };
        body.insert(
            "toolConfig".into(),
            json!({ "functionCallingConfig": config }),
        );
    }
    let mut gen_config = Map::new();
    if !req.stop.is_empty() {
        gen_config.insert("stopSequences".into(), json!(req.stop));
    }
    // Chat completions' `response_format`: JSON output, with its schema when it has one.
    match req
        .response_format
        .as_ref()
        .and_then(|f| f.get("type"))
        .and_then(Value::as_str)
    {
        Some("json_object") => {
            gen_config.insert("responseMimeType".into(), json!("application/json"));
        }
        Some("json_schema") => {
            gen_config.insert("responseMimeType".into(), json!("application/json"));
            if let Some(schema) = req
                .response_format
                .as_ref()
                .and_then(|f| f.pointer("/json_schema/schema"))
            {
                gen_config.insert("responseJsonSchema".into(), schema.clone());
            }
        }
        _ => {}
    }
    if let Some(t) = req.temperature {
        gen_config.insert("temperature".into(), json!(t));
    }
    if let Some(m) = req.max_tokens {
        gen_config.insert("maxOutputTokens".into(), json!(m));
    }
    if let Some(b) = thinking_budget(req.thinking) {
        gen_config.insert(
            "thinkingConfig".into(),
            json!({ "includeThoughts": true, "thinkingBudget": b }),
        );
    }
    if !gen_config.is_empty() {
        body.insert("generationConfig".into(), Value::Object(gen_config));
    }
    Value::Object(body)
}

/// Tool-call arguments as the object Gemini expects; raw text that is not a JSON object
/// becomes `{}`.
fn call_args(input: &Value) -> Value {
    match input {
        Value::Object(_) => input.clone(),
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(v @ Value::Object(_)) => v,
            _ => json!({}),
        },
        _ => json!({}),
    }
}

/// Puts a model turn's thought signatures where Gemini put them: on its function calls, in
/// order (the first call of a turn carries its signature; Gemini 3 refuses a turn whose call lost
/// it), else on the turn's last part. The thought text itself is not sent back (Gemini does not
/// need its summaries), except as the carrier of a signature the turn has no other part for.
fn place_signatures(parts: &mut Vec<Value>, signed: Vec<(&str, &str)>) {
    let mut calls = parts
        .iter()
        .enumerate()
        .filter(|(_, p)| p.get("functionCall").is_some())
        .map(|(i, _)| i)
        .collect::<Vec<_>>()
        .into_iter();
    let mut last_free = parts.len().checked_sub(1);
    for (thinking, sig) in signed {
        let at = match calls.next() {
            Some(i) => Some(i),
            None => last_free.take(),
        };
        match at
            .and_then(|i| parts.get_mut(i))
            .and_then(Value::as_object_mut)
        {
            Some(part) => {
                part.insert("thoughtSignature".into(), Value::String(sig.to_string()));
            }
            None => {
                parts.push(json!({ "text": thinking, "thought": true, "thoughtSignature": sig }));
            }
        }
    }
}

/// Maps the conversation to `contents`: roles `user` and `model`, tool results as
/// `functionResponse` parts of a user turn (named after the call they answer), consecutive
/// turns of the same role merged.
pub(crate) fn map_contents(req: &LlmRequest) -> Vec<Value> {
    let mut call_names: HashMap<&str, &str> = HashMap::new();
    let mut merged: Vec<(&'static str, Vec<Value>)> = Vec::with_capacity(req.messages.len());
    for msg in &req.messages {
        let role = match msg.role {
            Role::System => continue, // folded into systemInstruction
            Role::User | Role::Tool => "user",
            Role::Assistant => "model",
        };
        let mut parts = Vec::new();
        // A model turn's thought signatures, placed once its other parts are known.
        let mut signed: Vec<(&str, &str)> = Vec::new();
        for b in &msg.blocks {
            match b {
                ContentBlock::Text { text } if !text.is_empty() => {
                    parts.push(json!({ "text": text }));
                }
                ContentBlock::Image {
                    media_type,
                    data,
                    url,
                } if role == "user" => {
                    match (data, url) {
                        (Some(d), _) => parts
                            .push(json!({ "inlineData": { "mimeType": media_type, "data": d } })),
                        (None, Some(u)) => parts
                            .push(json!({ "fileData": { "mimeType": media_type, "fileUri": u } })),
                        (None, None) => {}
                    }
                }
                ContentBlock::Thinking {
                    thinking,
                    signature: Some(sig),
                } if role == "model" => {
                    if let Some(own) = signature::for_kind(ProviderKind::Gemini, sig) {
                        signed.push((thinking, own));
                    }
                }
                ContentBlock::ToolUse { id, name, input } if role == "model" => {
                    call_names.insert(id, name);
                    parts.push(json!({
                        "functionCall": { "id": id, "name": name, "args": call_args(input) },
                    }));
                }
                ContentBlock::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                } if role == "user" => {
                    let name = call_names.get(tool_use_id.as_str()).copied().unwrap_or("");
                    let key = if *is_error { "error" } else { "output" };
                    parts.push(json!({
                        "functionResponse": {
                            "id": tool_use_id,
                            "name": name,
                            "response": { key: content },
                        },
                    }));
                }
                _ => {}
            }
        }
        place_signatures(&mut parts, signed);
        if parts.is_empty() {
            continue;
        }
        match merged.last_mut() {
            Some((r, existing)) if *r == role => existing.extend(parts),
            _ => merged.push((role, parts)),
        }
    }
    merged
        .into_iter()
        .map(|(role, parts)| json!({ "role": role, "parts": parts }))
        .collect()
}

// Text borrowed where it can be (`http::Text`): a chunk is parsed per token, and its text is
// copied once, into the queued delta.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Chunk<'a> {
    #[serde(default, borrow)]
    candidates: Option<Vec<Candidate<'a>>>,
    #[serde(default)]
    usage_metadata: Option<UsageMetadata>,
    #[serde(default)]
    prompt_feedback: Option<PromptFeedback>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate<'a> {
    #[serde(default, borrow)]
    content: Option<Content<'a>>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Content<'a> {
    #[serde(default, borrow)]
    parts: Option<Vec<Part<'a>>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Part<'a> {
    #[serde(default, borrow)]
    text: Option<Text<'a>>,
    #[serde(default)]
    thought: Option<bool>,
    #[serde(default)]
    thought_signature: Option<String>,
    #[serde(default)]
    function_call: Option<FunctionCall>,
}

#[derive(Deserialize)]
struct FunctionCall {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    args: Option<Value>,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "camelCase")]
struct UsageMetadata {
    #[serde(default)]
    prompt_token_count: Option<u64>,
    #[serde(default)]
    candidates_token_count: Option<u64>,
    #[serde(default)]
    thoughts_token_count: Option<u64>,
    /// Prompt tokens served from a cached content (counted in `prompt_token_count` too).
    #[serde(default)]
    cached_content_token_count: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PromptFeedback {
    #[serde(default)]
    block_reason: Option<String>,
}

/// Decodes `streamGenerateContent` chunks. Gemini has no end marker: the stream is complete
/// when the body ends after a chunk with a finish reason.
pub(crate) struct GeminiDecoder {
    finished: bool,
    calls: usize,
    /// Starts the ids made up for calls that come without one: random, so that ids stay unique
    /// over a session's turns (the engines pair results with calls by id).
    id_prefix: String,
    /// The latest usage (each chunk carries the running totals).
    usage: Option<UsageMetadata>,
}

impl GeminiDecoder {
    pub(crate) fn new() -> Self {
        GeminiDecoder {
            finished: false,
            calls: 0,
            id_prefix: format!("call_{:012x}", fastrand::u64(..) >> 16),
            usage: None,
        }
    }
}

fn finish_reason(s: &str, saw_tool_call: bool) -> LlmFinishReason {
    match s {
        "STOP" if saw_tool_call => LlmFinishReason::ToolCalls,
        "STOP" => LlmFinishReason::Stop,
        "MAX_TOKENS" => LlmFinishReason::Length,
        "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII" | "IMAGE_SAFETY" => {
            LlmFinishReason::ContentFilter
        }
        other => LlmFinishReason::Other(other.to_string()),
    }
}

impl Decoder for GeminiDecoder {
    fn on_event(
        &mut self,
        _event: &str,
        data: &str,
        out: &mut EventQueue,
    ) -> Result<bool, LlmError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(false);
        }
        let chunk: Chunk<'_> = serde_json::from_str(data)
            .map_err(|e| LlmError::Protocol(format!("invalid chunk JSON: {e}")))?;
        if let Some(err) = chunk.error.filter(|e| !e.is_null()) {
            let message = http::message_from_json(&json!({ "error": err }))
                .unwrap_or_else(|| "unknown error".to_string());
            return Err(LlmError::Upstream(message));
        }
        if let Some(u) = chunk.usage_metadata {
            self.usage = Some(u);
        }
        for cand in chunk.candidates.into_iter().flatten().take(1) {
            for part in cand.content.and_then(|c| c.parts).into_iter().flatten() {
                let thought = part.thought.unwrap_or(false);
                if let Some(t) = part.text {
                    http::push_delta(out, thought, t);
                }
                if let Some(sig) = part.thought_signature.filter(|s| !s.is_empty()) {
                    out.push_back(Ok(LlmEvent::ThinkingSignature(signature::tag(
                        ProviderKind::Gemini,
                        &sig,
                    ))));
                }
                if let Some(call) = part.function_call {
                    self.calls += 1;
                    let arguments = match call.args {
                        // Malformed arguments arrive as a string: pass them on as they are.
                        Some(Value::String(s)) => s,
                        Some(v @ Value::Object(_)) => v.to_string(),
                        _ => "{}".to_string(),
                    };
                    out.push_back(Ok(LlmEvent::ToolCall {
                        // The Gemini API names no id; the engines need one per call.
                        id: call
                            .id
                            .filter(|s| !s.is_empty())
                            .unwrap_or_else(|| format!("{}_{}", self.id_prefix, self.calls)),
                        name: call.name,
                        arguments,
                    }));
                }
            }
            if let Some(reason) = cand.finish_reason.filter(|r| !r.is_empty())
                && !self.finished
            {
                self.finished = true;
                out.push_back(Ok(LlmEvent::Finish(finish_reason(&reason, self.calls > 0))));
            }
        }
        if let Some(reason) = chunk.prompt_feedback.and_then(|f| f.block_reason)
            && !self.finished
        {
            tracing::debug!(%reason, "gemini blocked the prompt");
            self.finished = true;
            out.push_back(Ok(LlmEvent::Finish(LlmFinishReason::ContentFilter)));
        }
        Ok(false)
    }

    fn on_end(&mut self, out: &mut EventQueue) -> bool {
        if !self.finished {
            return false;
        }
        if let Some(u) = self.usage {
            out.push_back(Ok(LlmEvent::Usage(TokenUsage {
                input_tokens: u.prompt_token_count.unwrap_or(0),
                // Thoughts are generated tokens too, counted apart from the candidates'.
                output_tokens: u.candidates_token_count.unwrap_or(0)
                    + u.thoughts_token_count.unwrap_or(0),
                cache_read_tokens: u.cached_content_token_count.unwrap_or(0),
                cache_write_tokens: 0,
            })));
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LlmMessage;
    use crate::testkit::{conversation, decode, fixture_json};

    fn events(body: &str) -> Vec<Result<LlmEvent, LlmError>> {
        let mut d = GeminiDecoder::new();
        d.id_prefix = "call".into();
        decode(d, body.as_bytes())
    }

    #[test]
    fn made_up_call_ids_differ_between_responses() {
        assert_ne!(
            GeminiDecoder::new().id_prefix,
            GeminiDecoder::new().id_prefix
        );
    }

    #[test]
    fn thought_signatures_go_back_where_gemini_put_them() {
        let model_turn = |blocks: Vec<ContentBlock>| LlmRequest {
            messages: vec![
                LlmMessage {
                    role: Role::User,
                    blocks: vec![ContentBlock::text("hi")],
                },
                LlmMessage {
                    role: Role::Assistant,
                    blocks,
                },
            ],
            ..conversation(ProviderKind::Gemini)
        };
        let signed = |sig: &str| ContentBlock::Thinking {
            thinking: String::new(),
            signature: Some(signature::tag(ProviderKind::Gemini, sig)),
        };
        let call = |id: &str| ContentBlock::ToolUse {
            id: id.into(),
            name: "read_file".into(),
            input: json!({}),
        };
        let parts = |req: &LlmRequest| map_contents(req)[1]["parts"].clone();
        // A signature without thought text (thoughts not asked for) goes on the turn's first call.
        let req = model_turn(vec![signed("s1"), call("c1"), call("c2")]);
        let p = parts(&req);
        assert_eq!(p.as_array().unwrap().len(), 2, "{p}");
        assert_eq!(p[0]["thoughtSignature"], "s1");
        assert!(p[1].get("thoughtSignature").is_none(), "{p}");
        // Without a call: on the last part; the thought text is not sent back.
        let req = model_turn(vec![
            ContentBlock::Thinking {
                thinking: "hmm".into(),
                signature: Some(signature::tag(ProviderKind::Gemini, "s2")),
            },
            ContentBlock::text("a"),
            ContentBlock::text("b"),
        ]);
        assert_eq!(
            parts(&req),
            json!([{"text": "a"}, {"text": "b", "thoughtSignature": "s2"}])
        );
        // Nothing else in the turn: the thought part carries it.
        let req = model_turn(vec![ContentBlock::Thinking {
            thinking: "hmm".into(),
            signature: Some(signature::tag(ProviderKind::Gemini, "s3")),
        }]);
        assert_eq!(
            parts(&req),
            json!([{"text": "hmm", "thought": true, "thoughtSignature": "s3"}])
        );
        // Another kind's signature is not Gemini's to check: the turn goes without it.
        let req = model_turn(vec![
            ContentBlock::Thinking {
                thinking: "hmm".into(),
                signature: Some("anthropic-sig".into()),
            },
            call("c1"),
        ]);
        assert!(parts(&req)[0].get("thoughtSignature").is_none());
    }

    #[test]
    fn tool_choice_stop_and_response_format_reach_their_gemini_fields() {
        let mut req = conversation(ProviderKind::Gemini);
        req.stop = vec!["END".into()];
        for (choice, want) in [
            (ToolChoice::Auto, json!({"mode": "AUTO"})),
            (ToolChoice::None, json!({"mode": "NONE"})),
            (ToolChoice::Required, json!({"mode": "ANY"})),
            (
                ToolChoice::Tool("read_file".into()),
                json!({"mode": "ANY", "allowedFunctionNames": ["read_file"]}),
            ),
        ] {
            req.tool_choice = Some(choice);
            assert_eq!(
                build_body(&req)["toolConfig"]["functionCallingConfig"],
                want
            );
        }
        req.response_format = Some(json!({"type": "json_schema", "json_schema":
            {"name": "answer", "schema": {"type": "object"}}}));
        let config = &build_body(&req)["generationConfig"];
        assert_eq!(config["stopSequences"], json!(["END"]));
        assert_eq!(config["responseMimeType"], "application/json");
        assert_eq!(config["responseJsonSchema"], json!({"type": "object"}));
        req.response_format = Some(json!({"type": "json_object"}));
        let config = &build_body(&req)["generationConfig"];
        assert_eq!(config["responseMimeType"], "application/json");
        assert!(config.get("responseJsonSchema").is_none());
    }

    #[test]
    fn golden_request() {
        let body = build_body(&conversation(ProviderKind::Gemini));
        let expected = fixture_json(include_str!("../tests/fixtures/gemini_request.json"));
        assert_eq!(body, expected, "{body:#}");
    }

    #[test]
    fn url_takes_the_model_as_one_path_segment() {
        let p = GeminiWire::new("http://h:1/");
        assert_eq!(
            p.url("mock:tokens=3").unwrap(),
            "http://h:1/v1beta/models/mock:tokens=3:streamGenerateContent?alt=sse"
        );
        let p = GeminiWire::new("http://h:1/v1beta");
        assert_eq!(
            p.url("models/a b/c").unwrap(),
            "http://h:1/v1beta/models/a%20b%2Fc:streamGenerateContent?alt=sse"
        );
    }

    #[test]
    fn golden_stream() {
        let got: Vec<LlmEvent> = events(include_str!("../tests/fixtures/gemini_stream.sse"))
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
                LlmEvent::ThinkingSignature("gemini:c2lnLTE=".into()),
                LlmEvent::ToolCall {
                    id: "call_1".into(),
                    name: "read_file".into(),
                    arguments: "{\"path\":\"a.txt\"}".into(),
                },
                LlmEvent::Finish(LlmFinishReason::ToolCalls),
                // Thoughts count as output.
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
    fn finish_reasons_and_generated_call_ids() {
        let chunk = |part: &str, reason: &str| {
            format!(
                "data: {{\"candidates\":[{{\"content\":{{\"role\":\"model\",\"parts\":[{part}]}},\"finishReason\":\"{reason}\"}}]}}\n\n"
            )
        };
        let got = events(&chunk(r#"{"text":"a"}"#, "MAX_TOKENS"));
        assert_eq!(
            got,
            [
                Ok(LlmEvent::TextDelta("a".into())),
                Ok(LlmEvent::Finish(LlmFinishReason::Length))
            ]
        );
        let got = events(&chunk(r#"{"text":"a"}"#, "SAFETY"));
        assert_eq!(got[1], Ok(LlmEvent::Finish(LlmFinishReason::ContentFilter)));
        let got = events(&chunk(r#"{"text":"a"}"#, "MALFORMED_FUNCTION_CALL"));
        assert_eq!(
            got[1],
            Ok(LlmEvent::Finish(LlmFinishReason::Other(
                "MALFORMED_FUNCTION_CALL".into()
            )))
        );
        let got = events(&chunk(
            r#"{"functionCall":{"name":"ls","args":"{bad"}},{"functionCall":{"name":"ls"}}"#,
            "STOP",
        ));
        assert_eq!(
            got,
            [
                Ok(LlmEvent::ToolCall {
                    id: "call_1".into(),
                    name: "ls".into(),
                    arguments: "{bad".into()
                }),
                Ok(LlmEvent::ToolCall {
                    id: "call_2".into(),
                    name: "ls".into(),
                    arguments: "{}".into()
                }),
                Ok(LlmEvent::Finish(LlmFinishReason::ToolCalls)),
            ]
        );
    }

    #[test]
    fn errors_and_cut_streams() {
        let got = events(concat!(
            "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}]}}]}\n\n",
            "data: {\"error\":{\"code\":503,\"message\":\"The model is overloaded.\",\"status\":\"UNAVAILABLE\"}}\n\n",
        ));
        assert_eq!(
            got[1],
            Err(LlmError::Upstream(
                "The model is overloaded. (UNAVAILABLE)".into()
            ))
        );
        // Without a finish reason, the end of the body is a dropped stream.
        let got =
            events("data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}]}}]}\n\n");
        assert!(matches!(got[1], Err(LlmError::Transport(_))), "{got:?}");
        let got = events("data: {\"promptFeedback\":{\"blockReason\":\"SAFETY\"}}\n\n");
        assert_eq!(got, [Ok(LlmEvent::Finish(LlmFinishReason::ContentFilter))]);
    }
}
