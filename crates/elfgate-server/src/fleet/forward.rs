//! Control requests for a session another node runs, forwarded to that node over NATS
//! request/reply and answered by it as if the client had reached it directly: the owner runs the
//! request through its own router and sends back the status, headers and body.
//!
//! Forwarded: the session's POST and DELETE requests (a prompt, an interrupt, a permission
//! answer, a tool run, a delete) and the session's own GET (whether it runs, its queue) when this
//! node is not running the session and the store names another live owner. Not forwarded: other
//! reads (every node reads the same database), streams, and a request already forwarded once
//! (the owner answers it itself, whatever it finds).
//!
//! No credential goes on the bus: this node checks the client's token, and the request travels
//! with the principal it found (`auth::Principal`) instead of its `Authorization` (or any other
//! credential) header; the owner acts for that principal. Every message is signed with the
//! fleet's secret (`signing`), the answer is taken from the owner only, and a request carries a
//! deadline (this node's wait) and an id: the owner drops one past its deadline, so that a
//! request this node already answered 503 is never carried out later, and one it has seen.

use super::Fleet;
use super::envelope::{self, Assembled, Assembler};
use super::signed::{AskError, Dropped};
use super::signing::{MAX_AGE, now_ms};
use crate::auth::{Forwarded, Principal};
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
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a forwarded control request waits for the owner's answer; also the request's
/// deadline, past which the owner drops it unheard.
pub(crate) const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);
/// The most bytes of an answer sent back (the API's answers are small JSON documents).
const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;
/// Headers that carry a client's credentials: never on the bus.
const CREDENTIALS: [&str; 5] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "x-api-key",
    "x-goog-api-key",
];

/// A request as it travels to the owner, before its body.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RequestHead {
    method: String,
    uri: String,
    headers: Vec<(String, String)>,
    /// For whom the forwarding node acts (it checked the client's credentials).
    principal: Principal,
    /// Unique per request: the owner carries out each id once.
    request_id: String,
    /// Milliseconds since the Unix epoch after which the forwarding node no longer waits: the
    /// owner drops the request unheard.
    deadline_ms: u64,
}

/// The owner's answer as it travels back, before its body.
#[derive(Serialize, Deserialize)]
struct AnswerHead {
    status: u16,
    headers: Vec<(String, String)>,
}

/// The ids of requests carried out whose deadline has not passed (a request seen again before
/// then is a replay: dropped). Past its deadline a request is dropped anyway, so an id is kept
/// only that long.
#[derive(Default)]
pub(crate) struct SeenRequests {
    ids: Mutex<HashMap<String, u64>>,
}

/// Ids remembered at most; past it (more requests within one deadline than any fleet sends) a
/// request is refused rather than taken unchecked.
const MAX_SEEN: usize = 200_000;

impl SeenRequests {
    /// Whether `id` (deadline `deadline_ms`) is new; remembers it.
    fn first_time(&self, id: &str, deadline_ms: u64) -> bool {
        let Ok(mut ids) = self.ids.lock() else {
            return false;
        };
        if ids.len() >= 1024 {
            let now = now_ms();
            ids.retain(|_, deadline| *deadline >= now);
        }
        if ids.len() >= MAX_SEEN || ids.contains_key(id) {
            return false;
        }
        ids.insert(id.to_string(), deadline_ms);
        true
    }
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
    if req.extensions().get::<Forwarded>().is_some()
        || wants_stream(&req)
        || state.dispatcher.active().contains(session)
    {
        return next.run(req).await;
    }
    // The auth layer found who the client is; without that there is nobody to act for.
    let Some(principal) = req.extensions().get::<Principal>().cloned() else {
        return next.run(req).await;
    };
    let owner = match fleet.store.session_owner(session).await {
        Ok(Some(owner)) if *owner != *fleet.node_id => owner,
        Ok(_) => return next.run(req).await,
        Err(e) => return ApiError::Storage(e).into_response(),
    };
    let limit = req
        .extensions()
        .get::<crate::extract::BodyLimit>()
        .map_or(MAX_ANSWER_BYTES, |l| l.0);
    match forward(&fleet, &owner, principal, req, limit).await {
        Ok(resp) => resp,
        Err(e) => e.into_response(),
    }
}

