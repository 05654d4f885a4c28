//! OpenAI chat completions → the internal form: the request's messages, tools and settings as
//! elfgate-llm's request, and the prompt stored with the session.

use super::Inbound;
use super::body::Fields;
use crate::error::ApiError;
use elfgate_core::{ContentBlock, Role, ThinkingLevel};
use elfgate_llm::{LlmMessage, LlmRequest, ToolChoice, ToolSpec};
use serde_json::{Value, json};

/// Parses a chat completions body.
pub fn parse(body: &Value) -> Result<(Inbound, bool), ApiError> {
    let f = Fields(body);
    let model = f.req_str("model")?.to_string();
    let raw = f.req_array("messages")?;
    if let Some(n) = f.u32("n")?
        && n != 1
    {
        return Err(ApiError::invalid(
            Some("n".to_string()),
            "only n=1 is supported",
        ));
    }
    let stream = f.bool("stream")?.unwrap_or(false);
    let include_usage = match f.get("stream_options") {
        None => false,
        Some(o) if o.is_object() => Fields(o).bool("include_usage")?.unwrap_or(false),
        Some(_) => {
            return Err(ApiError::invalid(
                Some("stream_options".to_string()),
                "'stream_options' must be an object",
            ));
        }
    };
    let mut system = Vec::new();
    let mut messages = Vec::new();
    for (i, m) in raw.iter().enumerate() {
        message(i, m, &mut system, &mut messages)?;
    }
    let prompt = last_user_text(&messages);
    let tools = f
        .array("tools")?
        .map(|ts| ts.iter().enumerate().map(|(i, t)| tool(i, t)).collect())
        .transpose()?
        .unwrap_or_default();
    let tool_choice = f.get("tool_choice").map(tool_choice).transpose()?;
    let response_format = match f.get("response_format") {
        Some(v) if !v.is_object() => {
            return Err(ApiError::invalid(
                Some("response_format".to_string()),
                "'response_format' must be an object",
            ));
        }
        other => other.cloned(),
    };
    let thinking = match f.get("reasoning_effort").and_then(Value::as_str) {
        Some("minimal" | "low") => ThinkingLevel::Low,
        Some("medium") => ThinkingLevel::Medium,
        Some("high") => ThinkingLevel::High,
        _ => ThinkingLevel::default(),
    };
    let request = LlmRequest {
        model: String::new(),
        system: (!system.is_empty()).then(|| system.join("\n\n")),
        messages,
        temperature: f.f32("temperature")?,
        max_tokens: f.u32("max_completion_tokens")?.or(f.u32("max_tokens")?),
        thinking,
        tools,
        tool_choice,
        stop: f.strings("stop")?,
        response_format,
        // The caller's own cache marks travel in the passthrough (Anthropic callers).
        cache_prefix_len: 0,
        passthrough: None,
    };
    Ok((
        Inbound {
            model,
            request,
            prompt,
            stream,
        },
        include_usage,
    ))
}

/// The text of the last user message (the prompt stored with the session).
pub fn last_user_text(messages: &[LlmMessage]) -> String {
    messages
        .iter()
        .rev()
        .find(|m| m.role == Role::User)
        .map(|m| text_of(&m.blocks))
        .unwrap_or_default()
}

fn bad(i: usize, what: &str) -> ApiError {
    ApiError::invalid(
        Some(format!("messages[{i}]")),
        format!("messages[{i}]: {what}"),
    )
}

/// Text and image parts of a `content`.
fn content_blocks(i: usize, content: Option<&Value>) -> Result<Vec<ContentBlock>, ApiError> {
    match content {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![ContentBlock::text(s.clone())]),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| match p["type"].as_str() {
                Some("text") => Some(
                    p["text"]
                        .as_str()
                        .map(ContentBlock::text)
                        .ok_or_else(|| bad(i, "a text part needs 'text'")),
                ),
                Some("image_url") => {
                    let url = p["image_url"]["url"]
                        .as_str()
                        .or_else(|| p["image_url"].as_str());
                    Some(
                        url.map(image)
                            .ok_or_else(|| bad(i, "an image part needs a url")),
                    )
                }
                // Audio and file parts have no counterpart in the internal form.
                _ => None,
            })
            .collect(),
        Some(_) => Err(bad(i, "'content' must be a string or an array of parts")),
    }
}

