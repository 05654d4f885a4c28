//! Anthropic Messages → the internal form: the request's system, messages, tools and settings as
//! elfgate-llm's request, and the prompt stored with the session.

use super::Inbound;
use super::body::Fields;
use super::openai_in::last_user_text;
use crate::error::ApiError;
use elfgate_core::{ContentBlock, Role, ThinkingLevel};
use elfgate_llm::{LlmMessage, LlmRequest, ProviderKind, ToolChoice, ToolSpec};
use serde_json::{Value, json};

fn bad(param: String, what: String) -> ApiError {
    ApiError::invalid(Some(param), what)
}

/// Parses a Messages body.
pub fn parse(body: &Value) -> Result<Inbound, ApiError> {
    let f = Fields(body);
    let model = f.req_str("model")?.to_string();
    let raw = f.req_array("messages")?;
    let stream = f.bool("stream")?.unwrap_or(false);
    let system = match f.get("system") {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        // cache_control marks on system blocks are not carried by the internal form.
        Some(Value::Array(blocks)) => Some(
            blocks
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n\n"),
        ),
        Some(_) => {
            return Err(bad(
                "system".into(),
                "'system' must be a string or an array of text blocks".into(),
            ));
        }
    };
    let mut messages = Vec::new();
    let mut more_system = Vec::new();
    for (i, m) in raw.iter().enumerate() {
        message(i, m, &mut messages, &mut more_system)?;
    }
    let system = match (system, more_system.is_empty()) {
        (s, true) => s,
        (None, false) => Some(more_system.join("\n\n")),
        (Some(s), false) => Some(format!("{s}\n\n{}", more_system.join("\n\n"))),
    };
    let tools = f
        .array("tools")?
        .map(|ts| {
            ts.iter()
                .enumerate()
                .map(|(i, t)| {
                    Ok(ToolSpec {
                        name: t["name"]
                            .as_str()
                            .ok_or_else(|| {
                                bad(
                                    format!("tools.{i}.name"),
                                    format!("tools[{i}] needs 'name'"),
                                )
                            })?
                            .to_string(),
                        description: t["description"].as_str().unwrap_or_default().to_string(),
                        input_schema: t
                            .get("input_schema")
                            .cloned()
                            .unwrap_or_else(|| json!({"type": "object"})),
                    })
                })
                .collect::<Result<Vec<_>, ApiError>>()
        })
        .transpose()?
        .unwrap_or_default();
    let tool_choice = match f.get("tool_choice") {
        None => None,
        Some(c) => Some(match c["type"].as_str() {
            Some("auto") => ToolChoice::Auto,
            Some("any") => ToolChoice::Required,
            Some("none") => ToolChoice::None,
            Some("tool") if c["name"].is_string() => {
                ToolChoice::Tool(c["name"].as_str().unwrap_or_default().to_string())
            }
            _ => {
                return Err(bad(
                    "tool_choice".into(),
                    "'tool_choice' must be {\"type\": \"auto\"|\"any\"|\"none\"|\"tool\"}".into(),
                ));
            }
        }),
    };
    let thinking = match f.get("thinking") {
        Some(t) if t["type"] == "enabled" => match t["budget_tokens"].as_u64().unwrap_or(0) {
            0..=4095 => ThinkingLevel::Low,
            4096..=16383 => ThinkingLevel::Medium,
            _ => ThinkingLevel::High,
        },
        _ => ThinkingLevel::default(),
    };
    let prompt = last_user_text(&messages);
    // Sent as given to an Anthropic provider: cache_control marks, redacted thinking and the
    // like survive. Not when system text sits among the messages, which the API would refuse.
    let passthrough = (!raw.iter().any(|m| m["role"] == "system")).then(|| {
        let fields = ["system", "messages", "tools"]
            .iter()
            .filter_map(|k| f.get(k).map(|v| (k.to_string(), v.clone())))
            .collect();
        (ProviderKind::Anthropic, fields)
    });
    Ok(Inbound {
        model,
        request: LlmRequest {
            model: String::new(),
            system,
            messages,
            temperature: f.f32("temperature")?,
            max_tokens: f.u32("max_tokens")?,
            thinking,
            tools,
            tool_choice,
            stop: f.strings("stop_sequences")?,
            response_format: None,
            // The caller's own cache marks travel in the passthrough (Anthropic callers).
            cache_prefix_len: 0,
            passthrough,
        },
        prompt,
        stream,
    })
}

fn message(
    i: usize,
    m: &Value,
    out: &mut Vec<LlmMessage>,
    system: &mut Vec<String>,
) -> Result<(), ApiError> {
    let role = match m["role"].as_str() {
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        // Some clients (claude-code among them) put system text among the messages.
        Some("system") => Role::System,
        _ => {
            return Err(bad(
                format!("messages.{i}.role"),
                format!("messages[{i}]: 'role' must be \"user\", \"assistant\" or \"system\""),
            ));
        }
    };
    let blocks: Vec<Value> = match &m["content"] {
        Value::String(s) => vec![json!({"type": "text", "text": s})],
        Value::Array(a) => a.clone(),
        _ => {
            return Err(bad(
                format!("messages.{i}.content"),
                format!("messages[{i}]: 'content' must be a string or an array of blocks"),
            ));
        }
    };
    let mut own = Vec::new();
    let mut results = Vec::new();
    for b in &blocks {
        match b["type"].as_str() {
            Some("text") => own.push(ContentBlock::text(b["text"].as_str().unwrap_or_default())),
            Some("image") => {
                let s = &b["source"];
                own.push(ContentBlock::Image {
                    media_type: s["media_type"].as_str().unwrap_or_default().to_string(),
                    data: s["data"].as_str().map(str::to_string),
                    url: s["url"].as_str().map(str::to_string),
                });
            }
            Some("thinking") => own.push(ContentBlock::Thinking {
                thinking: b["thinking"].as_str().unwrap_or_default().to_string(),
                signature: b["signature"].as_str().map(str::to_string),
            }),
            Some("tool_use") => own.push(ContentBlock::ToolUse {
                id: b["id"].as_str().unwrap_or_default().to_string(),
                name: b["name"].as_str().unwrap_or_default().to_string(),
                input: b["input"].clone(),
            }),
            Some("tool_result") => {
                let content = match &b["content"] {
                    Value::String(s) => s.clone(),
                    Value::Array(parts) => parts
                        .iter()
                        .filter_map(|p| p["text"].as_str())
                        .collect::<Vec<_>>()
                        .join("\n"),
                    _ => String::new(),
                };
                results.push(ContentBlock::ToolResult {
                    tool_use_id: b["tool_use_id"].as_str().unwrap_or_default().to_string(),
                    content,
                    is_error: b["is_error"].as_bool().unwrap_or(false),
                });
            }
            // redacted_thinking, documents and the like have no counterpart.
            _ => {}
        }
    }
    if role == Role::System {
        for b in own {
            if let ContentBlock::Text { text } = b {
                system.push(text);
            }
        }
        return Ok(());
    }
    if !results.is_empty() {
        out.push(LlmMessage {
            role: Role::Tool,
            blocks: results,
        });
    }
    if !own.is_empty() {
        out.push(LlmMessage { role, blocks: own });
    }
    Ok(())
}
