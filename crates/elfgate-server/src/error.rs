//! The one API error type, mapped to status codes and the JSON body `{error: {code, message}}`;
//! the front doors render the same error in their APIs' own shapes (gateway/error.rs).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use elfgate_core::{DispatchError, ErrorCode, ErrorInfo, RunId};
use elfgate_store::StoreError;
use serde::Serialize;

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
    /// One of bad_request, unauthorized, forbidden, not_found, method_not_allowed, busy,
    /// conflict, payload_too_large, unsupported_media_type, unprocessable, too_many_queued,
    /// rate_limited, not_implemented, unavailable, internal.
    pub code: ErrorCode,
    /// What happened, for a human.
    pub message: String,
    /// The key's scope that refused the request (403 `forbidden`), e.g. `engines`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

/// An error a client sees.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The body or a parameter is wrong (400).
    #[error("{0}")]
    BadRequest(String),
    /// A field of a front door's request is wrong (400), named for the caller's SDK.
    #[error("{message}")]
    InvalidParam {
        /// The field, as the door's API spells it.
        param: String,
        /// What is wrong with it.
        message: String,
    },
    /// A front door's `model` names no route (404; OpenAI's `model_not_found`).
    #[error("The model '{model}' does not exist: {why}")]
    UnknownModel {
        /// The model asked for.
        model: String,
        /// Why it names no route.
        why: String,
    },
    /// A provider's limit and its queue are full (429): a front door's call is not queued
    /// further.
    #[error("provider '{provider}' is at its limit and {max_queued} requests already wait for it")]
    ProviderQueueFull {
        /// The provider.
        provider: String,
        /// How many calls may wait for it.
        max_queued: usize,
    },
    /// A front door's run failed before its answer began (its `error` event), with the status
    /// that failure maps to ([`upstream_status`]).
    #[error("{}", .0.message)]
    Upstream(ErrorInfo),
    /// No credentials, or none the daemon takes: a wrong token; a malformed, unknown, expired or
    /// revoked key (401, one message for all, so that a caller does not learn which).
    #[error("missing or invalid credentials")]
    Unauthorized,
    /// An inbound webhook's delivery without a valid signature (401).
    #[error("{0}")]
    Unsigned(String),
    /// Credentials that do not open this route: a principal that is not an admin on an admin
    /// route, a CLI's run token outside its door (403).
    #[error("these credentials do not open this route")]
    Forbidden,
    /// A request the daemon refuses whatever its credentials: a foreign Host or Origin (403).
    #[error("{0}")]
    Refused(String),
    /// A request past one of its key's scopes (403), naming the scope.
    #[error("{message}")]
    OutOfScope {
        /// The scope, as the `scopes` object spells it (`engines`, `projectRoots`, ...).
        scope: &'static str,
        /// What it does not allow.
        message: String,
    },
    /// Unknown session, run or request (404).
    #[error("{0}")]
    NotFound(String),
    /// The session is running and the prompt may not wait (409).
    #[error("session is busy")]
    Busy {
        /// The run going on.
        active_run_id: RunId,
    },
    /// The path exists but not with this method (405); the router adds the `Allow` header.
    #[error("{0}")]
    MethodNotAllowed(String),
    /// Already decided or otherwise conflicting (409).
    #[error("{0}")]
    Conflict(String),
    /// Body over the limit (413).
    #[error("request body is larger than {0} bytes")]
    PayloadTooLarge(usize),
    /// An attachment over its limit (413), named with the limit's key.
    #[error("{0}")]
    AttachmentTooLarge(String),
    /// A body that is not declared as JSON (415).
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// Unknown engine or provider (422).
    #[error("{0}")]
    Unprocessable(String),
    /// The session's queue of waiting prompts is full (429).
    #[error("the session is busy and {0} prompts already wait for it")]
    TooManyQueued(usize),
    /// Over a rate limit of the caller's key, user or team (429, with `Retry-After` and the
    /// limit's `x-ratelimit-*` headers).
    #[error("{0}")]
    RateLimited(crate::rate_limits::RateRefusal),
    /// Not built yet (501).
    #[error("{0}")]
    NotImplemented(String),
    /// Shutting down or not ready (503).
    #[error("{0}")]
    Unavailable(String),
    /// A fault of the daemon (500).
    #[error("internal error: {0}")]
    Internal(String),
    /// The store failed: 503 with `Retry-After` when trying again may work (busy, locked, full),
    /// 503 while the store is closing, 500 otherwise. The driver's text goes to the log only.
    #[error("{}", .0.summary())]
    Storage(StoreError),
}

