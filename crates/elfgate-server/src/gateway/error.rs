//! The API's one error ([`ApiError`]) written in the wire format of a front door's SDK: OpenAI's
//! `{"error":{"message","type","param","code"}}` and Anthropic's
//! `{"type":"error","error":{"type","message"}}`, with the status and `Retry-After` of the native
//! answer.

use crate::error::ApiError;
use axum::response::Response;
use elfgate_core::ErrorCode;
use serde_json::json;

/// What kind of failure, in terms both wire formats have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A bad request (400, 413, 415, 422).
    InvalidRequest,
    /// Missing or wrong credentials (401).
    Authentication,
    /// Refused (403).
    Permission,
    /// An unknown model or session (404).
    NotFound,
    /// Too many requests (429).
    RateLimit,
    /// The daemon or the provider is overloaded or unavailable (503, 529).
    Overloaded,
    /// Any other failure (500, 502, 504).
    Api,
}

fn kind(e: &ApiError) -> Kind {
    // A missing key is a 503 that backing off does not cure.
    if let ApiError::Upstream(info) = e
        && info.code == ErrorCode::MissingApiKey
    {
        return Kind::Api;
    }
    match e.status().as_u16() {
        401 => Kind::Authentication,
        403 => Kind::Permission,
        404 => Kind::NotFound,
        429 => Kind::RateLimit,
        503 | 529 => Kind::Overloaded,
        400..=499 => Kind::InvalidRequest,
        _ => Kind::Api,
    }
}

/// The request field at fault, if any.
fn param(e: &ApiError) -> Option<&str> {
    match e {
        ApiError::InvalidParam { param, .. } => Some(param),
        ApiError::UnknownModel { .. } => Some("model"),
        _ => None,
    }
}

/// OpenAI's `code`, where OpenAI has one for the failure.
fn openai_code(e: &ApiError) -> Option<&'static str> {
    match e {
        ApiError::UnknownModel { .. } => Some("model_not_found"),
        ApiError::RateLimited(_) => Some("rate_limit_exceeded"),
        ApiError::Upstream(info) if info.code == ErrorCode::MissingApiKey => {
            Some(ErrorCode::MissingApiKey.as_str())
        }
        ApiError::Upstream(info) if info.code == ErrorCode::BudgetExceeded => {
            Some(INSUFFICIENT_QUOTA)
        }
        _ => None,
    }
}

/// OpenAI's type and code of a spent quota: what its SDKs read for a spent budget.
const INSUFFICIENT_QUOTA: &str = "insufficient_quota";

/// Whether `e` is a spent budget.
fn spent_budget(e: &ApiError) -> bool {
    matches!(e, ApiError::Upstream(info) if info.code == ErrorCode::BudgetExceeded)
}

/// OpenAI's `error.type`.
fn openai_type(kind: Kind) -> &'static str {
    match kind {
        Kind::InvalidRequest | Kind::NotFound => "invalid_request_error",
        Kind::Authentication => "authentication_error",
        Kind::Permission => "permission_error",
        Kind::RateLimit => "rate_limit_error",
        Kind::Overloaded | Kind::Api => "server_error",
    }
}

/// Anthropic's `error.type`.
fn anthropic_type(kind: Kind) -> &'static str {
    match kind {
        Kind::InvalidRequest => "invalid_request_error",
        Kind::Authentication => "authentication_error",
        Kind::Permission => "permission_error",
        Kind::NotFound => "not_found_error",
        Kind::RateLimit => "rate_limit_error",
        Kind::Overloaded => "overloaded_error",
        Kind::Api => "api_error",
    }
}

/// OpenAI's error body (also sent as a stream's last frame).
pub fn openai_body(e: &ApiError) -> serde_json::Value {
    json!({"error": {
        "message": e.client_message(),
        "type": if spent_budget(e) { INSUFFICIENT_QUOTA } else { openai_type(kind(e)) },
        "param": param(e),
        "code": openai_code(e),
    }})
}

