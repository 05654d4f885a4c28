//! elfgate-llm: streaming clients for LLM providers.
//!
//! Four wire protocols are supported — OpenAI-compatible Chat Completions, Anthropic Messages,
//! the OpenAI Responses API and the Gemini API — all normalized into one stream of
//! [`LlmEvent`]s.
//! [`stream_with_retry`] adds retries for failures that happen before the
//! first event arrives.

#![warn(missing_docs)]

mod anthropic;
mod client;
mod error;
mod gemini;
mod http;
mod openai;
mod openai_fast;
mod policy;
mod responses;
mod retry;
mod signature;
pub mod sse;
#[cfg(test)]
mod testkit;
mod text_template;
pub mod wire;

use client::WireProvider;
use std::sync::Arc;
use std::time::Duration;

pub use anthropic::EXTENDED_CONTEXT_BETA;
pub use elfgate_core::model::{ContentBlock, Role};
pub use elfgate_core::{ProviderKind, ThinkingLevel, TokenUsage};
pub use error::LlmError;
pub use policy::{Backoff, Jitter, RetryPolicy, random_unit};
pub use retry::{
    FirstAttempt, RetryNotice, spawn_first_attempt, stream_with_retry, stream_with_retry_from,
};

/// A tool the model may call.
#[derive(Clone, Debug)]
pub struct ToolSpec {
    /// The tool's name.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the tool's input object.
    pub input_schema: serde_json::Value,
}

/// One message of the conversation sent to the model.
#[derive(Clone, Debug)]
pub struct LlmMessage {
    /// Who wrote it. [`Role::Tool`] messages hold [`ContentBlock::ToolResult`] blocks.
    pub role: Role,
    /// Its content.
    pub blocks: Vec<ContentBlock>,
}

/// A provider-independent completion request.
#[derive(Clone, Debug, Default)]
pub struct LlmRequest {
    /// The model; the provider's default model is used when empty.
    pub model: String,
    /// The system prompt.
    pub system: Option<String>,
    /// How many bytes at the start of `system` stay the same from call to call (the stable prefix
    /// of the prompt). Anthropic sends them as a block of their own marked with `cache_control`,
    /// so the provider caches them; OpenAI caches prompt prefixes by itself. 0: nothing marked.
    pub cache_prefix_len: usize,
    /// The conversation.
    pub messages: Vec<LlmMessage>,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Output token limit.
    pub max_tokens: Option<u32>,
    /// Requested reasoning effort.
    pub thinking: ThinkingLevel,
    /// Tools the model may call.
    pub tools: Vec<ToolSpec>,
    /// Which tool the model must (or must not) call; the provider decides when None.
    pub tool_choice: Option<ToolChoice>,
    /// Sequences that end the answer.
    pub stop: Vec<String>,
    /// OpenAI's `response_format`, passed through as given to OpenAI-kind providers (the
    /// Anthropic Messages API has no counterpart: it is dropped there).
    pub response_format: Option<serde_json::Value>,
    /// Fields of a caller's request already in a provider kind's wire format, sent as given over
    /// the ones built from this request when the provider is of that kind (the gateway relays
    /// an Anthropic caller's `system`, `messages` and `tools` this way to an Anthropic provider,
    /// keeping what the internal form has no room for, such as `cache_control` marks). Other
    /// kinds ignore it. (The Anthropic and Responses clients apply it; the Responses door relays a
    /// caller's built-in tools this way.)
    pub passthrough: Option<(ProviderKind, serde_json::Map<String, serde_json::Value>)>,
    /// Ask for the model's long context window where the provider kind has a switch for it
    /// (Anthropic: the `anthropic-beta: context-1m-2025-08-07` header); the other kinds have
    /// none, and send the request as usual.
    pub extended_context: bool,
    /// Ask the provider to search the web itself, where this kind's API has a server-side
    /// search (the Responses API's `web_search` tool, Gemini's Google Search grounding); see
    /// [`ProviderKind::searches_natively`].
    pub native_search: bool,
}

/// Which tool the model must call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// No tool call.
    None,
    /// At least one tool call, any tool.
    Required,
    /// A call to this tool.
    Tool(String),
}

/// One normalized streaming event.
#[derive(Clone, Debug, PartialEq)]
pub enum LlmEvent {
    /// A piece of answer text.
    TextDelta(String),
    /// A piece of reasoning text.
    ThinkingDelta(String),
    /// The signature of the current reasoning block (Anthropic; Gemini's `thoughtSignature`).
    ThinkingSignature(String),
    /// A complete tool call. OpenAI: fragments merged by index, emitted when the
    /// finish reason arrives; Anthropic: emitted at `content_block_stop`.
    ToolCall {
        /// The provider's call id.
        id: String,
        /// The tool's name.
        name: String,
        /// The arguments as raw JSON text, as received (possibly malformed).
        arguments: String,
    },
    /// Token usage of the call so far. It may come more than once (Anthropic reports the prompt's
    /// figures first, the output's last): each replaces the one before.
    Usage(TokenUsage),
    /// Why the model stopped.
    Finish(LlmFinishReason),
    /// A complete block of the provider's own server-side tool (Anthropic's `server_tool_use`
    /// and `web_search_tool_result`), to be stored and sent back unchanged.
    ProviderBlock {
        /// The kind of provider that sent it (the only kind it may be sent back to).
        kind: ProviderKind,
        /// The block as it came.
        block: serde_json::Value,
    },
}

