//! Control requests for a session another node runs, forwarded to that node over NATS
//! request/reply and answered by it as if the client had reached it directly: the owner runs the
//! request through its own router (auth included) and sends back the status, headers and body.
//!
//! Forwarded: the session's POST and DELETE requests (a prompt, an interrupt, a permission
//! answer, a tool run, a delete) and the session's own GET (whether it runs, its queue) when this
//! node is not running the session and the store names another live owner. Not forwarded: other
//! reads (every node reads the same database), streams, and a request already forwarded once
//! (the owner answers it itself, whatever it finds).

use super::Fleet;
use crate::error::ApiError;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use elfgate_core::SessionId;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Marks a request a node forwarded: the owner never forwards it again.
const FORWARDED: &str = "x-elfgate-forwarded-by";
/// The most bytes of an answer sent back (the API's answers are small JSON documents).
const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// A request as it travels to the owner.
#[derive(Serialize, Deserialize)]
struct Envelope {
    method: String,
    uri: String,
    headers: Vec<(String, String)>,
    body: String,
}

/// The owner's answer as it travels back.
#[derive(Serialize, Deserialize)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

/// The session a control request is about: POST or DELETE under `/v1/sessions/{id}`, and the
/// session itself (`GET /v1/sessions/{id}`), whose state (running, queued runs) only the node
/// running it knows.
fn controlled_session(req: &Request) -> Option<SessionId> {
    let rest = req.uri().path().strip_prefix("/v1/sessions/")?;
    let (id, below) = match rest.split_once('/') {
        Some((id, below)) => (id, Some(below)),
        None => (rest, None),
    };
    let control = match *req.method() {
        Method::POST | Method::DELETE => true,
        Method::GET => below.is_none(),
        _ => false,
    };
    if control { id.parse().ok() } else { None }
}

/// Whether the client asked for a stream, which one NATS reply cannot carry.
fn wants_stream(req: &Request) -> bool {
    req.headers()
        .get(axum::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"))
}

/// The middleware: forwards a control request to the session's owner when that is another node.
pub(crate) async fn to_owner(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let Some(fleet) = state.fleet.clone() else {
        return next.run(req).await;
    };
    let Some(session) = controlled_session(&req) else {
        return next.run(req).await;
    };
    if req.headers().contains_key(FORWARDED)
        || wants_stream(&req)
        || state.dispatcher.active().contains(session)
    {
        return next.run(req).await;
    }
    let owner = match fleet.store.session_owner(session).await {
        Ok(Some(owner)) if *owner != *fleet.node_id => owner,
        Ok(_) => return next.run(req).await,
        Err(e) => return ApiError::Storage(e).into_response(),
    };
    let limit = req
        .extensions()
        .get::<crate::extract::BodyLimit>()
        .map_or(MAX_ANSWER_BYTES, |l| l.0);
    match forward(&fleet, &owner, req, limit).await {
        Ok(resp) => resp,
        Err(e) => e.into_response(),
    }
}

async fn forward(
    fleet: &Fleet,
    owner: &str,
    req: Request,
    limit: usize,
) -> Result<Response, ApiError> {
    if !fleet.nats_connected() {
        return Err(ApiError::Unavailable(format!(
            "the session is run by node {owner}, and the bus to it (NATS) is not connected; try \
             again shortly"
        )));
    }
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| ApiError::PayloadTooLarge(limit))?;
    let body = String::from_utf8(body.to_vec())
        .map_err(|_| ApiError::BadRequest("the body is not UTF-8 text".into()))?;
    let envelope = Envelope {
        method: parts.method.to_string(),
        uri: parts.uri.to_string(),
        headers: header_pairs(&parts.headers),
        body,
    };
    let payload = serde_json::to_vec(&envelope)
        .map_err(|e| ApiError::Internal(format!("encoding a forwarded request: {e}")))?;
    fleet
        .counts
        .requests_forwarded
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let reply = match fleet
        .nats
        .request(fleet.control_subject(owner), Bytes::from(payload))
        .await
    {
        Ok(reply) => reply,
        Err(e) => return Err(unanswered(fleet, owner, e).await),
    };
    let answer: Answer = serde_json::from_slice(&reply.payload)
        .map_err(|e| ApiError::Internal(format!("node {owner} answered garbage: {e}")))?;
    let mut resp = Response::new(Body::from(answer.body));
    *resp.status_mut() = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_GATEWAY);
    for (k, v) in answer.headers {
        if let (Ok(k), Ok(v)) = (HeaderName::try_from(k), HeaderValue::try_from(v)) {
            resp.headers_mut().append(k, v);
        }
    }
    Ok(resp)
}

