//! The one vocabulary of error codes: what an `error` event's `error.code` and an HTTP error
//! body's `error.code` may say. Listed in docs/api.md; a code is added here, never spelled as a
//! string elsewhere.

use serde::{Deserialize, Serialize};

/// A machine-readable error code, serialized in snake_case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    // Refusals of an HTTP request.
    /// The body or a parameter is wrong (400).
    BadRequest,
    /// No or malformed credentials (401).
    Unauthorized,
    /// Wrong credentials, or a request refused whatever its credentials (403).
    Forbidden,
    /// Unknown session, run, request or route (404).
    NotFound,
    /// The path exists, not with this method (405).
    MethodNotAllowed,
    /// The session is running and the prompt may not wait (409).
    Busy,
    /// Already decided or otherwise conflicting (409).
    Conflict,
    /// Body over the limit (413).
    PayloadTooLarge,
    /// A body not declared as JSON (415).
    UnsupportedMediaType,
    /// A field, engine, provider or setting the daemon cannot take (422).
    Unprocessable,
    /// The session's queue of waiting prompts is full (429).
    TooManyQueued,
    /// Not built (501).
    NotImplemented,
    /// Shutting down, not ready, or the store busy (503).
    Unavailable,
    /// A fault of the daemon (500).
    Internal,

    // Errors that end a run (`error` events).
    /// The provider answered with an HTTP error status (`upstreamStatus` carries it).
    UpstreamStatus,
    /// The provider could not be reached, or the connection broke.
    Transport,
    /// The provider's stream stalled past the idle timeout.
    IdleTimeout,
    /// No first token within the first-token timeout.
    FirstTokenTimeout,
    /// The provider's answer did not follow its wire format.
    Protocol,
    /// The provider reported an error inside its stream.
    UpstreamError,
    /// The provider's API key variable is not set.
    MissingApiKey,
    /// The call was cancelled.
    Cancelled,
    /// The model finished with reason `error` and no content.
    ModelError,
    /// The conversation does not fit the model's context window, even after compaction.
    ContextOverflow,
    /// The compaction summary could not be made.
    Summary,
    /// No such provider.
    UnknownProvider,
    /// No model given and the provider has no default.
    NoModel,
    /// The session's project directory cannot be used.
    BadProjectPath,
    /// The store could not record the run.
    Storage,
    /// The engine failed (a bug).
    EnginePanic,
    /// The cli engine: the backend is missing or unknown.
    CliBackend,
    /// The cli engine: the backend's program is not installed.
    CliUnavailable,
    /// The cli engine: the CLI's configuration could not be written.
    CliSetup,
    /// The cli engine: the project directory cannot be used.
    CliProjectPath,
    /// The cli engine: the CLI could not be started.
    CliSpawn,
    /// The CLI reported a failure.
    CliFailed,
    /// The CLI printed nothing for longer than its idle timeout.
    CliIdleTimeout,
    /// The CLI exited without a result.
    CliNoResult,
    /// The CLI exited with a failure status.
    CliExit,
    /// The CLI was killed by a signal or stopped answering.
    CliCrashed,
    /// A workflow's step failed (the message names it).
    WorkflowStep,
    /// A budget refused a model call (the message names it).
    BudgetExceeded,
    /// A rate limit refused a model call (the message names it).
    RateLimited,
    /// A code this daemon does not know (an event stored by another version).
    #[serde(other)]
    Other,
}