impl From<DispatchError> for ApiError {
    fn from(e: DispatchError) -> Self {
        match e {
            DispatchError::Busy { active_run_id } => ApiError::Busy { active_run_id },
            DispatchError::QueueFull { max_queued } => ApiError::TooManyQueued(max_queued),
            e @ DispatchError::UnknownEngine(_) => ApiError::Unprocessable(e.to_string()),
            e @ DispatchError::ShuttingDown => ApiError::Unavailable(e.to_string()),
        }
    }
}

impl From<crate::rate_limits::RateError> for ApiError {
    fn from(e: crate::rate_limits::RateError) -> Self {
        match e {
            crate::rate_limits::RateError::Refused(refusal) => ApiError::RateLimited(refusal),
            crate::rate_limits::RateError::Store(e) => ApiError::Storage(e),
        }
    }
}

impl ApiError {
    /// A 400 naming the field at fault, when there is one.
    pub(crate) fn invalid(param: impl Into<Option<String>>, message: impl Into<String>) -> Self {
        let message = message.into();
        match param.into() {
            Some(param) => ApiError::InvalidParam { param, message },
            None => ApiError::BadRequest(message),
        }
    }

    /// A 404 for a model that names no route.
    pub(crate) fn unknown_model(model: &str, why: &str) -> Self {
        ApiError::UnknownModel {
            model: model.to_string(),
            why: why.to_string(),
        }
    }

    /// The daemon takes no new work: it is shutting down (503). The one message for it.
    pub(crate) fn shutting_down() -> Self {
        DispatchError::ShuttingDown.into()
    }

