//! The error type of provider calls.

use elfgate_core::ErrorCode;
use std::time::Duration;

/// Why a provider call or stream failed.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum LlmError {
    /// The provider answered with a non-2xx HTTP status.
    #[error("upstream returned HTTP {status}: {message}")]
    Status {
        /// The HTTP status code.
        status: u16,
        /// The provider's error message (from the JSON body when possible).
        message: String,
        /// The `Retry-After` delay the provider asked for, if any.
        retry_after: Option<Duration>,
    },
    /// The connection failed, timed out before headers, or dropped mid-stream.
    #[error("transport error: {0}")]
    Transport(String),
    /// No bytes arrived from the provider for this long while reading the body.
    #[error("no data from upstream for {0:?}")]
    IdleTimeout(Duration),
    /// No event arrived within the call's first-token deadline, over all its attempts and the
    /// waits between them. Not retried: the deadline bounds the whole call.
    #[error("no answer from upstream within {0:?} (first-token deadline, retries included)")]
    FirstTokenTimeout(Duration),
    /// The provider sent something that could not be understood (or the request was unusable).
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The provider reported an error in the middle of the stream.
    #[error("upstream error: {0}")]
    Upstream(String),
    /// The provider is configured to read its key from an environment variable that was unset
    /// (or empty) when the daemon started: no request is sent, since it could only be refused.
    #[error(
        "no API key: the environment variable {0} is not set in the daemon's environment (set it \
         and restart the daemon, or choose another provider)"
    )]
    MissingApiKey(String),
    /// The operation was cancelled by the caller.
    #[error("cancelled")]
    Cancelled,
}

impl LlmError {
    /// Whether retrying the same request may succeed: HTTP 408, 409, 429 and
    /// 5xx, transport failures, idle timeouts and "overloaded" upstream errors.
    pub fn is_retryable(&self) -> bool {
        match self {
            LlmError::Status { status, .. } => {
                matches!(*status, 408 | 409 | 429 | 500..=599)
            }
            LlmError::Transport(_) | LlmError::IdleTimeout(_) => true,
            LlmError::Upstream(msg) => msg.to_ascii_lowercase().contains("overloaded"),
            LlmError::Protocol(_)
            | LlmError::FirstTokenTimeout(_)
            | LlmError::MissingApiKey(_)
            | LlmError::Cancelled => false,
        }
    }

    /// Whether the provider refused the request for a reason that no retry can change: the key
    /// (401, 403), the model or route (404), the size (413) or the content (422). A plain 400 is
    /// not counted: some OpenAI-compatible servers answer 400 to transient conditions.
    pub fn is_permanent(&self) -> bool {
        matches!(self, LlmError::Status { status, .. } if matches!(*status, 401 | 403 | 404 | 413 | 422))
    }

    /// Whether the provider refused the request because the prompt does not fit the model's
    /// context window: a 400 or 413 whose message says so in one of the providers' wordings
    /// (OpenAI's `context_length_exceeded` / "maximum context length", Anthropic's "prompt is
    /// too long", and the like). A retry of the same request cannot succeed; a shorter one can.
    pub fn is_context_overflow(&self) -> bool {
        let LlmError::Status {
            status: 400 | 413,
            message,
            ..
        } = self
        else {
            return false;
        };
        let m = message.to_ascii_lowercase();
        [
            "context_length_exceeded",
            "maximum context length",
            "context length",
            "context window",
            "prompt is too long",
            "too many tokens",
        ]
        .iter()
        .any(|w| m.contains(w))
    }

    /// A short machine-readable code for this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            LlmError::Status { .. } => ErrorCode::UpstreamStatus,
            LlmError::Transport(_) => ErrorCode::Transport,
            LlmError::IdleTimeout(_) => ErrorCode::IdleTimeout,
            LlmError::FirstTokenTimeout(_) => ErrorCode::FirstTokenTimeout,
            LlmError::Protocol(_) => ErrorCode::Protocol,
            LlmError::Upstream(_) => ErrorCode::UpstreamError,
            LlmError::MissingApiKey(_) => ErrorCode::MissingApiKey,
            LlmError::Cancelled => ErrorCode::Cancelled,
        }
    }

    /// The provider's HTTP status, for [`LlmError::Status`].
    pub fn upstream_status(&self) -> Option<u16> {
        match self {
            LlmError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The delay the provider asked for before retrying, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            LlmError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// Formats an error together with its source chain (reqwest's top-level
/// message alone is often unhelpful).
pub(crate) fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

#[cfg(test)]
mod context_tests {
    use super::*;

    #[test]
    fn context_overflow_wordings() {
        let status = |status, m: &str| LlmError::Status {
            status,
            message: m.into(),
            retry_after: None,
        };
        assert!(status(400, "prompt is too long: 300 tokens > 200 maximum").is_context_overflow());
        assert!(
            status(400, "This model's maximum context length is 8 tokens").is_context_overflow()
        );
        assert!(!status(400, "bad request").is_context_overflow());
        assert!(!status(500, "prompt is too long").is_context_overflow());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_classification() {
        let st = |status| LlmError::Status {
            status,
            message: String::new(),
            retry_after: None,
        };
        for s in [408, 409, 429, 500, 502, 503, 529, 599] {
            assert!(st(s).is_retryable(), "{s}");
        }
        for s in [400, 401, 403, 404, 422] {
            assert!(!st(s).is_retryable(), "{s}");
        }
        assert!(LlmError::Transport("x".into()).is_retryable());
        assert!(LlmError::IdleTimeout(Duration::from_secs(1)).is_retryable());
        assert!(LlmError::Upstream("Overloaded (overloaded_error)".into()).is_retryable());
        assert!(!LlmError::Upstream("bad".into()).is_retryable());
        assert!(!LlmError::Protocol("x".into()).is_retryable());
        assert!(!LlmError::Cancelled.is_retryable());
        assert!(!LlmError::FirstTokenTimeout(Duration::from_secs(1)).is_retryable());
        assert_eq!(st(500).code(), ErrorCode::UpstreamStatus);
        assert_eq!(st(500).upstream_status(), Some(500));
        assert_eq!(LlmError::Cancelled.code(), ErrorCode::Cancelled);
        let missing = LlmError::MissingApiKey("OPENAI_API_KEY".into());
        assert!(!missing.is_retryable());
        assert_eq!(missing.code(), ErrorCode::MissingApiKey);
        assert!(missing.to_string().contains("OPENAI_API_KEY"), "{missing}");
    }
}
