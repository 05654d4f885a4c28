//! OpenAI Responses → the internal form: `instructions`, the `input` items (messages,
//! function_call, function_call_output, reasoning), tools and settings as elfgate-llm's request,
//! and the prompt stored with the session.

use super::Inbound;
use super::body::{PathStyle, required, typed};
use super::openai_in::{image, last_user_text};
use crate::error::ApiError;
use elfgate_core::{ContentBlock, Role, ThinkingLevel};
use elfgate_llm::wire::openai::level_of_effort;
use elfgate_llm::{LlmMessage, LlmRequest, ToolChoice, ToolSpec};
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// A Responses request, as far as the door reads it (other fields are tolerated).
#[derive(Debug, Deserialize)]
struct ResponsesRequest {
    model: Option<String>,
    input: Option<Input>,
    instructions: Option<String>,
    tools: Option<Vec<Map<String, Value>>>,
    tool_choice: Option<Value>,
    text: Option<TextParam>,
    reasoning: Option<ReasoningParam>,
    max_output_tokens: Option<u32>,
    temperature: Option<f32>,
    stream: Option<bool>,
    store: Option<bool>,
    previous_response_id: Option<String>,
    include: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "'input' must be a string or an array of input items"
)]
enum Input {
    Text(String),
    Items(Vec<Map<String, Value>>),
}

#[derive(Debug, Deserialize)]
struct TextParam {
    format: Option<Map<String, Value>>,
}

#[derive(Debug, Deserialize)]
struct ReasoningParam {
    effort: Option<String>,
}

/// One message content part.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Part {
    InputText {
        text: String,
    },
    OutputText {
        text: String,
    },
    /// Older clients write plain `text` parts.
    Text {
        text: String,
    },
    InputImage {
        image_url: Option<String>,
    },
    InputFile {
        file_data: Option<String>,
        filename: Option<String>,
        file_url: Option<String>,
    },
    Refusal {
        refusal: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "a message's 'content' must be a string or an array of parts"
)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Deserialize)]
struct MessageItem {
    role: String,
    content: Content,
}

#[derive(Debug, Deserialize)]
struct FunctionCallItem {
    call_id: String,
    name: String,
    arguments: Option<String>,
}

#[derive(Debug, Deserialize)]
struct FunctionCallOutputItem {
    call_id: String,
    output: Content,
}