/// Why the model stopped generating.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LlmFinishReason {
    /// A natural stop (or a stop sequence the provider did not name).
    Stop,
    /// The model wrote this stop sequence of the request (only Anthropic's API says which).
    StopSequence(String),
    /// The output token limit was hit.
    Length,
    /// The model wants tool calls executed.
    ToolCalls,
    /// The output was filtered or refused.
    ContentFilter,
    /// The provider paused a long turn of its own tools (Anthropic's `pause_turn`): sending the
    /// answer so far back lets it go on.
    Paused,
    /// Any other provider-specific reason.
    Other(String),
}

impl LlmFinishReason {
    /// The reason in the daemon's words, with the stop sequence when the provider named it.
    pub fn model_finish(&self) -> (elfgate_core::ModelFinish, Option<String>) {
        use elfgate_core::ModelFinish;
        match self {
            LlmFinishReason::Stop => (ModelFinish::Stop, None),
            LlmFinishReason::StopSequence(s) => (ModelFinish::StopSequence, Some(s.clone())),
            LlmFinishReason::Length => (ModelFinish::MaxTokens, None),
            LlmFinishReason::ToolCalls => (ModelFinish::ToolCalls, None),
            LlmFinishReason::ContentFilter => (ModelFinish::ContentFilter, None),
            LlmFinishReason::Paused | LlmFinishReason::Other(_) => (ModelFinish::Other, None),
        }
    }
}

/// A stream of normalized events. It ends (`None`) after the provider's end
/// marker; a body that ends early yields an [`LlmError::Transport`] error.
/// Dropping it closes the upstream response.
pub type LlmStream =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<LlmEvent, LlmError>> + Send>>;

/// A streaming LLM provider client.
#[async_trait::async_trait]
pub trait LlmProvider: Send + Sync {
    /// The wire protocol it speaks.
    fn kind(&self) -> ProviderKind;
    /// The model used when a request names none.
    fn default_model(&self) -> Option<&str>;
    /// Send the request; Ok once the response status is 2xx and headers arrived. Events follow on the stream.
    async fn stream(&self, req: &LlmRequest) -> Result<LlmStream, LlmError>;
    /// How long a call may take, over all its attempts, until its first event (zero: no limit).
    fn first_token_timeout(&self) -> Duration {
        Duration::ZERO
    }
}

/// How to reach one provider.
#[derive(Clone, Debug)]
pub struct ProviderConfig {
    /// The wire protocol.
    pub kind: ProviderKind,
    /// Base URL: OpenAI-style ends before `/chat/completions` or `/responses` (e.g.
    /// `https://api.openai.com/v1`); Anthropic before `/v1/messages`; Gemini before `/v1beta`.
    pub base_url: String,
    /// The API key, if the provider needs one.
    pub api_key: Option<String>,
    /// The environment variable the key was to be read from (`api_key_env`), if one is
    /// configured. With it and no `api_key`, every call fails at once with
    /// [`LlmError::MissingApiKey`] instead of sending a request the provider would refuse.
    pub api_key_env: Option<String>,
    /// The model used when a request names none.
    pub default_model: Option<String>,
    /// Longest silence allowed while reading the body (zero disables it).
    pub idle_timeout: Duration,
    /// Longest wait for the response headers (zero disables it).
    pub request_timeout: Duration,
    /// Longest wait for a call's first event, over every attempt and the delays between them
    /// (zero disables it); see [`stream_with_retry`].
    pub first_token_timeout: Duration,
}

/// Builds the provider client for `cfg`, sharing the given HTTP client.
pub fn build_provider(cfg: ProviderConfig, http: reqwest::Client) -> Arc<dyn LlmProvider> {
    match cfg.kind {
        ProviderKind::Openai => Arc::new(WireProvider::new(
            openai::OpenAiWire::new(&cfg.base_url),
            cfg,
            http,
        )),
        ProviderKind::Anthropic => Arc::new(WireProvider::new(
            anthropic::AnthropicWire::new(&cfg.base_url),
            cfg,
            http,
        )),
        ProviderKind::OpenaiResponses => Arc::new(WireProvider::new(
            responses::ResponsesWire::new(&cfg.base_url),
            cfg,
            http,
        )),
        ProviderKind::Gemini => Arc::new(WireProvider::new(
            gemini::GeminiWire::new(&cfg.base_url),
            cfg,
            http,
        )),
    }
}

/// The model to use: the request's, else the configured default.
pub(crate) fn resolve_model<'a>(
    req: &'a LlmRequest,
    default: Option<&'a str>,
) -> Result<&'a str, LlmError> {
    if !req.model.is_empty() {
        return Ok(&req.model);
    }
    default
        .filter(|m| !m.is_empty())
        .ok_or_else(|| LlmError::Protocol("no model given and no default model configured".into()))
}

/// A sampling parameter kept as `f32` on the wire as its shortest decimal: `json!(0.1f32)` would
/// widen it to f64 and send 0.10000000149011612.
pub(crate) fn wire_f32(v: f32) -> serde_json::Value {
    v.to_string()
        .parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map_or(serde_json::Value::Null, serde_json::Value::Number)
}

#[cfg(test)]
mod wire_f32_tests {
    #[test]
    fn a_temperature_goes_out_as_written() {
        assert_eq!(super::wire_f32(0.1).to_string(), "0.1");
        assert_eq!(super::wire_f32(0.7).to_string(), "0.7");
        assert_eq!(super::wire_f32(1.0).to_string(), "1.0");
    }
}
