//! Anthropic Messages → the internal form: the request's system, messages, tools and settings as
//! elfgate-llm's request, and the prompt stored with the session.

use super::Inbound;
use super::body::{OneOrMany, PathStyle, required, typed};
use super::openai_in::last_user_text;
use crate::error::ApiError;
use elfgate_core::{ContentBlock, Role, ThinkingLevel};
use elfgate_llm::wire::anthropic::ThinkingParam;
use elfgate_llm::{LlmMessage, LlmRequest, ProviderKind, ToolChoice, ToolSpec};
use serde::Deserialize;
use serde_json::{Value, json};

/// A Messages request, as far as the door reads it (other fields are tolerated).
#[derive(Debug, Deserialize)]
struct MessagesRequest {
    model: Option<String>,
    messages: Option<Vec<InMessage>>,
    stream: Option<bool>,
    system: Option<SystemPrompt>,
    tools: Option<Vec<InTool>>,
    tool_choice: Option<InToolChoice>,
    thinking: Option<ThinkingParam>,
    temperature: Option<f32>,
    max_tokens: Option<u32>,
    stop_sequences: Option<OneOrMany>,
}

#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "'system' must be a string or an array of text blocks"
)]
enum SystemPrompt {
    Text(String),
    /// cache_control marks on system blocks are not carried by the internal form.
    Blocks(Vec<TextOnly>),
}

/// A block of which only its text is read.
#[derive(Debug, Deserialize)]
struct TextOnly {
    text: Option<String>,
}

#[derive(Debug, Deserialize)]
struct InMessage {
    role: InRole,
    content: InContent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum InRole {
    User,
    Assistant,
    /// Some clients (claude-code among them) put system text among the messages.
    System,
}

#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "'content' must be a string or an array of blocks"
)]
enum InContent {
    Text(String),
    Blocks(Vec<InBlock>),
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum InBlock {
    Text {
        text: Option<String>,
    },
    Image {
        source: ImageSource,
    },
    Thinking {
        thinking: Option<String>,
        signature: Option<String>,
    },
    ToolUse {
        id: Option<String>,
        name: Option<String>,
        input: Option<Value>,
    },
    ToolResult {
        tool_use_id: Option<String>,
        content: Option<ToolResultContent>,
        is_error: Option<bool>,
    },
    /// redacted_thinking, documents and the like have no counterpart.
    #[serde(other)]
    Other,
}

#[derive(Debug, Deserialize)]
struct ImageSource {
    media_type: Option<String>,
    data: Option<String>,
    url: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "a tool result's 'content' must be a string or an array of blocks"
)]
enum ToolResultContent {
    Text(String),
    Blocks(Vec<TextOnly>),
}

#[derive(Debug, Deserialize)]
struct InTool {
    name: String,
    description: Option<String>,
    input_schema: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum InToolChoice {
    Auto,
    Any,
    None,
    Tool { name: String },
}

/// Whether the caller's `anthropic-beta` header (betas separated by commas, in one header or
/// several) names the long-context beta: the one beta the door passes on to an Anthropic-kind
/// provider. Others could change what the provider answers in ways the daemon does not read.
pub fn asks_long_context(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get_all("anthropic-beta")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|beta| beta.trim() == elfgate_llm::EXTENDED_CONTEXT_BETA)
}