#[derive(Debug, Deserialize)]
struct SummaryPart {
    text: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ReasoningItem {
    #[serde(default)]
    summary: Vec<SummaryPart>,
    encrypted_content: Option<String>,
}

/// A Responses request in the internal form, with what only this door needs.
#[derive(Debug)]
pub struct ResponsesInbound {
    /// The common part.
    pub inbound: Inbound,
    /// `previous_response_id`: the stored response whose conversation this one continues.
    pub previous_response_id: Option<String>,
    /// `store: false`: the call's session is deleted once it is answered.
    pub store: bool,
    /// Whether the answer's reasoning items carry `encrypted_content`.
    pub include_encrypted_reasoning: bool,
    /// Built-in tools (`web_search`, `file_search`, …) by type, in the order given; each is
    /// checked against the route's provider once it is known.
    pub builtin_tools: Vec<String>,
    /// The caller's `tools` as given, sent as such to a Responses provider (built-in tools
    /// included).
    pub raw_tools: Option<Value>,
    /// Whether the input holds only a new turn (user messages and function call outputs, no
    /// assistant items): then it is what the session stores as the call's input.
    pub input_is_new_turn: bool,
}

/// Parses a Responses body.
pub fn parse(body: &Value) -> Result<ResponsesInbound, ApiError> {
    let r: ResponsesRequest = typed(body, PathStyle::Brackets)?;
    let model = required(r.model, "model")?;
    let input = required(r.input, "input")?;
    let mut system: Vec<String> = r.instructions.into_iter().collect();
    let mut messages: Vec<LlmMessage> = Vec::new();
    let mut input_is_new_turn = true;
    match input {
        Input::Text(t) => messages.push(LlmMessage {
            role: Role::User,
            blocks: vec![ContentBlock::text(t)],
        }),
        Input::Items(items) => {
            for (i, item) in items.into_iter().enumerate() {
                let new_turn = input_item(i, item, &mut system, &mut messages)?;
                input_is_new_turn &= new_turn;
            }
        }
    }
    let mut tools = Vec::new();
    let mut builtin_tools = Vec::new();
    let raw_tools = body.get("tools").filter(|t| !t.is_null()).cloned();
    // A namespace groups function tools (codex's sub-agent tools): its tools are offered as
    // plain function tools, under their own names.
    let mut flat = Vec::new();
    for (i, t) in r.tools.unwrap_or_default().into_iter().enumerate() {
        match t.get("type").and_then(Value::as_str) {
            Some("namespace") => {
                for inner in t
                    .get("tools")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if let Value::Object(o) = inner {
                        flat.push((i, o.clone()));
                    }
                }
            }
            _ => flat.push((i, t)),
        }
    }
    for (i, t) in flat {
        let kind = t.get("type").and_then(Value::as_str).unwrap_or("function");
        if kind != "function" {
            builtin_tools.push(kind.to_string());
            continue;
        }
        let name = t
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                ApiError::invalid(
                    Some(format!("tools[{i}].name")),
                    format!("'tools[{i}].name': a function tool needs a name"),
                )
            })?
            .to_string();
        tools.push(ToolSpec {
            name,
            description: t
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            input_schema: t
                .get("parameters")
                .filter(|p| !p.is_null())
                .cloned()
                .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
        });
    }
    let tool_choice = r.tool_choice.map(tool_choice).transpose()?;
    let thinking = match r.reasoning.and_then(|r| r.effort).as_deref() {
        // The Responses API's own level above `high`.
        Some("xhigh") => ThinkingLevel::High,
        effort => effort.and_then(level_of_effort).unwrap_or_default(),
    };
    let response_format = r.text.and_then(|t| t.format).map(response_format);
    let prompt = last_user_text(&messages);
    let stream = r.stream.unwrap_or(false);
    Ok(ResponsesInbound {
        inbound: Inbound {
            model,
            request: LlmRequest {
                model: String::new(),
                system: (!system.is_empty()).then(|| system.join("\n\n")),
                messages,
                temperature: r.temperature,
                max_tokens: r.max_output_tokens,
                thinking,
                tools,
                tool_choice,
                stop: Vec::new(),
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
        previous_response_id: r.previous_response_id,
        store: r.store.unwrap_or(true),
        include_encrypted_reasoning: r
            .include
            .unwrap_or_default()
            .iter()
            .any(|i| i == "reasoning.encrypted_content"),
        builtin_tools,
        raw_tools,
        input_is_new_turn,
    })
}

/// `text.format` as chat completions' `response_format`, the internal form's (the JSON schema's
/// fields go one level down, under `json_schema`).
fn response_format(mut format: Map<String, Value>) -> Value {
    if format.get("type").and_then(Value::as_str) == Some("json_schema") {
        format.remove("type");
        return json!({"type": "json_schema", "json_schema": Value::Object(format)});
    }
    Value::Object(format)
}

fn tool_choice(v: Value) -> Result<ToolChoice, ApiError> {
    match &v {
        Value::String(s) if s == "auto" => Ok(ToolChoice::Auto),
        Value::String(s) if s == "none" => Ok(ToolChoice::None),
        Value::String(s) if s == "required" => Ok(ToolChoice::Required),
        Value::Object(o)
            if o.get("type").and_then(Value::as_str) == Some("function")
                && o.get("name").and_then(Value::as_str).is_some() =>
        {
            Ok(ToolChoice::Tool(
                o.get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            ))
        }
        _ => Err(ApiError::invalid(
            Some("tool_choice".to_string()),
            "'tool_choice' must be \"auto\", \"none\", \"required\" or \
             {\"type\":\"function\",\"name\":...}",
        )),
    }
}

/// Reads a typed item, naming it on failure.
fn item_as<T: serde::de::DeserializeOwned>(
    i: usize,
    item: Map<String, Value>,
) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(Value::Object(item)).map_err(|e| {
        let path = e.path().to_string();
        let param = if path == "." || path.is_empty() {
            format!("input[{i}]")
        } else {
            format!("input[{i}].{path}")
        };
        ApiError::invalid(Some(param.clone()), format!("'{param}': {}", e.inner()))
    })
}

/// Adds the blocks of `content` (a message's) to `blocks`.
fn content_blocks(content: Content, blocks: &mut Vec<ContentBlock>) {
    match content {
        Content::Text(t) => blocks.push(ContentBlock::text(t)),
        Content::Parts(parts) => {
            for p in parts {
                match p {
                    Part::InputText { text } | Part::OutputText { text } | Part::Text { text } => {
                        blocks.push(ContentBlock::text(text));
                    }
                    Part::Refusal { refusal } => blocks.push(ContentBlock::text(refusal)),
                    Part::InputImage {
                        image_url: Some(url),
                    } => blocks.push(image(&url)),
                    Part::InputFile {
                        file_data,
                        filename,
                        file_url,
                    } => blocks.push(file_block(file_data, filename, file_url)),
                    Part::InputImage { image_url: None } | Part::Other => {}
                }
            }
        }
    }
}

