//! Bearer-token auth. The comparison takes the same time wherever the first difference is.

use crate::access_audit::Refusal;
use crate::error::{ApiError, ScopeRefusal};
use crate::gateway::error::Door;
use crate::jwt::JwtVerifier;
pub use crate::keys::constant_time_eq;
use crate::keys::{KEY_PREFIX, KeyCheckError};
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use elfgate_core::run_tokens::RUN_TOKEN_PREFIX;
use elfgate_core::{ProxyDoor, Scopes};

pub use elfgate_core::Principal;

/// Marks a request that another node of the fleet forwarded and this node took from the bus,
/// verified (the fleet's forward module): it is handled here, never forwarded again, and acts for
/// the [`Principal`] it carries. An extension, which only the daemon itself can set: a header of
/// a similar name from a client means nothing.
#[derive(Debug, Clone, Copy)]
pub struct Forwarded;

/// Finds who a request acts for, or refuses it. The daemon's token is the root key; an API key
/// (`egk_…`) its stored principal; a JWT of the single sign-on's identity provider (`[auth.jwt]`)
/// the principal its claims name; a CLI's run token its own door. Anything else, and a
/// malformed, unknown, expired or revoked key, is 401 with one message (a caller does not learn
/// which); a principal on a route its role does not open is 403.
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
    let given = bearer(&req).map(str::trim);
    let found = match (state.config.token.as_deref(), given) {
        // An API key is itself wherever it is sent, with or without a daemon token.
        (_, Some(t)) if t.starts_with(KEY_PREFIX) => match state.keys.authenticate(t).await {
            Ok(principal) => Found::Principal(principal),
            Err(KeyCheckError::Store(e)) => {
                Found::Refused(ApiError::from(e), "store_unavailable", None)
            }
            Err(KeyCheckError::Refused(why, key_id)) => {
                tracing::info!(key_id, reason = why.as_str(), "API key refused");
                Found::Refused(ApiError::Unauthorized, why.as_str(), key_id)
            }
        },
        // A JWT of the identity provider, like a key, is itself wherever it is sent. Its refusal
        // is a bad key's; the reason goes to the log only.
        (_, Some(t)) if state.jwt.is_some() && JwtVerifier::looks_like_jwt(t) => {
            match state.jwt.as_ref() {
                Some(verifier) => match verifier.principal(t).await {
                    Ok(principal) => Found::Principal(principal),
                    Err(why) => {
                        tracing::info!(reason = %why, "a JWT bearer was refused");
                        Found::Refused(ApiError::Unauthorized, why.code(), None)
                    }
                },
                None => Found::Refused(ApiError::Unauthorized, "invalid_credentials", None),
            }
        }
        // No token configured (loopback only): whoever asks is root, as before keys.
        (None, _) => Found::Principal(Principal::root()),
        (Some(_), None) => Found::Refused(ApiError::Unauthorized, "missing_credentials", None),
        (Some(expected), Some(t)) if constant_time_eq(t.as_bytes(), expected.as_bytes()) => {
            Found::Principal(Principal::root())
        }
        // A CLI's run token (the proxy): its own door only; the door checks the route. A stale
        // one is refused as one of the wrong door.
        (Some(_), Some(t)) if t.starts_with(RUN_TOKEN_PREFIX) => match state.run_tokens.check(t) {
            Some(grant) if opens(grant.door, req.method(), req.uri().path()) => {
                Found::RunToken(grant)
            }
            _ => Found::Refused(ApiError::Forbidden, "run_token_outside_its_door", None),
        },
        // A bearer that is none of the above.
        (Some(_), Some(_)) => Found::Refused(ApiError::Unauthorized, "invalid_credentials", None),
    };
    let refused = match found {
        Found::Principal(principal) if admin_only(req.uri().path()) && !principal.is_admin() => {
            state.access_audit.refused(Refusal {
                principal: Some(&principal),
                key_id: None,
                method: req.method().as_str(),
                path: req.uri().path(),
                status: 403,
                reason: "admin_only",
            });
            ApiError::Forbidden
        }
        Found::Principal(principal) => {
            // Only a key with scopes can be refused by one: it alone keeps what the audit needs.
            let scoped = (principal.scopes != Scopes::default()).then(|| {
                let path = req.uri().path().to_owned();
                (principal.clone(), req.method().clone(), path)
            });
            req.extensions_mut().insert(principal);
            let answer = next.run(req).await;
            if let Some((principal, method, path)) = scoped
                && let Some(ScopeRefusal(scope)) = answer.extensions().get::<ScopeRefusal>()
            {
                state.access_audit.refused(Refusal {
                    principal: Some(&principal),
                    key_id: None,
                    method: method.as_str(),
                    path: &path,
                    status: answer.status().as_u16(),
                    reason: &format!("scope:{scope}"),
                });
            }
            return answer;
        }
        Found::RunToken(grant) => {
            req.extensions_mut().insert(grant);
            return next.run(req).await;
        }
        Found::Refused(refused, reason, key_id) => {
            state.access_audit.refused(Refusal {
                principal: None,
                key_id: key_id.as_deref(),
                method: req.method().as_str(),
                path: req.uri().path(),
                status: refused.status().as_u16(),
                reason,
            });
            refused
        }
    };
    // A front door's SDK reads its refusal in its own API's shape.
    match Door::of_path(req.uri().path()) {
        Some(door) => door.error(&refused),
        None => refused.into_response(),
    }
}

/// What a request's credentials came to.
enum Found {
    /// A principal: the root key or an API key's.
    Principal(Principal),
    /// A CLI's run token, on its own door.
    RunToken(elfgate_core::RunGrant),
    /// Refused, with this answer, for this reason (the audit's word), with the key id the
    /// request came with, if any.
    Refused(ApiError, &'static str, Option<String>),
}

/// The routes only an admin may call: key management and the audit, the fleet's nodes, the
/// metrics, an MCP reload (docs/security.md, "Who may do what").
pub fn admin_only(path: &str) -> bool {
    path.starts_with("/v1/admin/")
        || path == "/v1/admin"
        || path == "/metrics"
        || path == "/v1/cluster"
        || path.starts_with("/v1/cluster/")
        || path == "/v1/mcp/reload"
}

/// The request's credentials as its client sends them: `Authorization: Bearer`, or a front
/// door's own header or query parameter.
fn bearer(req: &Request) -> Option<&str> {
    req.headers()
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
        .or_else(|| gemini_key(req))
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
