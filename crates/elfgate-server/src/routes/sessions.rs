//! /v1/sessions: create, resume, follow, interrupt, read, delete.

use crate::error::{ApiError, ErrorBody};
use crate::event_schema::EventEnvelope;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::service::{self, Actor, Origin, PromptSpec, SessionSpec, parse_session_id};
use crate::sse;
use crate::state::AppState;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use elfgate_api::{
    AuditList, CreateSessionRequest, CreateSessionResponse, InterruptRequest, InterruptResponse,
    MessageList, PermissionAnswered, PermissionBody, SendMessageRequest, SendMessageResponse,
    SessionList, SessionView,
};
use elfgate_core::{Run, RunId, SessionId};
use serde::Deserialize;
use utoipa::IntoParams;

/// Runs a state-changing operation to its end even if the client goes away mid-request: once a
/// write is queued, the matching dispatch (or clean-up) must happen too.
pub(crate) async fn detached<T: Send + 'static>(
    op: impl std::future::Future<Output = Result<T, ApiError>> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::spawn(op)
        .await
        .map_err(|e| ApiError::Internal(format!("request task failed: {e}")))?
}

/// The session routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/sessions", post(create).get(list))
        .route("/v1/sessions/{id}", get(one).delete(remove))
        .route("/v1/sessions/{id}/messages", post(send).get(messages))
        .route("/v1/sessions/{id}/audit", get(audit))
        .route("/v1/sessions/{id}/events", get(events))
        .route("/v1/sessions/{id}/interrupt", post(interrupt))
        .route("/v1/sessions/{id}/runs/{runId}", get(run))
        .route(
            "/v1/sessions/{id}/permissions/{requestId}",
            post(permission),
        )
}