/// An `input_file` part as a document block (`file_data` is a data URL).
fn file_block(
    file_data: Option<String>,
    filename: Option<String>,
    file_url: Option<String>,
) -> ContentBlock {
    let (media_type, data) = match file_data.as_deref().and_then(|d| d.strip_prefix("data:")) {
        Some(rest) => match rest.split_once(";base64,") {
            Some((m, d)) => (m.to_string(), Some(d.to_string())),
            None => ("application/octet-stream".to_string(), None),
        },
        None => ("application/pdf".to_string(), None),
    };
    ContentBlock::Document {
        media_type,
        name: filename,
        data,
        url: file_url,
    }
}

/// Appends `blocks` as a message of `role`; an assistant's joins the assistant message before it
/// (an answer's reasoning, message and calls are separate items).
fn push(messages: &mut Vec<LlmMessage>, role: Role, blocks: Vec<ContentBlock>) {
    match messages.last_mut() {
        Some(last) if last.role == role && role == Role::Assistant => last.blocks.extend(blocks),
        _ => messages.push(LlmMessage { role, blocks }),
    }
}

/// Reads input item `i`; whether it belongs to a new turn (not an earlier answer).
fn input_item(
    i: usize,
    item: Map<String, Value>,
    system: &mut Vec<String>,
    messages: &mut Vec<LlmMessage>,
) -> Result<bool, ApiError> {
    let kind = item
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message")
        .to_string();
    match kind.as_str() {
        "message" => {
            let m: MessageItem = item_as(i, item)?;
            let mut blocks = Vec::new();
            content_blocks(m.content, &mut blocks);
            match m.role.as_str() {
                "system" | "developer" => {
                    let text: Vec<String> = blocks
                        .into_iter()
                        .filter_map(|b| match b {
                            ContentBlock::Text { text } => Some(text),
                            _ => None,
                        })
                        .collect();
                    system.push(text.join("\n"));
                    Ok(true)
                }
                "user" => {
                    push(messages, Role::User, blocks);
                    Ok(true)
                }
                "assistant" => {
                    push(messages, Role::Assistant, blocks);
                    Ok(false)
                }
                other => Err(ApiError::invalid(
                    Some(format!("input[{i}].role")),
                    format!(
                        "'input[{i}].role': unknown role '{other}' (user, assistant, system, \
                         developer)"
                    ),
                )),
            }
        }
        "function_call" => {
            let c: FunctionCallItem = item_as(i, item)?;
            let args = c.arguments.unwrap_or_else(|| "{}".to_string());
            push(
                messages,
                Role::Assistant,
                vec![ContentBlock::ToolUse {
                    id: c.call_id,
                    name: c.name,
                    input: serde_json::from_str(&args).unwrap_or(Value::String(args)),
                }],
            );
            Ok(false)
        }
        "function_call_output" => {
            let o: FunctionCallOutputItem = item_as(i, item)?;
            let mut parts = Vec::new();
            content_blocks(o.output, &mut parts);
            let content = parts
                .into_iter()
                .filter_map(|b| match b {
                    ContentBlock::Text { text } => Some(text),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n");
            push(
                messages,
                Role::Tool,
                vec![ContentBlock::ToolResult {
                    tool_use_id: o.call_id,
                    content,
                    is_error: false,
                }],
            );
            Ok(true)
        }
        "reasoning" => {
            let r: ReasoningItem = item_as(i, item)?;
            let thinking: Vec<String> = r.summary.into_iter().filter_map(|s| s.text).collect();
            // The encrypted content is what this door gave out: the stored signature, which
            // goes back to the provider kind that made it (elfgate-llm's signature rule).
            let block = ContentBlock::Thinking {
                thinking: thinking.join("\n\n"),
                signature: r.encrypted_content,
            };
            match messages.last_mut() {
                Some(last) if last.role == Role::Assistant => last.blocks.insert(0, block),
                _ => messages.push(LlmMessage {
                    role: Role::Assistant,
                    blocks: vec![block],
                }),
            }
            Ok(false)
        }
        // Item references and the calls of built-in tools have no counterpart here.
        _ => Ok(false),
    }
}
