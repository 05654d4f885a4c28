//! Errors of the front doors, written in the wire format of the caller's SDK.

use crate::error::ApiError;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
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

    /// An upstream failure the run reported (`error` event code and message).
    pub fn upstream(code: &str, message: String) -> Self {
        let status = if code == "first_token_timeout" || code == "idle_timeout" {
            StatusCode::GATEWAY_TIMEOUT
        } else if message.contains("429") {
            StatusCode::TOO_MANY_REQUESTS
        } else if code == "unknown_provider" || code == "no_model" {
            StatusCode::NOT_FOUND
        } else {
            StatusCode::BAD_GATEWAY
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