async fn forward(
    fleet: &Fleet,
    owner: &str,
    principal: Principal,
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
    let head = RequestHead {
        method: parts.method.to_string(),
        uri: parts.uri.to_string(),
        headers: header_pairs(&parts.headers, true),
        principal,
        request_id: uuid::Uuid::now_v7().to_string(),
        deadline_ms: now_ms() + millis(FORWARD_TIMEOUT),
    };
    let packed = envelope::pack(&head, &body)
        .map_err(|e| ApiError::Internal(format!("encoding a forwarded request: {e}")))?;
    let messages = envelope::into_messages(packed, fleet.nats.server_info().max_payload);
    fleet
        .counts
        .requests_forwarded
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let unavailable = |why: String| {
        ApiError::Unavailable(format!(
            "the bus to the session's node {owner} failed ({why}); try again shortly"
        ))
    };
    let mut answers = match fleet
        .ask_in_parts(fleet.control_subject(owner), messages)
        .await
    {
        Ok(answers) => answers,
        Err(AskError::NoResponders) => return Err(nobody_answers(fleet, owner).await),
        Err(AskError::Bus(why)) => return Err(unavailable(why)),
    };
    let timed_out = || {
        ApiError::Unavailable(format!(
            "the session's node {owner} did not answer in time; try again shortly"
        ))
    };
    let mut assembler = Assembler::new(MAX_ANSWER_BYTES, FORWARD_TIMEOUT);
    // Err(None): nobody listens on the owner's subject.
    let answer = tokio::time::timeout(FORWARD_TIMEOUT, async {
        loop {
            let msg = match fleet.answer_from(&mut answers, owner).await {
                Some(Ok(msg)) => msg,
                Some(Err(AskError::NoResponders)) => return Err(None),
                Some(Err(AskError::Bus(why))) => return Err(Some(unavailable(why))),
                None => return Err(Some(unavailable("the subscription ended".into()))),
            };
            if let Assembled::Whole(packed) = assembler.take(&msg.payload) {
                return Ok(packed);
            }
        }
    })
    .await
    .map_err(|_| timed_out())?;
    let answer = match answer {
        Ok(packed) => packed,
        Err(Some(e)) => return Err(e),
        Err(None) => return Err(nobody_answers(fleet, owner).await),
    };
    let (head, body): (AnswerHead, Bytes) = envelope::unpack(&answer)
        .ok_or_else(|| ApiError::Internal(format!("node {owner} answered garbage")))?;
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = StatusCode::from_u16(head.status).unwrap_or(StatusCode::BAD_GATEWAY);
    for (k, v) in head.headers {
        if let (Ok(k), Ok(v)) = (HeaderName::try_from(k), HeaderValue::try_from(v)) {
            resp.headers_mut().append(k, v);
        }
    }
    Ok(resp)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Answers the control requests other nodes forward to this one, through `router`, until NATS
/// is gone for good. Only what verifies is taken (`signed`); parts of a large request are put
/// back together here, in the order they came, before the request is handled in a task of its
/// own.
pub(crate) async fn answer(fleet: Arc<Fleet>, router: axum::Router, body_limit: usize) {
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
    // The head's bytes on top of the body's bound.
    let mut assembler = Assembler::new(body_limit.saturating_add(64 * 1024), FORWARD_TIMEOUT);
    while let Some(msg) = requests.next().await {
        let Some(sender) = fleet.verified(&msg) else {
            continue;
        };
        let Assembled::Whole(packed) = assembler.take(&msg.payload) else {
            continue;
        };
        let Some(reply_to) = msg.reply else {
            continue;
        };
        let Some((head, body)) = envelope::unpack::<RequestHead>(&packed) else {
            fleet.dropped(Dropped::Unsigned, &msg.subject, Some(&sender.node));
            continue;
        };
        // Past its deadline the forwarding node answered 503 already, and the client may have
        // sent it again: carrying it out now would do it twice. A request seen before is a
        // replay of a captured message.
        let deadline = head.deadline_ms.min(sender.sent_ms + millis(MAX_AGE));
        if now_ms() > deadline || !fleet.seen_requests.first_time(&head.request_id, deadline) {
            fleet.dropped(Dropped::Replayed, &msg.subject, Some(&sender.node));
            continue;
        }
        let (fleet, router) = (fleet.clone(), router.clone());
        tokio::spawn(async move {
            let (head, body) = run_forwarded(router, head, body, sender.node).await;
            fleet
                .counts
                .requests_served
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let packed = match envelope::pack(&head, &body) {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(error = %e, "could not encode an answer");
                    return;
                }
            };
            for part in envelope::into_messages(packed, fleet.nats.server_info().max_payload) {
                if let Err(e) = fleet.answer_signed(reply_to.clone(), part).await {
                    tracing::warn!(error = %e, "could not answer a forwarded request");
                    return;
                }
            }
        });
    }
}

/// Runs one forwarded request through the router; its answer, or a 400 for a bad head.
async fn run_forwarded(
    router: axum::Router,
    head: RequestHead,
    body: Bytes,
    by: String,
) -> (AnswerHead, Bytes) {
    let bad = |why: String| {
        (
            AnswerHead {
                status: 400,
                headers: vec![("content-type".into(), "application/json".into())],
            },
            Bytes::from(
                serde_json::json!({"error": {"code": "bad_request", "message": why}}).to_string(),
            ),
        )
    };
    let mut builder = axum::http::Request::builder()
        .method(head.method.as_str())
        .uri(head.uri.as_str());
    for (k, v) in &head.headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    let mut req = match builder.body(Body::from(body)) {
        Ok(r) => r,
        Err(e) => return bad(format!("a forwarded request that is not one: {e}")),
    };
    tracing::debug!(from = %by, method = %head.method, uri = %head.uri, "a forwarded request");
    req.extensions_mut().insert(Forwarded);
    req.extensions_mut().insert(head.principal);
    let resp = match tower::ServiceExt::oneshot(router, req).await {
        Ok(r) => r,
        Err(never) => match never {},
    };
    let (parts, body) = resp.into_parts();
    let body = match axum::body::to_bytes(body, MAX_ANSWER_BYTES).await {
        Ok(b) => b,
        Err(e) => return bad(format!("the answer could not be read: {e}")),
    };
    (
        AnswerHead {
            status: parts.status.as_u16(),
            headers: header_pairs(&parts.headers, false),
        },
        body,
    )
}

/// Headers as text pairs for an envelope (a header that is not text does not travel), without
/// the client's credentials when `strip_credentials`.
fn header_pairs(headers: &axum::http::HeaderMap, strip_credentials: bool) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(k, _)| !(strip_credentials && CREDENTIALS.contains(&k.as_str())))
        .filter_map(|(k, v)| Some((k.to_string(), v.to_str().ok()?.to_string())))
        .collect()
}

/// Why the owner did not answer, told truly. Nobody listening on its subject means it is gone or
/// only off the bus: its heartbeat in the store tells which. A node that stopped is being adopted
/// (409: the adopter will take the request); one that still renews its leases runs the session
/// and is only cut off from NATS, and nothing is adopted (503: try again).
async fn nobody_answers(fleet: &Fleet, owner: &str) -> ApiError {
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