impl ErrorCode {
    /// Every code, in the order above.
    pub const ALL: &'static [ErrorCode] = &[
        ErrorCode::BadRequest,
        ErrorCode::Unauthorized,
        ErrorCode::Forbidden,
        ErrorCode::NotFound,
        ErrorCode::MethodNotAllowed,
        ErrorCode::Busy,
        ErrorCode::Conflict,
        ErrorCode::PayloadTooLarge,
        ErrorCode::UnsupportedMediaType,
        ErrorCode::Unprocessable,
        ErrorCode::TooManyQueued,
        ErrorCode::NotImplemented,
        ErrorCode::Unavailable,
        ErrorCode::Internal,
        ErrorCode::UpstreamStatus,
        ErrorCode::Transport,
        ErrorCode::IdleTimeout,
        ErrorCode::FirstTokenTimeout,
        ErrorCode::Protocol,
        ErrorCode::UpstreamError,
        ErrorCode::MissingApiKey,
        ErrorCode::Cancelled,
        ErrorCode::ModelError,
        ErrorCode::ContextOverflow,
        ErrorCode::Summary,
        ErrorCode::UnknownProvider,
        ErrorCode::NoModel,
        ErrorCode::BadProjectPath,
        ErrorCode::Storage,
        ErrorCode::EnginePanic,
        ErrorCode::CliBackend,
        ErrorCode::CliUnavailable,
        ErrorCode::CliSetup,
        ErrorCode::CliProjectPath,
        ErrorCode::CliSpawn,
        ErrorCode::CliFailed,
        ErrorCode::CliIdleTimeout,
        ErrorCode::CliNoResult,
        ErrorCode::CliExit,
        ErrorCode::CliCrashed,
        ErrorCode::WorkflowStep,
        ErrorCode::BudgetExceeded,
        ErrorCode::RateLimited,
        ErrorCode::Other,
    ];

    /// The wire name (the same as serde's).
    pub fn as_str(self) -> &'static str {
        use ErrorCode::*;
        match self {
            BadRequest => "bad_request",
            Unauthorized => "unauthorized",
            Forbidden => "forbidden",
            NotFound => "not_found",
            MethodNotAllowed => "method_not_allowed",
            Busy => "busy",
            Conflict => "conflict",
            PayloadTooLarge => "payload_too_large",
            UnsupportedMediaType => "unsupported_media_type",
            Unprocessable => "unprocessable",
            TooManyQueued => "too_many_queued",
            NotImplemented => "not_implemented",
            Unavailable => "unavailable",
            Internal => "internal",
            UpstreamStatus => "upstream_status",
            Transport => "transport",
            IdleTimeout => "idle_timeout",
            FirstTokenTimeout => "first_token_timeout",
            Protocol => "protocol",
            UpstreamError => "upstream_error",
            MissingApiKey => "missing_api_key",
            Cancelled => "cancelled",
            ModelError => "model_error",
            ContextOverflow => "context_overflow",
            Summary => "summary",
            UnknownProvider => "unknown_provider",
            NoModel => "no_model",
            BadProjectPath => "bad_project_path",
            Storage => "storage",
            EnginePanic => "engine_panic",
            CliBackend => "cli_backend",
            CliUnavailable => "cli_unavailable",
            CliSetup => "cli_setup",
            CliProjectPath => "cli_project_path",
            CliSpawn => "cli_spawn",
            CliFailed => "cli_failed",
            CliIdleTimeout => "cli_idle_timeout",
            CliNoResult => "cli_no_result",
            CliExit => "cli_exit",
            CliCrashed => "cli_crashed",
            WorkflowStep => "workflow_step",
            BudgetExceeded => "budget_exceeded",
            RateLimited => "rate_limited",
            Other => "other",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::ErrorCode;

    #[test]
    fn the_wire_name_is_the_serialized_one_and_unknown_codes_read_as_other() {
        for &code in ErrorCode::ALL {
            assert_eq!(
                serde_json::to_value(code).unwrap(),
                serde_json::Value::String(code.as_str().to_string())
            );
            let back: ErrorCode =
                serde_json::from_value(serde_json::Value::String(code.as_str().into())).unwrap();
            assert_eq!(back, code);
        }
        let old: ErrorCode = serde_json::from_str("\"some_future_code\"").unwrap();
        assert_eq!(old, ErrorCode::Other);
    }
}
