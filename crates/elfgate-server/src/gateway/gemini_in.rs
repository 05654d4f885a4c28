//! The Gemini API (`generateContent`) → the internal form: `contents`, `systemInstruction`,
//! `tools`, `toolConfig` and `generationConfig` as elfgate-llm's request, and the prompt stored
//! with the session.

use super::Inbound;
use super::body::{PathStyle, required, typed};
use super::openai_in::last_user_text;
use crate::error::ApiError;
use elfgate_core::{ContentBlock, Role, ThinkingLevel};
use elfgate_llm::wire::gemini::ThinkingConfig;
use elfgate_llm::{LlmMessage, LlmRequest, ToolChoice, ToolSpec};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::collections::VecDeque;

/// A generateContent request, as far as the door reads it (other fields are tolerated).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GenerateRequest {
    contents: Option<Vec<InContent>>,
    system_instruction: Option<SystemInstruction>,
    tools: Option<Vec<Map<String, Value>>>,
    tool_config: Option<ToolConfig>,
    generation_config: Option<GenerationConfig>,
}

#[derive(Debug, Deserialize)]
struct SystemInstruction {
    #[serde(default)]
    parts: Vec<Part>,
}

#[derive(Debug, Deserialize)]
struct InContent {
    role: Option<String>,
    #[serde(default)]
    parts: Vec<Part>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Part {
    text: Option<String>,
    #[serde(default)]
    thought: bool,
    thought_signature: Option<String>,
    inline_data: Option<Blob>,
    file_data: Option<FileData>,
    function_call: Option<FunctionCall>,
    function_response: Option<FunctionResponse>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Blob {
    mime_type: String,
    data: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FileData {
    mime_type: Option<String>,
    file_uri: String,
}

#[derive(Debug, Deserialize)]
struct FunctionCall {
    id: Option<String>,
    name: String,
    #[serde(default)]
    args: Value,
}

#[derive(Debug, Deserialize)]
struct FunctionResponse {
    id: Option<String>,
    name: String,
    #[serde(default)]
    response: Value,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolConfig {
    function_calling_config: Option<FunctionCallingConfig>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FunctionCallingConfig {
    mode: Option<String>,
    allowed_function_names: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GenerationConfig {
    temperature: Option<f32>,
    max_output_tokens: Option<u32>,
    stop_sequences: Option<Vec<String>>,
    thinking_config: Option<ThinkingConfig>,
    response_mime_type: Option<String>,
    response_json_schema: Option<Value>,
    response_schema: Option<Value>,
}

/// A generateContent request in the internal form, with what only this door needs.
#[derive(Debug)]
pub struct GeminiInbound {
    /// The common part (`model` from the path).
    pub inbound: Inbound,
    /// Built-in tools (`googleSearch`, `codeExecution`, …) by key; checked against the route.
    pub builtin_tools: Vec<String>,
}

/// The tool keys that mean "search the web", served by a kind's native search.
pub const SEARCH_TOOLS: [&str; 2] = ["googleSearch", "googleSearchRetrieval"];

/// Parses a generateContent body for `model` (from the path); `stream` from the action.
pub fn parse(model: &str, body: &Value, stream: bool) -> Result<GeminiInbound, ApiError> {
    let r: GenerateRequest = typed(body, PathStyle::Dots)?;
    let contents = required(r.contents, "contents")?;
    let system: Vec<String> = r
        .system_instruction
        .map(|s| s.parts.into_iter().filter_map(|p| p.text).collect())
        .unwrap_or_default();
    let mut messages = Vec::new();
    // Calls without an id get one; a response without one answers the oldest open call of its
    // name.
    let mut open_calls: VecDeque<(String, String)> = VecDeque::new();
    let mut next_id = 0usize;
    for (i, c) in contents.into_iter().enumerate() {
        let role = match c.role.as_deref() {
            None | Some("user") => Role::User,
            Some("model") => Role::Assistant,
            Some(other) => {
                return Err(ApiError::invalid(
                    Some(format!("contents.{i}.role")),
                    format!("'contents.{i}.role': unknown role '{other}' (user, model)"),
                ));
            }
        };
        let mut blocks = Vec::new();
        let mut results = Vec::new();
        for p in c.parts {
            if let Some(sig) = &p.thought_signature
                && role == Role::Assistant
            {
                // The signature this door gave out (the stored one), back to its provider kind.
                blocks.push(ContentBlock::Thinking {
                    thinking: if p.thought {
                        p.text.clone().unwrap_or_default()
                    } else {
                        String::new()
                    },
                    signature: Some(sig.clone()),
                });
            } else if p.thought {
                if role == Role::Assistant {
                    blocks.push(ContentBlock::Thinking {
                        thinking: p.text.clone().unwrap_or_default(),
                        signature: None,
                    });
                }
                continue;
            }
            if let Some(t) = p.text.filter(|_| !p.thought) {
                blocks.push(ContentBlock::text(t));
            }
            if let Some(b) = p.inline_data {
                blocks.push(inline(b));
            }
            if let Some(f) = p.file_data {
                blocks.push(ContentBlock::Document {
                    media_type: f.mime_type.unwrap_or_else(|| "application/pdf".into()),
                    name: None,
                    data: None,
                    url: Some(f.file_uri),
                });
            }
            if let Some(call) = p.function_call {
                let id = call.id.unwrap_or_else(|| {
                    next_id += 1;
                    format!("call_{next_id}")
                });
                open_calls.push_back((id.clone(), call.name.clone()));
                blocks.push(ContentBlock::ToolUse {
                    id,
                    name: call.name,
                    input: if call.args.is_null() {
                        json!({})
                    } else {
                        call.args
                    },
                });
            }
            if let Some(resp) = p.function_response {
                let id = match resp.id {
                    Some(id) => {
                        open_calls.retain(|(open, _)| *open != id);
                        id
                    }
                    None => match open_calls.iter().position(|(_, n)| *n == resp.name) {
                        Some(k) => open_calls.remove(k).map(|(id, _)| id).unwrap_or_default(),
                        None => resp.name.clone(),
                    },
                };
                let (content, is_error) = response_text(&resp.response);
                results.push(ContentBlock::ToolResult {
                    tool_use_id: id,
                    content,
                    is_error,
                });
            }
        }
        if !results.is_empty() {
            messages.push(LlmMessage {
                role: Role::Tool,
                blocks: results,
            });
        }
        if !blocks.is_empty() {
            messages.push(LlmMessage { role, blocks });
        }
    }
    let mut tools = Vec::new();
    let mut builtin_tools = Vec::new();
    for (i, t) in r.tools.unwrap_or_default().into_iter().enumerate() {
        for (key, v) in t {
            if key != "functionDeclarations" {
                builtin_tools.push(key);
                continue;
            }
            for (j, d) in v.as_array().into_iter().flatten().enumerate() {
                let name = d.get("name").and_then(Value::as_str).ok_or_else(|| {
                    let param = format!("tools.{i}.functionDeclarations.{j}.name");
                    ApiError::invalid(Some(param.clone()), format!("'{param}': missing"))
                })?;
                let schema = d
                    .get("parametersJsonSchema")
                    .or_else(|| d.get("parameters"))
                    .filter(|p| !p.is_null())
                    .map(json_schema)
                    .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
                tools.push(ToolSpec {
                    name: name.to_string(),
                    description: d
                        .get("description")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    input_schema: schema,
                });
            }
        }
    }
    let tool_choice = r
        .tool_config
        .and_then(|t| t.function_calling_config)
        .and_then(|c| match c.mode.as_deref() {
            Some("NONE") => Some(ToolChoice::None),
            Some("ANY") => match c.allowed_function_names.as_deref() {
                Some([one]) => Some(ToolChoice::Tool(one.clone())),
                _ => Some(ToolChoice::Required),
            },
            Some("AUTO" | "VALIDATED") => Some(ToolChoice::Auto),
            _ => None,
        });
    let g = r.generation_config;
    let thinking = g
        .as_ref()
        .and_then(|g| g.thinking_config.as_ref())
        .map_or_else(ThinkingLevel::default, ThinkingConfig::level);
    let response_format = g.as_ref().and_then(|g| {
        (g.response_mime_type.as_deref() == Some("application/json")).then(|| {
            match g.response_json_schema.as_ref().or(g.response_schema.as_ref()) {
                Some(schema) => json!({"type": "json_schema",
                                       "json_schema": {"name": "response", "schema": json_schema(schema)}}),
                None => json!({"type": "json_object"}),
            }
        })
    });
    let prompt = last_user_text(&messages);
    Ok(GeminiInbound {
        inbound: Inbound {
            model: model.to_string(),
            request: LlmRequest {
                model: String::new(),
                system: (!system.is_empty()).then(|| system.join("\n\n")),
                messages,
                temperature: g.as_ref().and_then(|g| g.temperature),
                max_tokens: g.as_ref().and_then(|g| g.max_output_tokens),
                thinking,
                tools,
                tool_choice,
                stop: g.and_then(|g| g.stop_sequences).unwrap_or_default(),
                response_format,
                cache_prefix_len: 0,
                passthrough: None,
                extended_context: false,
                native_search: false,
            },
            prompt,
            stream,
            stored_input: None,
            served_search: false,
        },
        builtin_tools,
    })
}

/// An inline blob: an image, or another file as a document.
fn inline(b: Blob) -> ContentBlock {
    if b.mime_type.starts_with("image/") {
        ContentBlock::Image {
            media_type: b.mime_type,
            data: Some(b.data),
            url: None,
        }
    } else {
        ContentBlock::Document {
            media_type: b.mime_type,
            name: None,
            data: Some(b.data),
            url: None,
        }
    }
}

/// A function response as the result text: its `output` (or `content`) when it is text, else
/// the whole response as JSON; an `error` key marks a failure.
fn response_text(response: &Value) -> (String, bool) {
    if let Some(e) = response.get("error") {
        return (text_or_json(e), true);
    }
    match response.get("output").or_else(|| response.get("content")) {
        Some(v) => (text_or_json(v), false),
        None => (text_or_json(response), false),
    }
}

fn text_or_json(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Gemini's OpenAPI-style schema (`type: "OBJECT"`, upper case) as JSON Schema (lower case); a
/// JSON Schema passes unchanged.
fn json_schema(v: &Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, v)| {
                    let v = match (k.as_str(), v) {
                        ("type", Value::String(t)) => Value::String(t.to_ascii_lowercase()),
                        _ => json_schema(v),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(json_schema).collect()),
        other => other.clone(),
    }
}
