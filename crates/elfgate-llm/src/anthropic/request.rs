//! Request encoding: the conversation and settings as the API's request body.

use crate::signature;
use crate::wire::anthropic::ThinkingParam;
use crate::wire::thinking_budget;
use crate::{ContentBlock, LlmRequest, ProviderKind, Role, ToolChoice};
use serde_json::{Map, Value, json};

/// The type of Anthropic's server-side web search tool.
const WEB_SEARCH_TOOL: &str = "web_search_20250305";

/// `max_tokens` when the request sets none (the API requires it).
const DEFAULT_MAX_TOKENS: u32 = 8192;

/// Builds the JSON request body.
pub(crate) fn build_body(req: &LlmRequest, model: &str) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), Value::String(model.to_string()));
    let budget = thinking_budget(req.thinking);
    let mut max_tokens = req.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS).max(1);
    if let Some(b) = budget
        && max_tokens <= b
    {
        // The budget counts against max_tokens; keep room for the answer.
        max_tokens = max_tokens.saturating_add(b);
    }
    body.insert("max_tokens".into(), json!(max_tokens));

    let mut system = req.system.clone().unwrap_or_default();
    // The stable prefix must be cut before anything is appended to the system text.
    let prefix_len = Some(req.cache_prefix_len)
        .filter(|n| *n > 0 && *n <= system.len() && system.is_char_boundary(*n))
        .unwrap_or(0);
    for m in req.messages.iter().filter(|m| m.role == Role::System) {
        for b in &m.blocks {
            if let ContentBlock::Text { text } = b
                && !text.is_empty()
            {
                if !system.is_empty() {
                    system.push_str("\n\n");
                }
                system.push_str(text);
            }
        }
    }
    if prefix_len > 0 {
        body.insert("system".into(), system_blocks(&system, prefix_len));
    } else if !system.is_empty() {
        body.insert("system".into(), Value::String(system));
    }
    body.insert("messages".into(), Value::Array(map_messages(req)));
    if let Some(t) = req.temperature
        && budget.is_none()
    {
        body.insert("temperature".into(), crate::wire_f32(t));
    }
    body.insert("stream".into(), Value::Bool(true));
    if !req.tools.is_empty() || req.native_search {
        let mut tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "description": t.description,
                    "input_schema": t.input_schema,
                })
            })
            .collect();
        if req.native_search {
            tools.push(json!({ "type": WEB_SEARCH_TOOL, "name": "web_search" }));
        }
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = &req.tool_choice {
        let choice = match choice {
            ToolChoice::Auto => json!({"type": "auto"}),
            ToolChoice::None => json!({"type": "none"}),
            ToolChoice::Required => json!({"type": "any"}),
            ToolChoice::Tool(name) => json!({"type": "tool", "name": name}),
        };
        body.insert("tool_choice".into(), choice);
    }
    if !req.stop.is_empty() {
        body.insert("stop_sequences".into(), json!(req.stop));
    }
    if let Some(thinking) = ThinkingParam::for_level(req.thinking) {
        body.insert("thinking".into(), json!(thinking));
    }
    if let Some((ProviderKind::Anthropic, fields)) = &req.passthrough {
        for (k, v) in fields {
            body.insert(k.clone(), v.clone());
        }
    }
    Value::Object(body)
}

/// The system prompt as text blocks: the stable prefix first, marked with `cache_control` so that
/// the provider caches everything up to it (tools and prefix), then the rest, which may change
/// from call to call.
fn system_blocks(system: &str, prefix_len: usize) -> Value {
    let (prefix, rest) = system.split_at(prefix_len);
    let mut blocks = vec![json!({
        "type": "text",
        "text": prefix,
        "cache_control": {"type": "ephemeral"},
    })];
    if !rest.is_empty() {
        blocks.push(json!({ "type": "text", "text": rest }));
    }
    Value::Array(blocks)
}

