//! OpenAI chat completions → the internal form: the request's messages, tools and settings as
//! elfgate-llm's request, and the prompt stored with the session.

use super::Inbound;
use super::body::{OneOrMany, PathStyle, required, typed};
use crate::error::ApiError;
use elfgate_core::{ContentBlock, Role};
use elfgate_llm::wire::openai::level_of_effort;
use elfgate_llm::{LlmMessage, LlmRequest, ToolChoice, ToolSpec};
use serde::Deserialize;
use serde_json::{Value, json};

/// A chat completions request, as far as the door reads it (other fields are tolerated).
#[derive(Debug, Deserialize)]
struct ChatRequest {
    model: Option<String>,
    messages: Option<Vec<ChatMessage>>,
    n: Option<u32>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    tools: Option<Vec<ChatTool>>,
    tool_choice: Option<ChatToolChoice>,
    response_format: Option<serde_json::Map<String, Value>>,
    reasoning_effort: Option<String>,
    temperature: Option<f32>,
    max_completion_tokens: Option<u32>,
    max_tokens: Option<u32>,
    stop: Option<OneOrMany>,
}

#[derive(Debug, Deserialize)]
struct StreamOptions {
    include_usage: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum ChatMessage {
    System {
        content: Option<ChatContent>,
    },
    Developer {
        content: Option<ChatContent>,
    },
    User {
        content: Option<ChatContent>,
    },
    Assistant {
        content: Option<ChatContent>,
        reasoning_content: Option<String>,
        tool_calls: Option<Vec<ChatToolCall>>,
    },
    Tool {
        content: Option<ChatContent>,
        tool_call_id: String,
    },
}

#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "'content' must be a string or an array of parts"
)]
enum ChatContent {
    Text(String),
    Parts(Vec<ChatPart>),
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ChatPart {
    Text {
        text: String,
    },
    ImageUrl {
        image_url: ImageUrl,
    },
    /// Audio and file parts have no counterpart in the internal form.
    #[serde(other)]
    Other,
}

#[derive(Debug, Deserialize)]
#[serde(untagged, expecting = "an image part needs a url")]
enum ImageUrl {
    Url(String),
    Object { url: String },
}

#[derive(Debug, Deserialize)]
struct ChatToolCall {
    id: Option<String>,
    function: ChatCalledFunction,
}

#[derive(Debug, Deserialize)]
struct ChatCalledFunction {
    name: String,
    arguments: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ChatTool {
    function: ChatFunction,
}

#[derive(Debug, Deserialize)]
struct ChatFunction {
    name: String,
    description: Option<String>,
    parameters: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "'tool_choice' must be \"auto\", \"none\", \"required\" or \
                               {\"type\":\"function\",\"function\":{\"name\":...}}"
)]
enum ChatToolChoice {
    Mode(String),
    Function { function: FunctionName },
}

#[derive(Debug, Deserialize)]
struct FunctionName {
    name: String,
}

/// Parses a chat completions body.
pub fn parse(body: &Value) -> Result<(Inbound, bool), ApiError> {
    let r: ChatRequest = typed(body, PathStyle::Brackets)?;
    let model = required(r.model, "model")?;
    let raw = required(r.messages, "messages")?;
    if r.n.is_some_and(|n| n != 1) {
        return Err(ApiError::invalid(
            Some("n".to_string()),
            "only n=1 is supported",
        ));
    }
    let stream = r.stream.unwrap_or(false);
    let include_usage = r
        .stream_options
        .and_then(|o| o.include_usage)
        .unwrap_or(false);
    let mut system = Vec::new();
    let mut messages = Vec::new();
    for m in raw {
        message(m, &mut system, &mut messages);
    }
    let prompt = last_user_text(&messages);
    let tools = r
        .tools
        .unwrap_or_default()
        .into_iter()
        .map(|t| ToolSpec {
            name: t.function.name,
            description: t.function.description.unwrap_or_default(),
            input_schema: t
                .function
                .parameters
                .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
        })
        .collect();
    let tool_choice = r.tool_choice.map(tool_choice).transpose()?;
    let thinking = r
        .reasoning_effort
        .as_deref()
        .and_then(level_of_effort)
        .unwrap_or_default();
    let request = LlmRequest {
        model: String::new(),
        system: (!system.is_empty()).then(|| system.join("\n\n")),
        messages,
        temperature: r.temperature,
        max_tokens: r.max_completion_tokens.or(r.max_tokens),
        thinking,
        tools,
        tool_choice,
        stop: r.stop.map(OneOrMany::into_vec).unwrap_or_default(),
        response_format: r.response_format.map(Value::Object),
        // The caller's own cache marks travel in the passthrough (Anthropic callers).
        cache_prefix_len: 0,
        passthrough: None,
        extended_context: false,
        native_search: false,
    };
    Ok((
        Inbound {
            model,
            request,
            prompt,
            stream,
            stored_input: None,
            served_search: false,
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

/// Text and image parts of a `content`.
fn content_blocks(content: Option<ChatContent>) -> Vec<ContentBlock> {
    match content {
        None => Vec::new(),
        Some(ChatContent::Text(s)) => vec![ContentBlock::text(s)],
        Some(ChatContent::Parts(parts)) => parts
            .into_iter()
            .filter_map(|p| match p {
                ChatPart::Text { text } => Some(ContentBlock::text(text)),
                ChatPart::ImageUrl {
                    image_url: ImageUrl::Url(url) | ImageUrl::Object { url },
                } => Some(image(&url)),
                ChatPart::Other => None,
            })
            .collect(),
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

fn message(m: ChatMessage, system: &mut Vec<String>, out: &mut Vec<LlmMessage>) {
    match m {
        ChatMessage::System { content } | ChatMessage::Developer { content } => {
            system.push(text_of(&content_blocks(content)));
        }
        ChatMessage::User { content } => out.push(LlmMessage {
            role: Role::User,
            blocks: content_blocks(content),
        }),
        ChatMessage::Assistant {
            content,
            reasoning_content,
            tool_calls,
        } => {
            let mut blocks = content_blocks(content);
            if let Some(r) = reasoning_content.filter(|r| !r.is_empty()) {
                blocks.insert(
                    0,
                    ContentBlock::Thinking {
                        thinking: r,
                        signature: None,
                    },
                );
            }
            for c in tool_calls.unwrap_or_default() {
                let args = c.function.arguments.unwrap_or_else(|| "{}".to_string());
                blocks.push(ContentBlock::ToolUse {
                    id: c.id.unwrap_or_default(),
                    name: c.function.name,
                    input: serde_json::from_str(&args).unwrap_or(Value::String(args)),
                });
            }
            out.push(LlmMessage {
                role: Role::Assistant,
                blocks,
            });
        }
        ChatMessage::Tool {
            content,
            tool_call_id,
        } => out.push(LlmMessage {
            role: Role::Tool,
            blocks: vec![ContentBlock::ToolResult {
                tool_use_id: tool_call_id,
                content: text_of(&content_blocks(content)),
                is_error: false,
            }],
        }),
    }
}

fn tool_choice(c: ChatToolChoice) -> Result<ToolChoice, ApiError> {
    match c {
        ChatToolChoice::Mode(s) if s == "auto" => Ok(ToolChoice::Auto),
        ChatToolChoice::Mode(s) if s == "none" => Ok(ToolChoice::None),
        ChatToolChoice::Mode(s) if s == "required" => Ok(ToolChoice::Required),
        ChatToolChoice::Function { function } => Ok(ToolChoice::Tool(function.name)),
        ChatToolChoice::Mode(_) => Err(ApiError::invalid(
            Some("tool_choice".to_string()),
            "'tool_choice' must be \"auto\", \"none\", \"required\" or \
             {\"type\":\"function\",\"function\":{\"name\":...}}",
        )),
    }
}
