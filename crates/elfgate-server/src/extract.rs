//! Extractors whose every rejection is an [`ApiError`], so that a bad body, path or query gets
//! the same JSON error shape as everything else instead of axum's plain-text rejections.

use crate::error::ApiError;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use bytes::Bytes;
use serde::de::DeserializeOwned;

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

/// Path parameters. A segment that cannot be decoded names nothing: 404, like a malformed id.
#[derive(Debug)]
pub struct ApiPath<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiPath<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Send,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(v)) => Ok(ApiPath(v)),
            // Only a route declared without the parameter its handler reads: a fault of ours.
            Err(rej) if rej.status().is_server_error() => Err(ApiError::Internal(rej.body_text())),
            Err(rej) => Err(ApiError::NotFound(format!(
                "no such resource: {}",
                rej.body_text()
            ))),
        }
    }
}

/// Query parameters: 400 naming the parameter when one is malformed.
#[derive(Debug)]
pub struct ApiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(v)| ApiQuery(v))
            .map_err(|rej| ApiError::BadRequest(rej.body_text()))
    }
}
