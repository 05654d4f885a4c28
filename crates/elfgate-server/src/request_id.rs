//! Request ids: every answer carries `x-request-id` (the client's own, when it sent a usable one,
//! else a new UUIDv7), and a failure the daemon logs is logged under it, so that the id a client
//! reports leads to the log line (docs/api.md, "Request ids").

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;

/// The header, both ways.
pub static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The longest client-sent id that is kept; a longer or non-printable one is replaced.
const MAX_LEN: usize = 128;

tokio::task_local! {
    static CURRENT: HeaderValue;
}

/// The id of the request being handled, when called from inside its handling.
pub fn current() -> Option<String> {
    CURRENT
        .try_with(|v| v.to_str().ok().map(str::to_owned))
        .ok()
        .flatten()
}

fn usable(v: &HeaderValue) -> bool {
    let b = v.as_bytes();
    !b.is_empty() && b.len() <= MAX_LEN && b.iter().all(u8::is_ascii_graphic)
}

/// Middleware: gives the request its id for the rest of the stack and puts it on the answer.
pub async fn assign(req: Request, next: Next) -> Response {
    let id = match req.headers().get(&REQUEST_ID) {
        Some(v) if usable(v) => v.clone(),
        _ => {
            let fresh = uuid::Uuid::now_v7().to_string();
            // A UUID's text is always a valid header value.
            HeaderValue::from_str(&fresh).unwrap_or(HeaderValue::from_static("unknown"))
        }
    };
    let mut resp = CURRENT.scope(id.clone(), next.run(req)).await;
    resp.headers_mut().insert(REQUEST_ID.clone(), id);
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_short_printable_ids_are_kept() {
        assert!(usable(&HeaderValue::from_static("abc-123_x.y")));
        assert!(!usable(&HeaderValue::from_static("")));
        assert!(!usable(&HeaderValue::from_static("has space")));
        assert!(!usable(
            &HeaderValue::from_str(&"x".repeat(MAX_LEN + 1)).unwrap()
        ));
    }
}
