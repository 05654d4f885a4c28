//! /v1/sessions: create, resume, follow, interrupt, read, delete.

use crate::error::{ApiError, ApiJson};
use crate::service::{
    self, CreateSessionRequest, CreateSessionResponse, InterruptResponse, SendMessageRequest,
    SendMessageResponse, SessionView, parse_session_id,
};
use crate::sse;
use crate::state::AppState;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Json, Router};
use elfgate_core::{Message, Run, RunId, SessionId};
use serde::{Deserialize, Serialize};

/// The session routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/sessions", post(create).get(list))
        .route("/v1/sessions/{id}", get(one).delete(remove))
        .route("/v1/sessions/{id}/messages", post(send).get(messages))
        .route("/v1/sessions/{id}/events", get(events))
        .route("/v1/sessions/{id}/interrupt", post(interrupt))
        .route("/v1/sessions/{id}/runs/{run_id}", get(run))
        .route(
            "/v1/sessions/{id}/permissions/{request_id}",
            post(permission),
        )
}

async fn create(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<CreateSessionRequest>,
) -> Result<(StatusCode, Json<CreateSessionResponse>), ApiError> {
    let created = service::create_session(&state, req).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

async fn send(
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<SendMessageRequest>,
) -> Result<(StatusCode, Json<SendMessageResponse>), ApiError> {
    let id = parse_session_id(&id)?;
    let sent = service::send_message(&state, id, req).await?;
    Ok((StatusCode::ACCEPTED, Json(sent)))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct EventsQuery {
    after_seq: Option<u64>,
}

async fn events(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    query: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let id = parse_session_id(&id)?;
    let Query(query) = query.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    // Last-Event-ID (a reconnecting EventSource) wins over ?afterSeq.
    let after = match headers.get("last-event-id") {
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .ok_or_else(|| ApiError::BadRequest("Last-Event-ID must be a seq number".into()))?,
        None => query.after_seq.unwrap_or(0),
    };
    sse::session_events(state, id, after).await
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct InterruptRequest {
    #[serde(default)]
    wait: bool,
}

async fn interrupt(
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<InterruptRequest>,
) -> Result<Json<InterruptResponse>, ApiError> {
    let id = parse_session_id(&id)?;
    Ok(Json(service::interrupt(&state, id, req.wait).await?))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListQuery {
    limit: Option<u32>,
    cursor: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct SessionList {
    sessions: Vec<SessionView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<SessionId>,
}

async fn list(
    State(state): State<AppState>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<SessionList>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let cursor = q
        .cursor
        .map(|c| {
            c.parse::<SessionId>()
                .map_err(|_| ApiError::BadRequest(format!("invalid cursor '{c}'")))
        })
        .transpose()?;
    let page = state
        .store
        .list_sessions(q.limit.unwrap_or(50), cursor)
        .await?;
    Ok(Json(SessionList {
        sessions: page
            .sessions
            .into_iter()
            .map(|s| service::view(&state, s))
            .collect(),
        next_cursor: page.next_cursor,
    }))
}

async fn one(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<SessionView>, ApiError> {
    let id = parse_session_id(&id)?;
    Ok(Json(service::session_view(&state, id).await?))
}

async fn remove(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = parse_session_id(&id)?;
    service::delete_session(&state, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MessagesQuery {
    limit: Option<u32>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct MessageList {
    messages: Vec<Message>,
}

async fn messages(
    State(state): State<AppState>,
    Path(id): Path<String>,
    query: Result<Query<MessagesQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<MessageList>, ApiError> {
    let id = parse_session_id(&id)?;
    let Query(q) = query.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    if state.store.get_session(id).await?.is_none() {
        return Err(ApiError::NotFound(format!("unknown session '{id}'")));
    }
    let messages = state
        .store
        .list_messages(id, q.limit.unwrap_or(1000).clamp(1, 10_000))
        .await?;
    Ok(Json(MessageList { messages }))
}

async fn run(
    State(state): State<AppState>,
    Path((id, run_id)): Path<(String, String)>,
) -> Result<Json<Run>, ApiError> {
    let id = parse_session_id(&id)?;
    let run_id: RunId = run_id
        .parse()
        .map_err(|_| ApiError::NotFound(format!("unknown run '{run_id}'")))?;
    state
        .store
        .get_run(id, run_id)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::NotFound(format!("unknown run '{run_id}' in session '{id}'")))
}

/// Body of POST /v1/sessions/{id}/permissions/{requestId}.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PermissionBody {
    decision: String,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

async fn permission(
    State(state): State<AppState>,
    Path((id, request_id)): Path<(String, String)>,
    ApiJson(body): ApiJson<PermissionBody>,
) -> Result<Json<serde_json::Value>, ApiError> {
    use elfgate_tools::{Decision, PermissionAnswer, ResolveError, Scope};
    let id = parse_session_id(&id)?;
    if state.store.get_session(id).await?.is_none() {
        return Err(ApiError::NotFound(format!("unknown session '{id}'")));
    }
    let decision = match body.decision.as_str() {
        "allow" => Decision::Allow,
        "deny" => Decision::Deny,
        other => {
            return Err(ApiError::BadRequest(format!(
                "decision '{other}' is not one of allow, deny"
            )));
        }
    };
    let scope = match body.scope.as_deref() {
        None | Some("once") => Scope::Once,
        Some("session") => Scope::Session,
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "scope '{other}' is not one of once, session"
            )));
        }
    };
    state
        .permissions
        .resolve(
            id,
            &request_id,
            PermissionAnswer {
                decision,
                scope,
                message: body.message,
            },
        )
        .map_err(|e| match e {
            ResolveError::NotFound(_) => ApiError::NotFound(e.to_string()),
            ResolveError::AlreadyDecided(_) => ApiError::Conflict(e.to_string()),
        })?;
    Ok(Json(serde_json::json!({
        "requestId": request_id,
        "decision": decision.as_str(),
        "scope": match scope { Scope::Once => "once", Scope::Session => "session" },
    })))
}