    pub(crate) fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) | ApiError::InvalidParam { .. } => StatusCode::BAD_REQUEST,
            ApiError::UnknownModel { .. } => StatusCode::NOT_FOUND,
            ApiError::ProviderQueueFull { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Upstream(e) => upstream_status(e),
            ApiError::Unauthorized | ApiError::Unsigned(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden | ApiError::Refused(_) | ApiError::OutOfScope { .. } => {
                StatusCode::FORBIDDEN
            }
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Busy { .. } | ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge(_) | ApiError::AttachmentTooLarge(_) => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::TooManyQueued(_) | ApiError::RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::NotImplemented(_) => StatusCode::NOT_IMPLEMENTED,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Storage(StoreError::OwnedElsewhere { .. } | StoreError::Fenced(_)) => {
                StatusCode::CONFLICT
            }
            ApiError::Storage(e) if e.is_transient() => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Storage(StoreError::Closed(_)) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Storage(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn code(&self) -> ErrorCode {
        match self {
            ApiError::BadRequest(_) | ApiError::InvalidParam { .. } => ErrorCode::BadRequest,
            ApiError::UnknownModel { .. } => ErrorCode::NotFound,
            ApiError::ProviderQueueFull { .. } => ErrorCode::TooManyQueued,
            ApiError::Upstream(e) => e.code,
            ApiError::Unauthorized | ApiError::Unsigned(_) => ErrorCode::Unauthorized,
            ApiError::Forbidden | ApiError::Refused(_) | ApiError::OutOfScope { .. } => {
                ErrorCode::Forbidden
            }
            ApiError::NotFound(_) => ErrorCode::NotFound,
            ApiError::MethodNotAllowed(_) => ErrorCode::MethodNotAllowed,
            ApiError::Busy { .. } => ErrorCode::Busy,
            ApiError::Conflict(_) => ErrorCode::Conflict,
            ApiError::PayloadTooLarge(_) | ApiError::AttachmentTooLarge(_) => {
                ErrorCode::PayloadTooLarge
            }
            ApiError::UnsupportedMediaType(_) => ErrorCode::UnsupportedMediaType,
            ApiError::Unprocessable(_) => ErrorCode::Unprocessable,
            ApiError::TooManyQueued(_) => ErrorCode::TooManyQueued,
            ApiError::RateLimited(_) => ErrorCode::RateLimited,
            ApiError::NotImplemented(_) => ErrorCode::NotImplemented,
            ApiError::Unavailable(_) => ErrorCode::Unavailable,
            ApiError::Internal(_) => ErrorCode::Internal,
            ApiError::Storage(_) => match self.status() {
                StatusCode::SERVICE_UNAVAILABLE => ErrorCode::Unavailable,
                StatusCode::CONFLICT => ErrorCode::Conflict,
                _ => ErrorCode::Internal,
            },
        }
    }

    /// The message a client sees. A storage failure is logged here under the request's id (a
    /// fresh reference outside a request), which the message carries instead of the driver's
    /// text ([`StoreError::report_for_request`]).
    pub(crate) fn client_message(&self) -> String {
        match self {
            ApiError::Internal(msg) => {
                tracing::error!(error = %msg, "internal error");
                self.to_string()
            }
            // Which node runs the session is what the client needs, and no driver text.
            ApiError::Storage(e @ (StoreError::OwnedElsewhere { .. } | StoreError::Fenced(_))) => {
                format!("{e}; send it to that node, or again once the run has ended")
            }
            ApiError::Storage(e) if e.is_transient() => {
                format!("{}; try again later", storage_report(e))
            }
            ApiError::Storage(e) => storage_report(e),
            _ => self.to_string(),
        }
    }
}

/// The status a run's failure gets when a front door's call fails with it. A provider's refusal
/// for load (429, 503, 529) is passed on as such, so that the caller's SDK backs off; any other
/// status of the provider's is the gateway's failure (502), not the caller's: a 401 there means
/// the daemon's key for the provider, not the caller's token.
pub(crate) fn upstream_status(e: &ErrorInfo) -> StatusCode {
    match (e.code, e.upstream_status) {
        // The daemon has no key for the route's provider: nothing the caller can change in the
        // request, and nothing was sent upstream; the route is unavailable until an operator
        // sets the key.
        (ErrorCode::MissingApiKey, _) => StatusCode::SERVICE_UNAVAILABLE,
        (ErrorCode::FirstTokenTimeout | ErrorCode::IdleTimeout, _) => StatusCode::GATEWAY_TIMEOUT,
        (ErrorCode::UnknownProvider | ErrorCode::NoModel, _) => StatusCode::NOT_FOUND,
        (ErrorCode::UpstreamStatus, Some(429)) | (ErrorCode::BudgetExceeded, _) => {
            StatusCode::TOO_MANY_REQUESTS
        }
        (ErrorCode::UpstreamStatus, Some(503 | 529)) => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::BAD_GATEWAY,
    }
}

/// A storage failure's client message, logged under the request's id when there is one.
fn storage_report(e: &StoreError) -> String {
    match crate::request_id::current() {
        Some(id) => e.report_for_request(&id),
        None => e.report(),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code(),
                message: self.client_message(),
                scope: match &self {
                    ApiError::OutOfScope { scope, .. } => Some(scope.to_string()),
                    _ => None,
                },
            },
            active_run_id: match &self {
                ApiError::Busy { active_run_id } => Some(*active_run_id),
                _ => None,
            },
        };
        self.answer(body)
    }
}