/// Creates a session and starts its first run.
///
/// With `Accept: text/event-stream` the answer is the session's event stream itself, from its
/// first event to the first run's `complete` (one request instead of POST then GET); the ids are
/// in the `X-Session-Id` and `X-Run-Id` headers and in every event.
#[utoipa::path(
    post,
    path = "/v1/sessions",
    operation_id = "createSession",
    tag = "sessions",
    request_body = CreateSessionRequest,
    responses(
        (status = 201, description = "Session created, first run started; with Accept: text/event-stream, its events until the run's complete", content((CreateSessionResponse = "application/json"), (EventEnvelope = "text/event-stream"))),
        (status = 200, description = "clientMsgId matched an earlier creation: that session, nothing new (duplicate: true)", body = CreateSessionResponse),
        (status = 400, description = "Malformed body, empty prompt or bad setting", body = ErrorBody),
        (status = 401, description = "Missing or invalid credentials (no token, a wrong one, a bad, expired or revoked key)", body = ErrorBody),
        (status = 403, description = "Not allowed to the key (a viewer's change, a key's scope, an admin-only route)", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 422, description = "A field the body does not have, an unknown engine or provider, engineConfig outside its bounds, or a projectPath that cannot be used", body = ErrorBody),
        (status = 429, description = "Over a [[rate_limits]] rule of the key, user or team: its requests per minute or concurrent runs (rate_limited), with Retry-After and x-ratelimit-* headers; nothing is stored", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
        (status = 503, description = "Shutting down", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
async fn create(
    State(state): State<AppState>,
    actor: Actor,
    headers: HeaderMap,
    ApiJson(req): ApiJson<CreateSessionRequest>,
) -> Result<Response, ApiError> {
    let wants_stream = headers
        .get(axum::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    let spec = SessionSpec::try_from(req)?;
    let for_service = state.clone();
    let created =
        detached(
            async move { service::create_session(&for_service, &actor, spec, Origin::Api).await },
        )
        .await?;
    let status = if created.duplicate {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    if !wants_stream {
        return Ok((status, Json(created)).into_response());
    }
    let mut resp = sse::session_events(state, created.session_id, 0, true).await?;
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    for (name, value) in [
        ("x-session-id", created.session_id.to_string()),
        ("x-run-id", created.run_id.to_string()),
        ("location", format!("/v1/sessions/{}", created.session_id)),
    ] {
        if let Ok(v) = axum::http::HeaderValue::from_str(&value) {
            h.insert(name, v);
        }
    }
    Ok(resp)
}

/// Sends a prompt to an existing session (resume).
#[utoipa::path(
    post,
    path = "/v1/sessions/{id}/messages",
    operation_id = "sendMessage",
    tag = "sessions",
    params(("id" = SessionId, Path, description = "Session id")),
    request_body = SendMessageRequest,
    responses(
        (status = 202, description = "Run started or queued", body = SendMessageResponse),
        (status = 200, description = "clientMsgId matched an earlier prompt: its run, nothing new (duplicate: true)", body = SendMessageResponse),
        (status = 400, description = "Malformed body, empty prompt or bad setting", body = ErrorBody),
        (status = 401, description = "Missing or invalid credentials (no token, a wrong one, a bad, expired or revoked key)", body = ErrorBody),
        (status = 403, description = "Not allowed to the key (a viewer's change, a key's scope, an admin-only route)", body = ErrorBody),
        (status = 404, description = "Unknown session or parent message", body = ErrorBody),
        (status = 409, description = "Busy and onBusy is reject; carries activeRunId", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 422, description = "A field the body does not have, an unknown engine or provider, engineConfig outside its bounds, or a projectPath that cannot be used", body = ErrorBody),
        (status = 429, description = "onBusy is enqueue and the session's queue is full (too_many_queued), or over a [[rate_limits]] rule of the key, user or team (rate_limited, with Retry-After and x-ratelimit-* headers); nothing is stored", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
        (status = 503, description = "Shutting down", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
async fn send(
    State(state): State<AppState>,
    actor: Actor,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<SendMessageRequest>,
) -> Result<(StatusCode, Json<SendMessageResponse>), ApiError> {
    let id = parse_session_id(&id)?;
    let spec = PromptSpec::try_from(req)?;
    let sent =
        detached(async move { service::send_message(&state, &actor, id, spec, Origin::Api).await })
            .await?;
    let status = if sent.duplicate {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    Ok((status, Json(sent)))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
struct EventsQuery {
    /// Replay events after this seq (ignored when Last-Event-ID is sent).
    after_seq: Option<u64>,
    /// `complete`: end the stream after the first `complete` event it sends (one run followed to
    /// its end, e.g. by a script); without it the stream stays open across runs.
    until: Option<String>,
}

/// Follows a session as a Server-Sent Events stream; replays after `Last-Event-ID` or `afterSeq`.
///
/// Each SSE message has `id` = seq, `event` = the event type and `data` = the event envelope.
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}/events",
    operation_id = "sessionEvents",
    tag = "sessions",
    params(
        ("id" = SessionId, Path, description = "Session id"),
        ("Last-Event-ID" = Option<u64>, Header, description = "Replay events after this seq (wins over afterSeq)"),
        EventsQuery,
    ),
    responses(
        (status = 200, description = "Event stream; each `data` is an event envelope", content_type = "text/event-stream", body = EventEnvelope),
        (status = 400, description = "Bad Last-Event-ID or query", body = ErrorBody),
        (status = 401, description = "Missing or invalid credentials (no token, a wrong one, a bad, expired or revoked key)", body = ErrorBody),
        (status = 403, description = "Not allowed to the key (a viewer's change, a key's scope, an admin-only route)", body = ErrorBody),
        (status = 404, description = "Unknown session", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
async fn events(
    State(state): State<AppState>,
    actor: Actor,
    ApiPath(id): ApiPath<String>,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<EventsQuery>,
) -> Result<Response, ApiError> {
    let id = parse_session_id(&id)?;
    // Last-Event-ID (a reconnecting EventSource) wins over ?afterSeq.
    let after = match headers.get("last-event-id") {
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .ok_or_else(|| ApiError::BadRequest("Last-Event-ID must be a seq number".into()))?,
        None => query.after_seq.unwrap_or(0),
    };
    let until_complete = match query.until.as_deref() {
        None => false,
        Some("complete") => true,
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "until must be 'complete', not '{other}'"
            )));
        }
    };
    service::authorize_session(&state, &actor, id, elfgate_core::Access::Read).await?;
    sse::session_events(state, id, after, until_complete).await
}

/// Interrupts the session's run, if any; idempotent.
#[utoipa::path(
    post,
    path = "/v1/sessions/{id}/interrupt",
    operation_id = "interruptSession",
    tag = "sessions",
    params(("id" = SessionId, Path, description = "Session id")),
    request_body(content = InterruptRequest, description = "Optional (not required; an empty body means wait=false); `null` is 400"),
    responses(
        (status = 200, description = "Interrupted, or nothing was running", body = InterruptResponse),
        (status = 400, description = "Malformed body", body = ErrorBody),
        (status = 401, description = "Missing or invalid credentials (no token, a wrong one, a bad, expired or revoked key)", body = ErrorBody),
        (status = 403, description = "Not allowed to the key (a viewer's change, a key's scope, an admin-only route)", body = ErrorBody),
        (status = 404, description = "Unknown session", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 422, description = "A field the body does not have", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
async fn interrupt(
    State(state): State<AppState>,
    actor: Actor,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<InterruptRequest>,
) -> Result<Json<InterruptResponse>, ApiError> {
    let id = parse_session_id(&id)?;
    Ok(Json(
        service::interrupt(&state, &actor, id, req.wait).await?,
    ))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// Page size (default 50).
    limit: Option<u32>,
    /// The nextCursor of the previous page.
    cursor: Option<String>,
}

/// Lists sessions, with cursor paging.
#[utoipa::path(
    get,
    path = "/v1/sessions",
    operation_id = "listSessions",
    tag = "sessions",
    params(ListQuery),
    responses(
        (status = 200, description = "A page of sessions", body = SessionList),
        (status = 400, description = "Bad query or cursor", body = ErrorBody),
        (status = 401, description = "Missing or invalid credentials (no token, a wrong one, a bad, expired or revoked key)", body = ErrorBody),
        (status = 403, description = "Not allowed to the key (a viewer's change, a key's scope, an admin-only route)", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
async fn list(
    State(state): State<AppState>,
    actor: Actor,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<SessionList>, ApiError> {
    let cursor = q
        .cursor
        .map(|c| {
            c.parse::<SessionId>()
                .map_err(|_| ApiError::BadRequest(format!("invalid cursor '{c}'")))
        })
        .transpose()?;
    let limit = q.limit.unwrap_or(50);
    Ok(Json(
        service::list_sessions(&state, &actor, limit, cursor).await?,
    ))
}

/// One session with its live status.
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}",
    operation_id = "getSession",
    tag = "sessions",
    params(("id" = SessionId, Path, description = "Session id")),
    responses(
        (status = 200, description = "The session", body = SessionView),
        (status = 401, description = "Missing or invalid credentials (no token, a wrong one, a bad, expired or revoked key)", body = ErrorBody),
        (status = 403, description = "Not allowed to the key (a viewer's change, a key's scope, an admin-only route)", body = ErrorBody),
        (status = 404, description = "Unknown session", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
async fn one(
    State(state): State<AppState>,
    actor: Actor,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<SessionView>, ApiError> {
    let id = parse_session_id(&id)?;
    Ok(Json(service::session_view(&state, &actor, id).await?))
}

/// Deletes a session, interrupting its run first.
#[utoipa::path(
    delete,
    path = "/v1/sessions/{id}",
    operation_id = "deleteSession",
    tag = "sessions",
    params(("id" = SessionId, Path, description = "Session id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, description = "Missing or invalid credentials (no token, a wrong one, a bad, expired or revoked key)", body = ErrorBody),
        (status = 403, description = "Not allowed to the key (a viewer's change, a key's scope, an admin-only route)", body = ErrorBody),
        (status = 404, description = "Unknown session", body = ErrorBody),
        (status = 409, description = "Already being deleted, or its run did not stop within 30 s (nothing deleted)", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
async fn remove(
    State(state): State<AppState>,
    actor: Actor,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    let id = parse_session_id(&id)?;
    detached(async move { service::delete_session(&state, &actor, id).await }).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
struct MessagesQuery {
    /// At most this many messages (default 1000, 1..=10000).
    limit: Option<u32>,
}

/// A session's persisted history.
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}/messages",
    operation_id = "listMessages",
    tag = "sessions",
    params(("id" = SessionId, Path, description = "Session id"), MessagesQuery),
    responses(
        (status = 200, description = "The messages", body = MessageList),
        (status = 400, description = "Bad query", body = ErrorBody),
        (status = 401, description = "Missing or invalid credentials (no token, a wrong one, a bad, expired or revoked key)", body = ErrorBody),
        (status = 403, description = "Not allowed to the key (a viewer's change, a key's scope, an admin-only route)", body = ErrorBody),
        (status = 404, description = "Unknown session", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
async fn messages(
    State(state): State<AppState>,
    actor: Actor,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<MessagesQuery>,
) -> Result<Json<MessageList>, ApiError> {
    let id = parse_session_id(&id)?;
    let limit = q.limit.unwrap_or(1000).clamp(1, 10_000);
    let messages = service::list_messages(&state, &actor, id, limit).await?;
    Ok(Json(MessageList { messages }))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
struct AuditQuery {
    /// At most this many records, the latest (default 100, 1..=1000).
    limit: Option<u32>,
}

/// The tool calls a gate of the pipeline blocked in a session (hook, firewall, guardian,
/// permission...), with the gate and the reason, oldest first.
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}/audit",
    operation_id = "listAudit",
    tag = "sessions",
    params(("id" = SessionId, Path, description = "Session id"), AuditQuery),
    responses(
        (status = 200, description = "The blocked calls", body = AuditList),
        (status = 400, description = "Bad query", body = ErrorBody),
        (status = 401, description = "Missing or invalid credentials (no token, a wrong one, a bad, expired or revoked key)", body = ErrorBody),
        (status = 403, description = "Not allowed to the key (a viewer's change, a key's scope, an admin-only route)", body = ErrorBody),
        (status = 404, description = "Unknown session", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
async fn audit(
    State(state): State<AppState>,
    actor: Actor,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> Result<Json<AuditList>, ApiError> {
    let id = parse_session_id(&id)?;
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    let audit = service::list_audit(&state, &actor, id, limit).await?;
    Ok(Json(AuditList { audit }))
}

/// One run with its figures.
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}/runs/{runId}",
    operation_id = "getRun",
    tag = "sessions",
    params(
        ("id" = SessionId, Path, description = "Session id"),
        ("runId" = RunId, Path, description = "Run id"),
    ),
    responses(
        (status = 200, description = "The run", body = Run),
        (status = 401, description = "Missing or invalid credentials (no token, a wrong one, a bad, expired or revoked key)", body = ErrorBody),
        (status = 403, description = "Not allowed to the key (a viewer's change, a key's scope, an admin-only route)", body = ErrorBody),
        (status = 404, description = "Unknown session or run", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
async fn run(
    State(state): State<AppState>,
    actor: Actor,
    ApiPath((id, run_id)): ApiPath<(String, String)>,
) -> Result<Json<Run>, ApiError> {
    let id = parse_session_id(&id)?;
    let run_id: RunId = run_id
        .parse()
        .map_err(|_| ApiError::NotFound(format!("unknown run '{run_id}'")))?;
    Ok(Json(service::get_run(&state, &actor, id, run_id).await?))
}

/// Answers a permission request sent on the event stream.
#[utoipa::path(
    post,
    path = "/v1/sessions/{id}/permissions/{requestId}",
    operation_id = "answerPermission",
    tag = "sessions",
    params(
        ("id" = SessionId, Path, description = "Session id"),
        ("requestId" = String, Path, description = "The requestId of the permissionRequest event"),
    ),
    request_body = PermissionBody,
    responses(
        (status = 200, description = "The answer was delivered", body = PermissionAnswered),
        (status = 400, description = "Malformed body, or decision/scope not allowed", body = ErrorBody),
        (status = 401, description = "Missing or invalid credentials (no token, a wrong one, a bad, expired or revoked key)", body = ErrorBody),
        (status = 403, description = "Not allowed to the key (a viewer's change, a key's scope, an admin-only route)", body = ErrorBody),
        (status = 404, description = "Unknown session or request", body = ErrorBody),
        (status = 409, description = "Already decided", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 422, description = "A field the body does not have", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
async fn permission(
    State(state): State<AppState>,
    actor: Actor,
    ApiPath((id, request_id)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<PermissionBody>,
) -> Result<Json<PermissionAnswered>, ApiError> {
    let id = parse_session_id(&id)?;
    service::answer_permission(&state, &actor, id, request_id, body)
        .await
        .map(Json)
}
