//! The requests a rate limit counts, checked before they reach their route: one token of the
//! caller's requests-per-minute buckets, and at a front door a look at its tokens-per-minute
//! buckets, refused with 429 in the route's own error shape. Answers that go through carry the
//! tightest `x-ratelimit-*-requests` trio.

use super::{Limit, RateError};
use crate::auth::{Forwarded, Principal};
use crate::error::ApiError;
use crate::gateway::error::Door;
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Whether a request starts or continues work (and so takes a request of its caller's rate
/// limits): a session's creation, a prompt, a tool run, a workflow's run or resume, and a front
/// door's call. Reads, interrupts, permission answers and administration are not counted.
pub fn counts(method: &Method, path: &str) -> bool {
    if method != Method::POST {
        return false;
    }
    if Door::of_path(path).is_some() {
        return true;
    }
    let parts: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    matches!(
        parts.as_slice(),
        ["", "v1", "sessions"]
            | ["", "v1", "sessions", _, "messages"]
            | ["", "v1", "sessions", _, "tools", _]
            | ["", "v1", "workflows", _, "runs"]
            | ["", "v1", "workflows", _, "runs", _, "resume"]
    )
}

/// The middleware: inside auth (it needs the principal), outside the forward to a session's
/// owner (a forwarded request was counted by the node its client called).
pub async fn limit_requests(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if state.rate_limits.is_empty()
        || req.extensions().get::<Forwarded>().is_some()
        || !counts(req.method(), req.uri().path())
    {
        return next.run(req).await;
    }
    let Some(principal) = req.extensions().get::<Principal>().cloned() else {
        return next.run(req).await;
    };
    let door = Door::of_path(req.uri().path());
    let payer = (&principal).into();
    let checked = async {
        let requests = state.rate_limits.take_request(payer).await?;
        let tokens = match door {
            Some(_) => state.rate_limits.check_tokens(payer).await?,
            None => None,
        };
        Ok::<_, RateError>((requests, tokens))
    }
    .await;
    match checked {
        Ok((requests, tokens)) => {
            let mut answer = next.run(req).await;
            if let Some(quota) = requests {
                quota.write(Limit::Requests, answer.headers_mut());
            }
            if let Some(quota) = tokens {
                quota.write(Limit::Tokens, answer.headers_mut());
            }
            answer
        }
        Err(e) => {
            let refused = ApiError::from(e);
            match door {
                Some(door) => door.error(&refused),
                None => refused.into_response(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::counts;
    use axum::http::Method;

    #[test]
    fn work_counts_and_reads_do_not() {
        for path in [
            "/v1/sessions",
            "/v1/sessions/s1/messages",
            "/v1/sessions/s1/tools/bash",
            "/v1/workflows/w/runs",
            "/v1/workflows/w/runs/r/resume",
            "/v1/chat/completions",
            "/v1/responses",
            "/v1/messages",
            "/v1beta/models/m:generateContent",
        ] {
            assert!(counts(&Method::POST, path), "{path}");
        }
        for (method, path) in [
            (Method::GET, "/v1/sessions"),
            (Method::GET, "/v1/models"),
            (Method::POST, "/v1/sessions/s1/interrupt"),
            (Method::POST, "/v1/admin/keys"),
        ] {
            assert!(!counts(&method, path), "{method} {path}");
        }
    }
}