/// Marks an answer that one of the key's scopes refused, naming the scope, so that the auth layer
/// records it in the access audit on the way out (the service layer that refuses it does not know
/// the route).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScopeRefusal(pub &'static str);

impl ApiError {
    /// The answer with `body`, in whichever wire format: the status, and `Retry-After` when
    /// trying again later may work.
    pub(crate) fn answer(&self, body: impl Serialize) -> Response {
        let mut resp = (self.status(), axum::Json(body)).into_response();
        if let ApiError::OutOfScope { scope, .. } = self {
            resp.extensions_mut().insert(ScopeRefusal(scope));
        }
        if let ApiError::RateLimited(refusal) = self {
            refusal.write_headers(resp.headers_mut());
        }
        if let ApiError::Storage(e) = self
            && let Some(after) = e.retry_after()
        {
            resp.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(after.as_secs().max(1)),
            );
        }
        resp
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        ApiError::Storage(e)
    }
}

/// The 405 answer of every route, for a method the route does not have.
pub async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::MethodNotAllowed(format!("{method} is not allowed on {}", uri.path()))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn answer(e: ApiError) -> (StatusCode, Option<String>, serde_json::Value) {
        let resp = e.into_response();
        let status = resp.status();
        let retry_after = resp
            .headers()
            .get(header::RETRY_AFTER)
            .map(|v| v.to_str().unwrap().to_string());
        let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, retry_after, serde_json::from_slice(&body).unwrap())
    }

    const DRIVER_TEXT: &str = "error returned from database: (code: 5) database is locked";

    #[tokio::test]
    async fn transient_storage_failures_are_503_with_retry_after_and_no_driver_text() {
        for (e, wait) in [
            (StoreError::Busy(DRIVER_TEXT.into()), "1"),
            (StoreError::TableLocked(DRIVER_TEXT.into()), "1"),
            (StoreError::Full(DRIVER_TEXT.into()), "30"),
            (
                StoreError::Unavailable("Connection refused (os error 111)".into()),
                "2",
            ),
        ] {
            let (status, retry_after, body) = answer(e.into()).await;
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(retry_after.as_deref(), Some(wait));
            assert_eq!(body["error"]["code"], "unavailable");
            let message = body["error"]["message"].as_str().unwrap();
            assert!(message.contains("(ref "), "{message}");
            assert!(message.contains("try again later"), "{message}");
            assert!(!message.contains("code: 5"), "{message}");
        }
    }

    #[tokio::test]
    async fn other_storage_failures_are_500_without_driver_text() {
        let secret = "UNIQUE constraint failed: runs.client_msg_id in /var/lib/elfgate";
        for e in [
            StoreError::Io(secret.into()),
            StoreError::Constraint(secret.into()),
            StoreError::Corrupt(secret.into()),
            StoreError::NotFound(secret.into()),
            StoreError::Database(secret.into()),
        ] {
            let summary = e.summary();
            let (status, retry_after, body) = answer(e.into()).await;
            assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{summary}");
            assert_eq!(retry_after, None);
            assert_eq!(body["error"]["code"], "internal");
            let message = body["error"]["message"].as_str().unwrap();
            assert!(message.starts_with(summary), "{message}");
            assert!(message.contains("(ref "), "{message}");
            assert!(!message.contains("runs.client_msg_id"), "{message}");
        }
        // A store closing under a shutdown: unavailable, but not worth a quick retry.
        let (status, retry_after, body) =
            answer(StoreError::Closed("the writer has stopped".into()).into()).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(retry_after, None);
        assert_eq!(body["error"]["code"], "unavailable");
    }

    #[tokio::test]
    async fn every_reference_is_new() {
        let message = |b: serde_json::Value| b["error"]["message"].as_str().unwrap().to_string();
        let (_, _, a) = answer(StoreError::Busy(String::new()).into()).await;
        let (_, _, b) = answer(StoreError::Busy(String::new()).into()).await;
        assert_ne!(message(a), message(b));
    }
}
