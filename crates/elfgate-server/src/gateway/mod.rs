//! The gateway: OpenAI- (chat completions, Responses), Anthropic- and Gemini-compatible front doors onto the daemon's sessions. Each
//! front door parses its wire format into the internal form ([`Inbound`]: elfgate-llm's request
//! and the prompt stored with the session), runs it as a session like any other ([`run`]), and
//! writes the run's events back in its own format.

pub mod anthropic_in;
pub mod anthropic_out;
pub mod body;
pub mod builtin_tools;
pub mod door;
pub mod doors;
pub mod error;
pub mod gemini_in;
pub mod gemini_out;
pub mod limits;
pub mod openai_in;
pub mod openai_out;
pub mod responses;
pub mod responses_in;
pub mod responses_out;
pub mod route;
pub mod run;
pub mod secrets;

#[cfg(test)]
mod golden;

use elfgate_llm::LlmRequest;

/// Header naming the session a request continues; answers carry it too.
pub const SESSION_HEADER: &str = "x-elfgate-session-id";
/// Header setting a new session's project directory.
pub const PROJECT_HEADER: &str = "x-elfgate-project-path";
/// Header setting the permission mode of the call's run (an engine route's session).
pub const PERMISSION_MODE_HEADER: &str = "x-elfgate-permission-mode";

/// Whether a request path is the Gemini door's: `/v1beta/...`, or a method call under `/v1/models/`
/// (the google-genai SDK uses `v1` with a custom base URL).
pub fn is_gemini_path(path: &str) -> bool {
    path.starts_with("/v1beta/") || path.starts_with("/v1/models/")
}

/// A front door's request in the internal form.
#[derive(Debug, Clone)]
pub struct Inbound {
    /// The `model` field: the route.
    pub model: String,
    /// The whole upstream request (its model is set by the route).
    pub request: LlmRequest,
    /// The text of the last user message: the prompt stored with the session.
    pub prompt: String,
    /// Whether the caller asked for a stream.
    pub stream: bool,
    /// What the session stores as the call's user message when it is more than the prompt's
    /// text (the Responses door's new input items); None: the prompt.
    pub stored_input: Option<Vec<elfgate_core::ContentBlock>>,
    /// Whether the request's built-in `web_search` is served by the daemon's search backend
    /// (the request offers the model a function tool of that name; see `builtin_tools`).
    pub served_search: bool,
}

/// Why a finished run stopped, in the terms both front doors map to their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// A natural end.
    End,
    /// The output token limit.
    Length,
    /// The model asks for tool calls.
    ToolCalls,
}
