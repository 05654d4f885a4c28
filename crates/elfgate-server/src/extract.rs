//! Extractors whose every rejection is an [`ApiError`], so that a bad body, path or query gets
//! the same JSON error shape as everything else instead of axum's plain-text rejections.

use crate::error::ApiError;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use bytes::Bytes;
use elfgate_api::UnknownFields;
use serde::de::DeserializeOwned;

/// A JSON body whose every failure is an [`ApiError`]: 415 unless declared as JSON, 413 over the
/// limit, 400 for malformed JSON or a field of the wrong type, 422 for a field the body does not
/// have (see [`StrictBody`]), each naming the field.
///
/// The Content-Type check is a security boundary, not pedantry: a web page on any origin may
/// send `text/plain`, form data or multipart without a CORS preflight, so a daemon that parses
/// those as JSON can be driven by any page the user visits. `application/json` needs a
/// preflight, which the origin check answers. A request with no Content-Type and an empty body
/// is taken as `{}` (e.g. `POST …/interrupt` with nothing to say).
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

/// The body limit, stored in request extensions by the router so that 413 can name it.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit(pub usize);

/// A request body of the native API: a field it does not know is refused (422 naming it), never
/// ignored, because an ignored field fails open (a misspelt or renamed restriction restricts
/// nothing). Types without a flattened part say `#[serde(deny_unknown_fields)]` and keep the
/// default; serde cannot deny fields beside a `#[serde(flatten)]`, so such a type ends with an
/// [`UnknownFields`] collecting what no field took, and returns it here.
pub trait StrictBody {
    /// The fields the body carried that the type has no place for.
    fn unknown_fields(&self) -> Option<&UnknownFields> {
        None
    }
}

impl StrictBody for elfgate_api::CreateSessionRequest {
    fn unknown_fields(&self) -> Option<&UnknownFields> {
        Some(&self.unknown)
    }
}

impl StrictBody for elfgate_api::SendMessageRequest {
    fn unknown_fields(&self) -> Option<&UnknownFields> {
        Some(&self.unknown)
    }
}

impl StrictBody for elfgate_api::PermissionBody {}

impl StrictBody for elfgate_api::InterruptRequest {}

/// Fields of the specification's EngineSessionContext that have no meaning in this daemon, with
/// what takes their place (docs/api.md, "Fields of the specification this daemon does not take").
const NOT_HERE: &[(&str, &str)] = &[
    (
        "customAgentOptions",
        "an engine's options are engineConfig keys here (docs/api.md, engineConfig), each checked \
         by name; there is no free-form bag",
    ),
    (
        "isOfficialProvider",
        "whether a provider is official is the operator's configuration (its kind and base URL), \
         never a client's claim",
    ),
    (
        "onSessionEnd",
        "a session's callback is engineConfig `notifyUrl` (a signed POST of each run's end, when \
         the operator configured [webhooks] notify_secret_env); or follow \
         GET /v1/sessions/{id}/events to its `complete`",
    ),
];

fn unknown_field(name: &str) -> ApiError {
    match NOT_HERE.iter().find(|(n, _)| *n == name) {
        Some((_, instead)) => {
            ApiError::Unprocessable(format!("`{name}` is not taken by this daemon: {instead}"))
        }
        None => ApiError::Unprocessable(format!("unknown field `{name}` in the body")),
    }
}

/// Parses a body, naming the field at fault: 422 for one the type does not have, 400 otherwise.
pub(crate) fn parse_body<T: DeserializeOwned + StrictBody>(bytes: &[u8]) -> Result<T, ApiError> {
    // Every body of the native API is an object; serde would also take an array as a struct
    // (its fields by position, so `[]` as all defaults), which no client means.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        return Err(ApiError::BadRequest(
            "invalid JSON body: an object is required, not an array".into(),
        ));
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let msg = inner.to_string();
        let at = if path.is_empty() || path == "." {
            String::new()
        } else {
            format!(" (at `{path}`)")
        };
        // A field the type does not have, or one given twice (both names of a renamed field,
        // `channelPermissions` and `channelUserPermissions`, say): the body's fields are wrong,
        // not its syntax.
        if inner.is_data()
            && (msg.starts_with("unknown field") || msg.starts_with("duplicate field"))
        {
            ApiError::Unprocessable(format!("{msg}{at}"))
        } else {
            ApiError::BadRequest(format!("invalid JSON body: {msg}{at}"))
        }
    })?;
    de.end()
        .map_err(|e| ApiError::BadRequest(format!("invalid JSON body: {e}")))?;
    if let Some(name) = value.unknown_fields().and_then(UnknownFields::first) {
        return Err(unknown_field(name));
    }
    Ok(value)
}

impl<S, T> FromRequest<S> for ApiJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned + StrictBody,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let declared_json = req
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .map(|v| is_json_media_type(v.as_bytes()));
        if declared_json == Some(false) {
            return Err(unsupported_media_type());
        }
        let ApiBytes(bytes) = ApiBytes::from_request(req, state).await?;
        let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else if declared_json.is_none() {
            return Err(unsupported_media_type());
        } else {
            &bytes
        };
        parse_body(bytes).map(ApiJson)
    }
}

/// A body of any type, as bytes: 413 over the limit and 400 when it cannot be read, as
/// [`ApiError`]s (the JSON error shape) like every other refusal.
#[derive(Debug)]
pub struct ApiBytes(pub Bytes);

impl<S> FromRequest<S> for ApiBytes
where
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let limit = req
            .extensions()
            .get::<BodyLimit>()
            .map(|l| l.0)
            .unwrap_or_default();
        Bytes::from_request(req, state)
            .await
            .map(ApiBytes)
            .map_err(|rej| {
                if rej.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::PayloadTooLarge(limit)
                } else {
                    ApiError::BadRequest(format!("cannot read the body: {rej}"))
                }
            })
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

pub(crate) fn unsupported_media_type() -> ApiError {
    ApiError::UnsupportedMediaType(
        "the body must be JSON sent with Content-Type: application/json".into(),
    )
}

/// `application/json` or `application/*+json`, any parameters (charset) allowed.
pub(crate) fn is_json_media_type(value: &[u8]) -> bool {
    let Ok(value) = std::str::from_utf8(value) else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or_default().trim();
    let Some((kind, subtype)) = essence.split_once('/') else {
        return false;
    };
    kind.eq_ignore_ascii_case("application")
        && (subtype.eq_ignore_ascii_case("json")
            || subtype.len() > 5
                && subtype.as_bytes()[subtype.len() - 5..].eq_ignore_ascii_case(b"+json"))
}

#[cfg(test)]
mod tests {
    use super::is_json_media_type;

    #[test]
    fn json_media_types() {
        for ok in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/merge-patch+json",
        ] {
            assert!(is_json_media_type(ok.as_bytes()), "{ok}");
        }
        for bad in [
            "text/plain",
            "text/plain;charset=UTF-8",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonx",
            "+json",
            "",
        ] {
            assert!(!is_json_media_type(bad.as_bytes()), "{bad}");
        }
    }
}