/// A tool_use input as the object the API requires. Raw (string) input that
/// parses as a JSON object is used as such; anything else becomes `{}`.
fn tool_input(input: &Value) -> Value {
    match input {
        Value::Object(_) => input.clone(),
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(v @ Value::Object(_)) => v,
            _ => json!({}),
        },
        _ => json!({}),
    }
}

pub(super) fn map_block(block: &ContentBlock, role: Role) -> Option<Value> {
    match block {
        ContentBlock::Text { text } if !text.is_empty() => {
            Some(json!({ "type": "text", "text": text }))
        }
        ContentBlock::Text { .. } => None,
        ContentBlock::Image {
            media_type,
            data,
            url,
        } if role != Role::Assistant => match (data, url) {
            (Some(d), _) => Some(json!({
                "type": "image",
                "source": { "type": "base64", "media_type": media_type, "data": d },
            })),
            (None, Some(u)) => Some(json!({
                "type": "image",
                "source": { "type": "url", "url": u },
            })),
            (None, None) => None,
        },
        ContentBlock::Image { .. } => None,
        ContentBlock::Document {
            media_type,
            name,
            data,
            url,
        } if role != Role::Assistant => {
            if ProviderKind::Anthropic
                .takes_document(media_type, data.is_none())
                .is_err()
            {
                let note = ProviderKind::Anthropic.document_note(name.as_deref(), media_type);
                return Some(json!({ "type": "text", "text": note }));
            }
            let source = match (data, url) {
                (Some(d), _) => json!({ "type": "base64", "media_type": media_type, "data": d }),
                (None, Some(u)) => json!({ "type": "url", "url": u }),
                (None, None) => return None,
            };
            let mut doc = json!({ "type": "document", "source": source });
            if let Some(n) = name {
                doc["title"] = json!(n);
            }
            Some(doc)
        }
        ContentBlock::Document { .. } => None,
        // Only a signature Anthropic made: it verifies them.
        ContentBlock::Thinking {
            thinking,
            signature: Some(sig),
        } if role == Role::Assistant => signature::for_kind(ProviderKind::Anthropic, sig)
            .map(|sig| json!({ "type": "thinking", "thinking": thinking, "signature": sig })),
        ContentBlock::Thinking { .. } => None,
        ContentBlock::ToolUse { id, name, input } if role == Role::Assistant => Some(json!({
            "type": "tool_use", "id": id, "name": name, "input": tool_input(input),
        })),
        ContentBlock::ToolUse { .. } => None,
        ContentBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
        } if role != Role::Assistant => Some(json!({
            "type": "tool_result", "tool_use_id": tool_use_id, "content": content, "is_error": is_error,
        })),
        ContentBlock::ToolResult { .. } => None,
        ContentBlock::ProviderBlock {
            provider_kind,
            block,
        } if role == Role::Assistant && *provider_kind == ProviderKind::Anthropic => {
            Some(block.clone())
        }
        ContentBlock::ProviderBlock { .. } => None,
    }
}

/// Maps the conversation to Messages API messages: tool results become user
/// messages and consecutive same-role messages are merged.
pub(crate) fn map_messages(req: &LlmRequest) -> Vec<Value> {
    let mut merged: Vec<(&'static str, Vec<Value>)> = Vec::with_capacity(req.messages.len());
    for msg in &req.messages {
        let role = match msg.role {
            Role::System => continue, // folded into the system prompt
            Role::User | Role::Tool => "user",
            Role::Assistant => "assistant",
        };
        let blocks: Vec<Value> = msg
            .blocks
            .iter()
            .filter_map(|b| map_block(b, msg.role))
            .collect();
        if blocks.is_empty() {
            continue;
        }
        match merged.last_mut() {
            Some((r, existing)) if *r == role => existing.extend(blocks),
            _ => merged.push((role, blocks)),
        }
    }
    merged
        .into_iter()
        .map(|(role, mut blocks)| {
            if role == "user" {
                // The API wants tool_result blocks before any other user content.
                blocks
                    .sort_by_key(|b| b.get("type").and_then(Value::as_str) != Some("tool_result"));
            }
            json!({ "role": role, "content": blocks })
        })
        .collect()
}