/// Anthropic's error body (also sent as a stream's `error` event).
pub fn anthropic_body(e: &ApiError) -> serde_json::Value {
    json!({"type": "error", "error": {
        "type": anthropic_type(kind(e)),
        "message": e.client_message(),
    }})
}

/// A front door: whose wire format its answers, errors included, are written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    /// OpenAI's chat completions and Responses (and its model list).
    OpenAi,
    /// Anthropic's Messages.
    Anthropic,
    /// The Gemini API (`/v1beta/...`).
    Gemini,
}

impl Door {
    /// The door a request path belongs to, if any.
    pub fn of_path(path: &str) -> Option<Door> {
        match path.trim_end_matches('/') {
            "/v1/chat/completions" | "/v1/responses" | "/v1/models" => Some(Door::OpenAi),
            "/v1/messages" => Some(Door::Anthropic),
            p if super::is_gemini_path(p) => Some(Door::Gemini),
            _ => None,
        }
    }

    /// `e` as this door's API answers it.
    pub fn error(self, e: &ApiError) -> Response {
        match self {
            Door::OpenAi => e.answer(openai_body(e)),
            Door::Anthropic => e.answer(anthropic_body(e)),
            Door::Gemini => e.answer(super::gemini_out::error_body(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use elfgate_core::ErrorInfo;
    use elfgate_store::StoreError;

    #[test]
    fn a_providers_load_refusals_pass_on_and_its_other_statuses_are_502() {
        let status = |code: ErrorCode, upstream: Option<u16>| {
            ApiError::Upstream(ErrorInfo::new(code, "no").with_upstream_status(upstream)).status()
        };
        assert_eq!(status(ErrorCode::UpstreamStatus, Some(429)), 429);
        assert_eq!(status(ErrorCode::UpstreamStatus, Some(503)), 503);
        assert_eq!(status(ErrorCode::UpstreamStatus, Some(529)), 503);
        assert_eq!(status(ErrorCode::UpstreamStatus, Some(401)), 502);
        assert_eq!(status(ErrorCode::UpstreamStatus, Some(500)), 502);
        // Only the provider's own status counts, never a number in another failure's text.
        assert_eq!(status(ErrorCode::Transport, None), 502);
        assert_eq!(status(ErrorCode::IdleTimeout, None), 504);
        assert_eq!(status(ErrorCode::UnknownProvider, None), 404);
        assert_eq!(status(ErrorCode::MissingApiKey, None), 503);
    }

    #[test]
    fn one_error_reads_the_same_in_each_door() {
        let e = ApiError::UnknownModel {
            model: "nope/x".into(),
            why: "unknown provider 'nope'".into(),
        };
        assert_eq!(e.status(), 404);
        let o = openai_body(&e);
        assert_eq!(o["error"]["type"], "invalid_request_error");
        assert_eq!(o["error"]["param"], "model");
        assert_eq!(o["error"]["code"], "model_not_found");
        let a = anthropic_body(&e);
        assert_eq!(a["error"]["type"], "not_found_error");
        assert_eq!(a["error"]["message"], o["error"]["message"]);

        let key = ApiError::Upstream(ErrorInfo::new(ErrorCode::MissingApiKey, "set OPENAI_KEY"));
        assert_eq!(key.status(), 503);
        assert_eq!(anthropic_body(&key)["error"]["type"], "api_error");
        assert_eq!(openai_body(&key)["error"]["code"], "missing_api_key");
        let busy = ApiError::Upstream(
            ErrorInfo::new(ErrorCode::UpstreamStatus, "slow down").with_upstream_status(Some(529)),
        );
        assert_eq!(anthropic_body(&busy)["error"]["type"], "overloaded_error");
    }

    #[test]
    fn a_busy_store_keeps_its_retry_after_in_every_door() {
        let e = ApiError::Storage(StoreError::Busy("locked".into()));
        for resp in [Door::OpenAi.error(&e), Door::Anthropic.error(&e)] {
            assert_eq!(resp.status(), 503);
            assert_eq!(resp.headers()["retry-after"], "1");
        }
    }
}