/// Answers the control requests other nodes forward to this one, through `router`, until NATS
/// is gone for good.
pub(crate) async fn answer(fleet: Arc<Fleet>, router: axum::Router) {
    let mut requests = match fleet
        .nats
        .subscribe(fleet.control_subject(&fleet.node_id))
        .await
    {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot take forwarded control requests: NATS refused");
            return;
        }
    };
    while let Some(msg) = requests.next().await {
        let (fleet, router) = (fleet.clone(), router.clone());
        tokio::spawn(async move {
            let Some(reply_to) = msg.reply else {
                return;
            };
            let answer = run_forwarded(&fleet, router, &msg.payload).await;
            fleet
                .counts
                .requests_served
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let payload = serde_json::to_vec(&answer).unwrap_or_default();
            if let Err(e) = fleet.nats.publish(reply_to, Bytes::from(payload)).await {
                tracing::warn!(error = %e, "could not answer a forwarded request");
            }
        });
    }
}

/// Runs one forwarded request through the router; its answer, or a 400 for a bad envelope.
async fn run_forwarded(fleet: &Fleet, router: axum::Router, payload: &[u8]) -> Answer {
    let bad = |why: String| Answer {
        status: 400,
        headers: vec![("content-type".into(), "application/json".into())],
        body: serde_json::json!({"error": {"code": "bad_request", "message": why}}).to_string(),
    };
    let envelope: Envelope = match serde_json::from_slice(payload) {
        Ok(e) => e,
        Err(e) => return bad(format!("a forwarded request that is not one: {e}")),
    };
    let mut builder = axum::http::Request::builder()
        .method(envelope.method.as_str())
        .uri(envelope.uri.as_str());
    for (k, v) in &envelope.headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    builder = builder.header(FORWARDED, &*fleet.node_id);
    let req = match builder.body(Body::from(envelope.body)) {
        Ok(r) => r,
        Err(e) => return bad(format!("a forwarded request that is not one: {e}")),
    };
    let resp = match tower::ServiceExt::oneshot(router, req).await {
        Ok(r) => r,
        Err(never) => match never {},
    };
    let (parts, body) = resp.into_parts();
    let body = match axum::body::to_bytes(body, MAX_ANSWER_BYTES).await {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) => return bad(format!("the answer could not be read: {e}")),
    };
    Answer {
        status: parts.status.as_u16(),
        headers: header_pairs(&parts.headers),
        body,
    }
}

/// Headers as text pairs for an envelope (a header that is not text does not travel).
fn header_pairs(headers: &axum::http::HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter_map(|(k, v)| Some((k.to_string(), v.to_str().ok()?.to_string())))
        .collect()
}

/// Why the owner did not answer, told truly. Nobody listening on its subject means it is gone or
/// only off the bus: its heartbeat in the store tells which. A node that stopped is being adopted
/// (409: the adopter will take the request); one that still renews its leases runs the session
/// and is only cut off from NATS, and nothing is adopted (503: try again).
async fn unanswered(fleet: &Fleet, owner: &str, e: async_nats::RequestError) -> ApiError {
    match e.kind() {
        async_nats::RequestErrorKind::NoResponders => {}
        async_nats::RequestErrorKind::TimedOut => {
            return ApiError::Unavailable(format!(
                "the session's node {owner} did not answer in time; try again shortly"
            ));
        }
        _ => {
            return ApiError::Unavailable(format!(
                "the bus to the session's node {owner} failed ({e}); try again shortly"
            ));
        }
    }
    let nodes = match fleet.store.nodes().await {
        Ok(nodes) => nodes,
        Err(e) => return ApiError::Storage(e),
    };
    let heartbeat_age = nodes
        .iter()
        .find(|n| n.id == owner)
        .map(|n| std::time::Duration::from_millis(n.heartbeat_age_ms));
    match heartbeat_age {
        Some(age) if age < 2 * fleet.heartbeat => ApiError::Unavailable(format!(
            "the session's node {owner} renewed its lease {} ms ago but does not answer on the \
             bus (NATS): it runs the session and is cut off from NATS (or has just stopped); \
             try again shortly",
            age.as_millis()
        )),
        _ => ApiError::Conflict(format!(
            "the session's node {owner} does not answer: it is gone, and another node is \
             adopting the session; try again in a few seconds"
        )),
    }
}
