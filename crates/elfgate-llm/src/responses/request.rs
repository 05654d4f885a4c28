//! Request encoding: the conversation and settings as the API's request body.

use crate::signature;
use crate::wire::openai::reasoning_effort;
use crate::{ContentBlock, LlmRequest, ProviderKind, Role, ThinkingLevel, ToolChoice};
use serde_json::{Map, Value, json};

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
        body.insert("temperature".into(), crate::wire_f32(t));
    }
    if let Some(m) = req.max_tokens {
        body.insert("max_output_tokens".into(), json!(m));
    }
    if !req.tools.is_empty() || req.native_search {
        let mut tools: Vec<Value> = req
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
        if req.native_search {
            tools.push(json!({ "type": "web_search" }));
        }
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
    if let Some((ProviderKind::OpenaiResponses, fields)) = &req.passthrough {
        for (k, v) in fields {
            body.insert(k.clone(), v.clone());
        }
    }
    if let Some(effort) = reasoning_effort(req.thinking) {
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
                ContentBlock::Document {
                    media_type,
                    name,
                    data,
                    url,
                } if msg.role == Role::User => {
                    if ProviderKind::OpenaiResponses
                        .takes_document(media_type, data.is_none())
                        .is_err()
                    {
                        let note = ProviderKind::OpenaiResponses
                            .document_note(name.as_deref(), media_type);
                        content.push(json!({ "type": text_type, "text": note }));
                        continue;
                    }
                    let mut file = json!({ "type": "input_file" });
                    match (data, url) {
                        (Some(d), _) => {
                            file["filename"] = json!(name.as_deref().unwrap_or("attachment"));
                            file["file_data"] = json!(format!("data:{media_type};base64,{d}"));
                        }
                        (None, Some(u)) => file["file_url"] = json!(u),
                        (None, None) => continue,
                    }
                    content.push(file);
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
