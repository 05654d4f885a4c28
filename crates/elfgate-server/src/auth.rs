//! Bearer-token auth. The comparison takes the same time wherever the first difference is.

use crate::error::ApiError;
use crate::gateway::error::Door;
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use elfgate_core::ProxyDoor;

pub use elfgate_core::Principal;

/// Marks a request that another node of the fleet forwarded and this node took from the bus,
/// verified (the fleet's forward module): it is handled here, never forwarded again, and acts for
/// the [`Principal`] it carries. An extension, which only the daemon itself can set: a header of
/// a similar name from a client means nothing.
#[derive(Debug, Clone, Copy)]
pub struct Forwarded;

/// Compares two byte strings in time that depends only on their lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    // black_box keeps the optimizer from turning the loop into an early exit.
    std::hint::black_box(diff) == 0
}

/// Rejects requests without the configured token: 401 when missing or malformed, 403 when wrong.
pub async fn require_token(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    // A request another node of the fleet forwarded, verified on the bus: that node checked its
    // credentials and says for whom it acts (the fleet's forward module). A client cannot set a
    // request's extensions.
    if req.extensions().get::<Forwarded>().is_some()
        && req.extensions().get::<Principal>().is_some()
    {
        return next.run(req).await;
    }
    let Some(expected) = state.config.token.as_deref() else {
        req.extensions_mut().insert(Principal::root());
        return next.run(req).await;
    };
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            // The scheme name is case-insensitive (RFC 7235).
            let (scheme, token) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then_some(token)
        })
        // Anthropic's clients (claude-code with ANTHROPIC_API_KEY, the SDK's api_key) send their
        // key as x-api-key; the Anthropic front door takes the token there too. Like
        // Authorization, it is a header no web page can send without a CORS preflight.
        .or_else(|| {
            req.uri()
                .path()
                .starts_with("/v1/messages")
                .then(|| req.headers().get("x-api-key"))
                .flatten()
                .and_then(|v| v.to_str().ok())
        })
        // Gemini's clients send theirs as x-goog-api-key, or as `?key=` in the URL.
        .or_else(|| gemini_key(&req));
    let refused = match given.map(str::trim) {
        None => ApiError::Unauthorized,
        Some(t) if constant_time_eq(t.as_bytes(), expected.as_bytes()) => {
            req.extensions_mut().insert(Principal::root());
            return next.run(req).await;
        }
        // A JWT of the single sign-on's identity provider.
        Some(t) if state.jwt.is_some() && crate::jwt::JwtVerifier::looks_like_jwt(t) => {
            match jwt_principal(&state, t).await {
                Some(principal) => {
                    req.extensions_mut().insert(principal);
                    return next.run(req).await;
                }
                None => ApiError::Unauthorized,
            }
        }
        // A CLI's run token (the proxy): its own door only; the door checks the route.
        Some(t) => match state.run_tokens.check(t) {
            Some(grant) if opens(grant.door, req.method(), req.uri().path()) => {
                let mut req = req;
                req.extensions_mut().insert(grant);
                return next.run(req).await;
            }
            _ => ApiError::Forbidden,
        },
    };
    // A front door's SDK reads its refusal in its own API's shape.
    match Door::of_path(req.uri().path()) {
        Some(door) => door.error(&refused),
        None => refused.into_response(),
    }
}

/// The principal a JWT bearer names when single sign-on is on and the token passes its checks;
/// a refusal's reason goes to the log only (the client gets the same 401 as for a bad key).
async fn jwt_principal(state: &AppState, token: &str) -> Option<Principal> {
    let verifier = state.jwt.as_ref()?;
    match verifier.principal(token).await {
        Ok(principal) => Some(principal),
        Err(why) => {
            tracing::info!(reason = %why, "a JWT bearer was refused");
            None
        }
    }
}

/// Whether a run token for `door` opens this request: the door's own calls, nothing else.
fn opens(door: ProxyDoor, method: &axum::http::Method, path: &str) -> bool {
    if method != axum::http::Method::POST {
        return false;
    }
    match door {
        ProxyDoor::Responses => path == "/v1/responses",
        ProxyDoor::Messages => path == "/v1/messages",
        ProxyDoor::Gemini => crate::gateway::is_gemini_path(path),
    }
}

/// The Gemini door's key: `x-goog-api-key`, else the query's `key` (its clients' two ways).
fn gemini_key(req: &Request) -> Option<&str> {
    let path = req.uri().path();
    // GET /v1/models is both APIs' model list (the google-genai SDK's with a base URL of its own).
    if !crate::gateway::is_gemini_path(path) && path != "/v1/models" {
        return None;
    }
    if let Some(v) = req.headers().get("x-goog-api-key") {
        return v.to_str().ok();
    }
    req.uri()
        .query()?
        .split('&')
        .find_map(|kv| kv.strip_prefix("key="))
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn compares_bytes() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(constant_time_eq(b"", b""));
    }
}
