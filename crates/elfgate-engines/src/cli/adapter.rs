//! What the cli engine and each backend's adapter share: a run's invocation, the adapter trait
//! that reads a CLI's stdout, the events it yields and their helpers. In a file of its own so
//! that the adapters (claude_code, codex, gemini_cli) and backend.rs, which picks one, depend on
//! it and not on each other.

use elfgate_core::{DeltaKind, PermissionMode, TokenUsage};
use elfgate_llm::ProviderKind;
use serde_json::Value;

/// A provider as a CLI sees it: where to send requests and which variable holds the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliProvider {
    /// Its wire format.
    pub kind: ProviderKind,
    /// Its base URL as configured.
    pub base_url: String,
    /// The daemon's variable holding its key, if any.
    pub api_key_env: Option<String>,
    /// Its model when a session names none.
    pub default_model: Option<String>,
}

/// What one run asks the CLI to do.
#[derive(Debug, Clone)]
pub(crate) struct Invocation<'a> {
    /// The user's prompt.
    pub prompt: &'a str,
    /// The model, if the session or its provider names one.
    pub model: Option<&'a str>,
    /// The CLI's own session id to resume, from the session's earlier run.
    pub resume: Option<&'a str>,
    /// The session's permission mode.
    pub permission_mode: PermissionMode,
    /// The provider's name, where the CLI selects it by name (codex).
    pub provider_name: Option<&'a str>,
}

/// What an adapter read in one line of the CLI's stdout.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AdapterEvent {
    /// A piece of answer or reasoning text.
    Delta(DeltaKind, String),
    /// A tool call starts.
    ToolStart {
        id: String,
        name: String,
        input: Value,
    },
    /// A tool call ended.
    ToolEnd {
        id: String,
        content: String,
        is_error: bool,
    },
    /// The CLI's own session (thread) id.
    SessionId(String),
    /// Token figures so far (replace the earlier ones).
    Usage(TokenUsage),
    /// What the run cost so far in US dollars, as the CLI itself reckons it (claude-code's
    /// `total_cost_usd`, an ACP agent's `usage_update` cost); replaces the earlier figure.
    Cost(f64),
    /// Model turns so far.
    Turns(u32),
    /// Something worth telling the client that does not end the run (a retry, a warning).
    Notice(String),
    /// The CLI reports that the run failed.
    Failed(String),
    /// The CLI reports the run's end (successful unless `Failed` came).
    Finished,
    /// The CLI asks whether it may run a tool, and waits for the answer on its stdin.
    PermissionAsk {
        request_id: String,
        tool_name: String,
        input: Value,
    },
}

/// Reads one run's stdout, line by line. A line it does not know gives no event.
pub(crate) trait Adapter: Send {
    /// The events of one JSON line.
    fn on_line(&mut self, line: &Value) -> Vec<AdapterEvent>;
}

/// A string field of a JSON object.
pub(crate) fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// A number field of a JSON object (0 when absent).
pub(crate) fn u64_of(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}
