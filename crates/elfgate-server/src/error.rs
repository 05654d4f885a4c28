//! The one API error type, mapped to status codes and the JSON body `{error: {code, message}}`.

use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use elfgate_core::RunId;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The JSON body of every error response.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
    /// The run going on, when the session is busy (409 `busy`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_run_id: Option<RunId>,
}

/// A machine code and a human message.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    /// One of bad_request, unauthorized, forbidden, not_found, busy, conflict,
    /// payload_too_large, unprocessable, too_many_queued, not_implemented, unavailable, internal.
    pub code: String,
    /// What happened, for a human.
    pub message: String,
}

/// An error a client sees.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The body or a parameter is wrong (400).
    #[error("{0}")]
    BadRequest(String),
    /// No or malformed credentials (401).
    #[error("missing or malformed bearer token")]
    Unauthorized,
    /// Wrong credentials (403).
    #[error("invalid token")]
    Forbidden,
    /// Unknown session, run or request (404).
    #[error("{0}")]
    NotFound(String),
    /// The session is running and the prompt may not wait (409).
    #[error("session is busy")]
    Busy {
        /// The run going on.
        active_run_id: RunId,
    },
    /// Already decided or otherwise conflicting (409).
    #[error("{0}")]
    Conflict(String),
    /// Body over the limit (413).
    #[error("request body is larger than {0} bytes")]
    PayloadTooLarge(usize),
    /// Unknown engine or provider (422).
    #[error("{0}")]
    Unprocessable(String),
    /// The session's queue of waiting prompts is full (429).
    #[error("the session is busy and {0} prompts already wait for it")]
    TooManyQueued(usize),
    /// Not built yet (501).
    #[error("{0}")]
    NotImplemented(String),
    /// Shutting down or not ready (503).
    #[error("{0}")]
    Unavailable(String),
    /// A fault of the daemon (500).
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Busy { .. } | ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::TooManyQueued(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::NotImplemented(_) => StatusCode::NOT_IMPLEMENTED,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn code(&self) -> &'static str {
        match self {
            ApiError::BadRequest(_) => "bad_request",
            ApiError::Unauthorized => "unauthorized",
            ApiError::Forbidden => "forbidden",
            ApiError::NotFound(_) => "not_found",
            ApiError::Busy { .. } => "busy",
            ApiError::Conflict(_) => "conflict",
            ApiError::PayloadTooLarge(_) => "payload_too_large",
            ApiError::Unprocessable(_) => "unprocessable",
            ApiError::TooManyQueued(_) => "too_many_queued",
            ApiError::NotImplemented(_) => "not_implemented",
            ApiError::Unavailable(_) => "unavailable",
            ApiError::Internal(_) => "internal",
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal(msg) = &self {
            tracing::error!(error = %msg, "internal error");
        }
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code().to_string(),
                message: self.to_string(),
            },
            active_run_id: match &self {
                ApiError::Busy { active_run_id } => Some(*active_run_id),
                _ => None,
            },
        };
        (self.status(), axum::Json(body)).into_response()
    }
}

impl From<elfgate_store::StoreError> for ApiError {
    fn from(e: elfgate_store::StoreError) -> Self {
        ApiError::Internal(e.to_string())
    }
}

/// A JSON body whose every failure is an [`ApiError`]: 413 over the limit, 400 for malformed
/// JSON or wrong fields. The Content-Type is not required, so that `curl -d` works.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

/// The body limit, stored in request extensions by the router so that 413 can name it.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit(pub usize);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let limit = req
            .extensions()
            .get::<BodyLimit>()
            .map(|l| l.0)
            .unwrap_or_default();
        let bytes = Bytes::from_request(req, state).await.map_err(|rej| {
            if rej.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge(limit)
            } else {
                ApiError::BadRequest(format!("cannot read the body: {rej}"))
            }
        })?;
        let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &bytes
        };
        serde_json::from_slice(bytes)
            .map(ApiJson)
            .map_err(|e| ApiError::BadRequest(format!("invalid JSON body: {e}")))
    }
}
