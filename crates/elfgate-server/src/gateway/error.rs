//! Errors of the front doors, written in the wire format of the caller's SDK.

use crate::error::ApiError;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use elfgate_core::{ErrorCode, ErrorInfo};
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

/// A front door's error.
#[derive(Debug, Clone)]
pub struct GatewayError {
    /// The HTTP status.
    pub status: StatusCode,
    /// Its kind.
    pub kind: Kind,
    /// For a human.
    pub message: String,
    /// The request field at fault, if any.
    pub param: Option<String>,
    /// OpenAI's `code` (e.g. `model_not_found`).
    pub code: Option<&'static str>,
}

impl GatewayError {
    /// A 400 naming the field at fault.
    pub fn invalid(param: impl Into<Option<String>>, message: impl Into<String>) -> Self {
        GatewayError {
            status: StatusCode::BAD_REQUEST,
            kind: Kind::InvalidRequest,
            message: message.into(),
            param: param.into(),
            code: None,
        }
    }

    /// A 404 for a model that names no route (OpenAI answers 404 `model_not_found`).
    pub fn unknown_model(model: &str, why: &str) -> Self {
        GatewayError {
            status: StatusCode::NOT_FOUND,
            kind: Kind::NotFound,
            message: format!("The model '{model}' does not exist: {why}"),
            param: Some("model".into()),
            code: Some("model_not_found"),
        }
    }

    /// An upstream failure the run reported (its `error` event). A provider's refusal for load
    /// (429, 503, 529) is passed on as such, so that the caller's SDK backs off; any other status
    /// of the provider's is the gateway's failure (502), not the caller's: a 401 there means the
    /// daemon's key for the provider, not the caller's token.
    pub fn upstream(e: &ErrorInfo) -> Self {
        let message = e.message.clone();
        let status = match (e.code, e.upstream_status) {
            // The daemon has no key for the route's provider: nothing the caller can change in
            // the request, and nothing was sent upstream. 503 (the route is unavailable until an
            // operator sets the key), but of kind Api, not Overloaded: backing off does not help.
            (ErrorCode::MissingApiKey, _) => {
                return GatewayError {
                    status: StatusCode::SERVICE_UNAVAILABLE,
                    kind: Kind::Api,
                    message,
                    param: None,
                    code: Some(ErrorCode::MissingApiKey.as_str()),
                };
            }
            (ErrorCode::FirstTokenTimeout | ErrorCode::IdleTimeout, _) => {
                StatusCode::GATEWAY_TIMEOUT
            }
            (ErrorCode::UnknownProvider | ErrorCode::NoModel, _) => StatusCode::NOT_FOUND,
            (ErrorCode::UpstreamStatus, Some(429)) => StatusCode::TOO_MANY_REQUESTS,
            (ErrorCode::UpstreamStatus, Some(503 | 529)) => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::BAD_GATEWAY,
        };
        GatewayError::from_status(status, message)
    }

    /// An error of the given status, its kind derived from it.
    pub fn from_status(status: StatusCode, message: String) -> Self {
        let kind = match status.as_u16() {
            401 => Kind::Authentication,
            403 => Kind::Permission,
            404 => Kind::NotFound,
            429 => Kind::RateLimit,
            503 | 529 => Kind::Overloaded,
            400..=499 => Kind::InvalidRequest,
            _ => Kind::Api,
        };
        GatewayError {
            status,
            kind,
            message,
            param: None,
            code: None,
        }
    }

    /// OpenAI's `error.type`.
    fn openai_type(&self) -> &'static str {
        match self.kind {
            Kind::InvalidRequest | Kind::NotFound => "invalid_request_error",
            Kind::Authentication => "authentication_error",
            Kind::Permission => "permission_error",
            Kind::RateLimit => "rate_limit_error",
            Kind::Overloaded | Kind::Api => "server_error",
        }
    }

    /// Anthropic's `error.type`.
    fn anthropic_type(&self) -> &'static str {
        match self.kind {
            Kind::InvalidRequest => "invalid_request_error",
            Kind::Authentication => "authentication_error",
            Kind::Permission => "permission_error",
            Kind::NotFound => "not_found_error",
            Kind::RateLimit => "rate_limit_error",
            Kind::Overloaded => "overloaded_error",
            Kind::Api => "api_error",
        }
    }

    /// OpenAI's error body: `{"error":{"message","type","param","code"}}`.
    pub fn openai_body(&self) -> serde_json::Value {
        json!({"error": {
            "message": self.message,
            "type": self.openai_type(),
            "param": self.param,
            "code": self.code,
        }})
    }

    /// Anthropic's error body: `{"type":"error","error":{"type","message"}}`.
    pub fn anthropic_body(&self) -> serde_json::Value {
        json!({"type": "error", "error": {"type": self.anthropic_type(), "message": self.message}})
    }

    /// The answer in OpenAI's format.
    pub fn openai(self) -> Response {
        (self.status, axum::Json(self.openai_body())).into_response()
    }

    /// The answer in Anthropic's format.
    pub fn anthropic(self) -> Response {
        (self.status, axum::Json(self.anthropic_body())).into_response()
    }
}

impl From<ApiError> for GatewayError {
    fn from(e: ApiError) -> Self {
        GatewayError::from_status(e.status(), e.client_message())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_providers_load_refusals_pass_on_and_its_other_statuses_are_502() {
        let status = |code: ErrorCode, upstream: Option<u16>| {
            GatewayError::upstream(&ErrorInfo::new(code, "no").with_upstream_status(upstream))
                .status
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
}
