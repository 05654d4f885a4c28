//! Request encoding: the conversation and settings as the API's request body.

use crate::signature;
use crate::wire::gemini::ThinkingConfig;
use crate::{ContentBlock, LlmRequest, ProviderKind, Role, ToolChoice};
use serde_json::{Map, Value, json};
use std::collections::HashMap;

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
    if req.native_search {
        let grounding = json!({ "googleSearch": {} });
        match body.get_mut("tools").and_then(Value::as_array_mut) {
            Some(tools) => tools.push(grounding),
            None => {
                body.insert("tools".into(), json!([grounding]));
            }
        }
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
        gen_config.insert("temperature".into(), crate::wire_f32(t));
    }
    if let Some(m) = req.max_tokens {
        gen_config.insert("maxOutputTokens".into(), json!(m));
    }
    if let Some(thinking) = ThinkingConfig::for_level(req.thinking) {
        gen_config.insert("thinkingConfig".into(), json!(thinking));
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
                ContentBlock::Document {
                    media_type,
                    name,
                    data,
                    ..
                } if role == "user"
                    && ProviderKind::Gemini
                        .takes_document(media_type, data.is_none())
                        .is_err() =>
                {
                    parts.push(json!({
                        "text": ProviderKind::Gemini.document_note(name.as_deref(), media_type)
                    }));
                }
                ContentBlock::Image {
                    media_type,
                    data,
                    url,
                }
                | ContentBlock::Document {
                    media_type,
                    data,
                    url,
                    ..
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