/// An image block from a URL; a `data:` URL becomes inline data.
pub fn image(url: &str) -> ContentBlock {
    if let Some(rest) = url.strip_prefix("data:")
        && let Some((meta, data)) = rest.split_once(',')
        && let Some(media_type) = meta.strip_suffix(";base64")
    {
        return ContentBlock::Image {
            media_type: media_type.to_string(),
            data: Some(data.to_string()),
            url: None,
        };
    }
    ContentBlock::Image {
        media_type: String::new(),
        data: None,
        url: Some(url.to_string()),
    }
}

fn text_of(blocks: &[ContentBlock]) -> String {
    blocks
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn message(
    i: usize,
    m: &Value,
    system: &mut Vec<String>,
    out: &mut Vec<LlmMessage>,
) -> Result<(), ApiError> {
    if !m.is_object() {
        return Err(bad(i, "a message must be an object"));
    }
    let role = m["role"]
        .as_str()
        .ok_or_else(|| bad(i, "'role' is required"))?;
    let blocks = content_blocks(i, m.get("content"))?;
    match role {
        "system" | "developer" => system.push(text_of(&blocks)),
        "user" => out.push(LlmMessage {
            role: Role::User,
            blocks,
        }),
        "assistant" => {
            let mut blocks = blocks;
            if let Some(r) = m["reasoning_content"].as_str().filter(|r| !r.is_empty()) {
                blocks.insert(
                    0,
                    ContentBlock::Thinking {
                        thinking: r.to_string(),
                        signature: None,
                    },
                );
            }
            for c in m["tool_calls"].as_array().into_iter().flatten() {
                let args = c["function"]["arguments"].as_str().unwrap_or("{}");
                blocks.push(ContentBlock::ToolUse {
                    id: c["id"].as_str().unwrap_or_default().to_string(),
                    name: c["function"]["name"]
                        .as_str()
                        .ok_or_else(|| bad(i, "a tool call needs function.name"))?
                        .to_string(),
                    input: serde_json::from_str(args).unwrap_or(Value::String(args.into())),
                });
            }
            out.push(LlmMessage {
                role: Role::Assistant,
                blocks,
            });
        }
        "tool" => {
            let id = m["tool_call_id"]
                .as_str()
                .ok_or_else(|| bad(i, "a tool message needs 'tool_call_id'"))?;
            out.push(LlmMessage {
                role: Role::Tool,
                blocks: vec![ContentBlock::ToolResult {
                    tool_use_id: id.to_string(),
                    content: text_of(&blocks),
                    is_error: false,
                }],
            });
        }
        other => return Err(bad(i, &format!("unknown role '{other}'"))),
    }
    Ok(())
}

fn tool(i: usize, t: &Value) -> Result<ToolSpec, ApiError> {
    let f = &t["function"];
    let name = f["name"].as_str().ok_or_else(|| {
        ApiError::invalid(
            Some(format!("tools[{i}].function.name")),
            format!("tools[{i}] needs function.name"),
        )
    })?;
    Ok(ToolSpec {
        name: name.to_string(),
        description: f["description"].as_str().unwrap_or_default().to_string(),
        input_schema: f
            .get("parameters")
            .cloned()
            .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
    })
}

fn tool_choice(v: &Value) -> Result<ToolChoice, ApiError> {
    match v {
        Value::String(s) if s == "auto" => Ok(ToolChoice::Auto),
        Value::String(s) if s == "none" => Ok(ToolChoice::None),
        Value::String(s) if s == "required" => Ok(ToolChoice::Required),
        Value::Object(_) if v["function"]["name"].is_string() => Ok(ToolChoice::Tool(
            v["function"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )),
        _ => Err(ApiError::invalid(
            Some("tool_choice".to_string()),
            "'tool_choice' must be \"auto\", \"none\", \"required\" or \
             {\"type\":\"function\",\"function\":{\"name\":...}}",
        )),
    }
}