/// Parses a Messages body.
pub fn parse(body: &Value) -> Result<Inbound, ApiError> {
    let r: MessagesRequest = typed(body, PathStyle::Dots)?;
    let model = required(r.model, "model")?;
    let raw = required(r.messages, "messages")?;
    let stream = r.stream.unwrap_or(false);
    let system = r.system.map(|s| match s {
        SystemPrompt::Text(t) => t,
        SystemPrompt::Blocks(blocks) => texts(blocks).join("\n\n"),
    });
    // Sent as given to an Anthropic provider: cache_control marks, redacted thinking and the
    // like survive. Not when system text sits among the messages, which the API would refuse.
    let passthrough = (!raw.iter().any(|m| m.role == InRole::System)).then(|| {
        let fields = ["system", "messages", "tools"]
            .iter()
            .filter_map(|k| {
                body.get(k)
                    .filter(|v| !v.is_null())
                    .map(|v| (k.to_string(), v.clone()))
            })
            .collect();
        (ProviderKind::Anthropic, fields)
    });
    let mut messages = Vec::new();
    let mut more_system = Vec::new();
    for m in raw {
        message(m, &mut messages, &mut more_system);
    }
    let system = match (system, more_system.is_empty()) {
        (s, true) => s,
        (None, false) => Some(more_system.join("\n\n")),
        (Some(s), false) => Some(format!("{s}\n\n{}", more_system.join("\n\n"))),
    };
    let tools = r
        .tools
        .unwrap_or_default()
        .into_iter()
        .map(|t| ToolSpec {
            name: t.name,
            description: t.description.unwrap_or_default(),
            input_schema: t.input_schema.unwrap_or_else(|| json!({"type": "object"})),
        })
        .collect();
    let tool_choice = r.tool_choice.map(|c| match c {
        InToolChoice::Auto => ToolChoice::Auto,
        InToolChoice::Any => ToolChoice::Required,
        InToolChoice::None => ToolChoice::None,
        InToolChoice::Tool { name } => ToolChoice::Tool(name),
    });
    let thinking = r
        .thinking
        .map_or_else(ThinkingLevel::default, |t| t.level());
    let prompt = last_user_text(&messages);
    Ok(Inbound {
        model,
        request: LlmRequest {
            model: String::new(),
            system,
            messages,
            temperature: r.temperature,
            max_tokens: r.max_tokens,
            thinking,
            tools,
            tool_choice,
            stop: r
                .stop_sequences
                .map(OneOrMany::into_vec)
                .unwrap_or_default(),
            response_format: None,
            // The caller's own cache marks travel in the passthrough (Anthropic callers).
            cache_prefix_len: 0,
            passthrough,
            // From the caller's anthropic-beta header, which the route reads
            // (`asks_long_context`).
            extended_context: false,
            native_search: false,
        },
        prompt,
        stream,
        stored_input: None,
        served_search: false,
    })
}

fn texts(blocks: Vec<TextOnly>) -> Vec<String> {
    blocks.into_iter().filter_map(|b| b.text).collect()
}

fn message(m: InMessage, out: &mut Vec<LlmMessage>, system: &mut Vec<String>) {
    let blocks = match m.content {
        InContent::Text(s) => vec![InBlock::Text { text: Some(s) }],
        InContent::Blocks(b) => b,
    };
    let mut own = Vec::new();
    let mut results = Vec::new();
    for b in blocks {
        match b {
            InBlock::Text { text } => own.push(ContentBlock::text(text.unwrap_or_default())),
            InBlock::Image { source } => own.push(ContentBlock::Image {
                media_type: source.media_type.unwrap_or_default(),
                data: source.data,
                url: source.url,
            }),
            InBlock::Thinking {
                thinking,
                signature,
            } => own.push(ContentBlock::Thinking {
                thinking: thinking.unwrap_or_default(),
                signature,
            }),
            InBlock::ToolUse { id, name, input } => own.push(ContentBlock::ToolUse {
                id: id.unwrap_or_default(),
                name: name.unwrap_or_default(),
                input: input.unwrap_or(Value::Null),
            }),
            InBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => results.push(ContentBlock::ToolResult {
                tool_use_id: tool_use_id.unwrap_or_default(),
                content: match content {
                    Some(ToolResultContent::Text(s)) => s,
                    Some(ToolResultContent::Blocks(parts)) => texts(parts).join("\n"),
                    None => String::new(),
                },
                is_error: is_error.unwrap_or(false),
            }),
            InBlock::Other => {}
        }
    }
    let role = match m.role {
        InRole::System => {
            for b in own {
                if let ContentBlock::Text { text } = b {
                    system.push(text);
                }
            }
            return;
        }
        InRole::User => Role::User,
        InRole::Assistant => Role::Assistant,
    };
    if !results.is_empty() {
        out.push(LlmMessage {
            role: Role::Tool,
            blocks: results,
        });
    }
    if !own.is_empty() {
        out.push(LlmMessage { role, blocks: own });
    }
}
