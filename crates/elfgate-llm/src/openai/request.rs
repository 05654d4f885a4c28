//! Request encoding: the conversation and settings as the API's request body.

use crate::ProviderKind;
use crate::wire::openai::reasoning_effort;
use crate::{ContentBlock, LlmRequest, Role, ToolChoice};
use serde_json::{Map, Value, json};

/// Builds the JSON request body.
pub(crate) fn build_body(req: &LlmRequest, model: &str) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), Value::String(model.to_string()));
    body.insert("messages".into(), Value::Array(map_messages(req)));
    body.insert("stream".into(), Value::Bool(true));
    body.insert("stream_options".into(), json!({ "include_usage": true }));
    if let Some(t) = req.temperature {
        body.insert("temperature".into(), crate::wire_f32(t));
    }
    if let Some(m) = req.max_tokens {
        body.insert("max_tokens".into(), json!(m));
    }
    if !req.tools.is_empty() {
        let tools = req
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.input_schema,
                    }
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
            ToolChoice::Tool(name) => json!({"type": "function", "function": {"name": name}}),
        };
        body.insert("tool_choice".into(), choice);
    }
    if !req.stop.is_empty() {
        body.insert("stop".into(), json!(req.stop));
    }
    if let Some(format) = &req.response_format {
        body.insert("response_format".into(), format.clone());
    }
    if let Some(effort) = reasoning_effort(req.thinking) {
        body.insert("reasoning_effort".into(), Value::String(effort.into()));
    }
    Value::Object(body)
}

fn joined_text(blocks: &[ContentBlock]) -> String {
    let mut out = String::new();
    for b in blocks {
        if let ContentBlock::Text { text } = b {
            if !out.is_empty() && !text.is_empty() {
                out.push('\n');
            }
            out.push_str(text);
        }
    }
    out
}

fn image_url(media_type: &str, data: Option<&str>, url: Option<&str>) -> Option<String> {
    match (data, url) {
        (Some(d), _) => Some(format!("data:{media_type};base64,{d}")),
        (None, Some(u)) => Some(u.to_string()),
        (None, None) => None,
    }
}

/// Tool-call arguments as the JSON string OpenAI expects. A string input is
/// taken to be raw (possibly malformed) argument text and passed through.
fn arguments_text(input: &Value) -> String {
    match input {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn push_tool_results(blocks: &[ContentBlock], out: &mut Vec<Value>) {
    for b in blocks {
        if let ContentBlock::ToolResult {
            tool_use_id,
            content,
            ..
        } = b
        {
            out.push(json!({ "role": "tool", "tool_call_id": tool_use_id, "content": content }));
        }
    }
}

/// Maps the system prompt and conversation to Chat Completions messages.
pub(crate) fn map_messages(req: &LlmRequest) -> Vec<Value> {
    let mut out = Vec::with_capacity(req.messages.len() + 1);
    if let Some(system) = req.system.as_deref().filter(|s| !s.is_empty()) {
        out.push(json!({ "role": "system", "content": system }));
    }
    for msg in &req.messages {
        match msg.role {
            Role::System => {
                let text = joined_text(&msg.blocks);
                if !text.is_empty() {
                    out.push(json!({ "role": "system", "content": text }));
                }
            }
            Role::Tool => push_tool_results(&msg.blocks, &mut out),
            Role::User => {
                // Tool results must directly follow the assistant's tool calls.
                push_tool_results(&msg.blocks, &mut out);
                let has_image = msg.blocks.iter().any(|b| {
                    matches!(
                        b,
                        ContentBlock::Image { .. } | ContentBlock::Document { .. }
                    )
                });
                if has_image {
                    let mut parts = Vec::new();
                    for b in &msg.blocks {
                        match b {
                            ContentBlock::Text { text } if !text.is_empty() => {
                                parts.push(json!({ "type": "text", "text": text }));
                            }
                            ContentBlock::Image {
                                media_type,
                                data,
                                url,
                            } => {
                                if let Some(u) =
                                    image_url(media_type, data.as_deref(), url.as_deref())
                                {
                                    parts.push(
                                        json!({ "type": "image_url", "image_url": { "url": u } }),
                                    );
                                }
                            }
                            // Chat Completions takes files inline only (the daemon refuses a
                            // document by URL for this kind before the run).
                            ContentBlock::Document {
                                media_type,
                                name,
                                data: Some(d),
                                ..
                            } if ProviderKind::Openai
                                .takes_document(media_type, false)
                                .is_ok() =>
                            {
                                parts.push(json!({ "type": "file", "file": {
                                    "filename": name.as_deref().unwrap_or("attachment"),
                                    "file_data": format!("data:{media_type};base64,{d}"),
                                }}));
                            }
                            ContentBlock::Document {
                                media_type, name, ..
                            } => {
                                let note =
                                    ProviderKind::Openai.document_note(name.as_deref(), media_type);
                                parts.push(json!({ "type": "text", "text": note }));
                            }
                            _ => {}
                        }
                    }
                    out.push(json!({ "role": "user", "content": parts }));
                } else if msg
                    .blocks
                    .iter()
                    .any(|b| matches!(b, ContentBlock::Text { .. }))
                {
                    out.push(json!({ "role": "user", "content": joined_text(&msg.blocks) }));
                }
            }
            Role::Assistant => {
                let text = joined_text(&msg.blocks);
                let calls: Vec<Value> = msg
                    .blocks
                    .iter()
                    .filter_map(|b| match b {
                        ContentBlock::ToolUse { id, name, input } => Some(json!({
                            "id": id,
                            "type": "function",
                            "function": { "name": name, "arguments": arguments_text(input) },
                        })),
                        _ => None,
                    })
                    .collect();
                if text.is_empty() && calls.is_empty() {
                    continue;
                }
                let mut m = Map::new();
                m.insert("role".into(), Value::String("assistant".into()));
                m.insert(
                    "content".into(),
                    if text.is_empty() {
                        Value::Null
                    } else {
                        Value::String(text)
                    },
                );
                if !calls.is_empty() {
                    m.insert("tool_calls".into(), Value::Array(calls));
                }
                out.push(Value::Object(m));
                // Tool results stored on an assistant message still need answering.
                push_tool_results(&msg.blocks, &mut out);
            }
        }
    }
    out
}
