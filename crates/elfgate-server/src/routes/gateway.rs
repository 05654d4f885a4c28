//! The gateway's front doors: POST /v1/chat/completions and POST /v1/responses (OpenAI), POST
//! /v1/messages (Anthropic), POST /v1beta/models/{model}:generateContent and its kin (Gemini),
//! GET /v1/models and GET /v1beta/models. Thin: each route names its door; parsing, routing,
//! running and answering are in crate::gateway (`door::serve`, the same for every door).

use crate::auth::Principal;
use crate::error::ApiError;
use crate::gateway::door::serve;
use crate::gateway::error::Door;
use crate::gateway::{doors, route};
use crate::service::{Actor, scopes};
use crate::state::AppState;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use elfgate_core::{EngineType, RunGrant};
use serde_json::json;

/// The gateway routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/messages", post(messages))
        .route("/v1/responses", post(responses))
        .route("/v1beta/models", get(gemini_models))
        .route("/v1beta/models/{*call}", post(gemini_call))
        // The google-genai SDK calls `v1` when given a base URL of its own.
        .route("/v1/models/{*call}", post(gemini_call))
        .route("/v1/models", get(models))
}

/// Who a door's call acts for: the principal auth found for its key (the session it starts is
/// that principal's, within the key's scopes), else, for a CLI's run token, the daemon (the run
/// behind the token was checked when it started, and the token reaches its own route only).
/// Neither is refused, never acted on for nobody.
fn door_actor(
    principal: Option<Extension<Principal>>,
    grant: Option<&RunGrant>,
) -> Result<Actor, ApiError> {
    match (principal, grant) {
        (Some(Extension(p)), _) => Ok(Actor::Principal(std::sync::Arc::new(p))),
        (None, Some(_)) => Ok(Actor::Daemon),
        (None, None) => Err(ApiError::Unauthorized),
    }
}

/// OpenAI-compatible chat completions (stream or not), run as a session.
///
/// The body is OpenAI's; `model` is `PROVIDER/MODEL`, an alias or `elfgate:ENGINE[:PROVIDER/MODEL]`
/// (see docs/gateway.md). Errors use OpenAI's shape `{"error":{"message","type","param","code"}}`.
#[utoipa::path(
    post,
    path = "/v1/chat/completions",
    operation_id = "chatCompletions",
    tag = "gateway",
    request_body(content = serde_json::Value, description = "An OpenAI chat completions request"),
    params(
        ("x-elfgate-session-id" = Option<String>, Header, description = "Continue this session"),
        ("x-elfgate-project-path" = Option<String>, Header, description = "A new session's project directory"),
        ("x-elfgate-permission-mode" = Option<String>, Header, description = "default, acceptEdits, bypassPermissions or plan: the permission mode of the call's run (elfgate:tinyelf, elfgate:cli)"),
    ),
    responses(
        (status = 200, description = "A chat.completion object, or chat.completion.chunk SSE frames ending with [DONE]; the session id is in x-elfgate-session-id", body = serde_json::Value),
        (status = 400, description = "Bad request (OpenAI's error shape)", body = serde_json::Value),
        (status = 401, description = "Missing or wrong bearer token (x-api-key too on /v1/messages)", body = serde_json::Value),
        (status = 403, description = "Past one of the key's scopes (permission_error, the message naming the scope)", body = serde_json::Value),
        (status = 404, description = "Unknown model (model_not_found), or a session the key may not see", body = serde_json::Value),
        (status = 429, description = "The provider's limits and queue are full", body = serde_json::Value),
        (status = 413, description = "Body larger than the configured limit", body = serde_json::Value),
        (status = 415, description = "Body not declared as application/json", body = serde_json::Value),
        (status = 502, description = "The provider failed before its first token", body = serde_json::Value),
        (status = 503, description = "The daemon is shutting down, or its store is busy", body = serde_json::Value),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn chat_completions(
    State(state): State<AppState>,
    principal: Option<Extension<Principal>>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    // No run token opens this door (see auth): no grant to check.
    let actor = door_actor(principal, None);
    serve(
        doors::ChatCompletions::default(),
        state,
        actor,
        None,
        headers,
        bytes,
    )
    .await
}

/// Anthropic-compatible Messages (stream or not), run as a session.
///
/// The body is Anthropic's; `model` routes as for chat completions. Errors use Anthropic's shape
/// `{"type":"error","error":{"type","message"}}`. The token may come as `x-api-key`.
#[utoipa::path(
    post,
    path = "/v1/messages",
    operation_id = "messages",
    tag = "gateway",
    request_body(content = serde_json::Value, description = "An Anthropic Messages request"),
    params(
        ("x-elfgate-session-id" = Option<String>, Header, description = "Continue this session"),
        ("x-elfgate-project-path" = Option<String>, Header, description = "A new session's project directory"),
        ("x-elfgate-permission-mode" = Option<String>, Header, description = "default, acceptEdits, bypassPermissions or plan: the permission mode of the call's run (elfgate:tinyelf, elfgate:cli)"),
    ),
    responses(
        (status = 200, description = "A message object, or message_start … message_stop SSE events; the session id is in x-elfgate-session-id", body = serde_json::Value),
        (status = 400, description = "Bad request (Anthropic's error shape)", body = serde_json::Value),
        (status = 401, description = "Missing or wrong bearer token (x-api-key too on /v1/messages)", body = serde_json::Value),
        (status = 403, description = "Past one of the key's scopes, or a CLI's run token naming another model or session (permission_error)", body = serde_json::Value),
        (status = 404, description = "Unknown model (not_found_error), or a session the key may not see", body = serde_json::Value),
        (status = 429, description = "The provider's limits and queue are full", body = serde_json::Value),
        (status = 413, description = "Body larger than the configured limit", body = serde_json::Value),
        (status = 415, description = "Body not declared as application/json", body = serde_json::Value),
        (status = 502, description = "The provider failed before its first token", body = serde_json::Value),
        (status = 503, description = "The daemon is shutting down, or its store is busy", body = serde_json::Value),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn messages(
    State(state): State<AppState>,
    principal: Option<Extension<Principal>>,
    grant: Option<Extension<RunGrant>>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    let grant = grant.map(|Extension(g)| g);
    let actor = door_actor(principal, grant.as_ref());
    serve(doors::Messages, state, actor, grant, headers, bytes).await
}

/// OpenAI-compatible Responses (stream or not), run as a session.
///
/// The body is the Responses API's; `model` routes as for chat completions; `previous_response_id`
/// continues the stored session of that response; `store: false` keeps nothing of the call (it
/// runs as a session of its own, deleted once answered) and deletes nothing stored before it.
/// Errors use OpenAI's shape; a stream that fails ends with `response.failed`.
#[utoipa::path(
    post,
    path = "/v1/responses",
    operation_id = "responses",
    tag = "gateway",
    request_body(content = serde_json::Value, description = "An OpenAI Responses request"),
    params(
        ("x-elfgate-session-id" = Option<String>, Header, description = "Continue this session"),
        ("x-elfgate-project-path" = Option<String>, Header, description = "A new session's project directory"),
        ("x-elfgate-permission-mode" = Option<String>, Header, description = "default, acceptEdits, bypassPermissions or plan: the permission mode of the call's run (elfgate:tinyelf, elfgate:cli)"),
    ),
    responses(
        (status = 200, description = "A response object, or response.created … response.completed SSE events; the session id is in x-elfgate-session-id, the built-in tools the route left out in x-elfgate-omitted-tools", body = serde_json::Value),
        (status = 400, description = "Bad request (OpenAI's error shape)", body = serde_json::Value),
        (status = 401, description = "Missing or wrong bearer token", body = serde_json::Value),
        (status = 403, description = "Past one of the key's scopes, or a CLI's run token naming another model or another session", body = serde_json::Value),
        (status = 404, description = "Unknown model (model_not_found) or previous_response_id, or a session the key may not see", body = serde_json::Value),
        (status = 422, description = "A text of the request carries the daemon's token or a provider's key", body = serde_json::Value),
        (status = 429, description = "The provider's limits and queue are full", body = serde_json::Value),
        (status = 413, description = "Body larger than the configured limit", body = serde_json::Value),
        (status = 415, description = "Body not declared as application/json", body = serde_json::Value),
        (status = 502, description = "The provider failed before its first token", body = serde_json::Value),
        (status = 503, description = "The daemon is shutting down, or its store is busy", body = serde_json::Value),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn responses(
    State(state): State<AppState>,
    principal: Option<Extension<Principal>>,
    grant: Option<Extension<RunGrant>>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    let grant = grant.map(|Extension(g)| g);
    let actor = door_actor(principal, grant.as_ref());
    serve(
        doors::Responses::default(),
        state,
        actor,
        grant,
        headers,
        bytes,
    )
    .await
}

/// The Gemini API: `POST /v1beta/models/{model}:generateContent`, `:streamGenerateContent`
/// (`?alt=sse`: SSE; without it one JSON array) and `:countTokens`, run as a session (counting
/// runs nothing).
///
/// `model` routes as for chat completions (`PROVIDER/MODEL`, an alias, `elfgate:ENGINE`); the
/// token comes as `x-goog-api-key`, `?key=` or a bearer token. Errors use Google's shape
/// `{"error":{"code","message","status"}}`.
#[utoipa::path(
    post,
    path = "/v1beta/models/{call}",
    operation_id = "geminiGenerateContent",
    tag = "gateway",
    params(
        ("call" = String, Path, description = "MODEL:generateContent, MODEL:streamGenerateContent or MODEL:countTokens"),
        ("alt" = Option<String>, Query, description = "sse: stream as server-sent events"),
        ("x-elfgate-session-id" = Option<String>, Header, description = "Continue this session"),
        ("x-elfgate-project-path" = Option<String>, Header, description = "A new session's project directory"),
    ),
    request_body(content = serde_json::Value, description = "A Gemini generateContent (or countTokens) request"),
    responses(
        (status = 200, description = "A GenerateContentResponse, SSE chunks of them, or {totalTokens}; the session id is in x-elfgate-session-id", body = serde_json::Value),
        (status = 400, description = "Bad request (Google's error shape)", body = serde_json::Value),
        (status = 401, description = "Missing or wrong key", body = serde_json::Value),
        (status = 403, description = "Past one of the key's scopes (PERMISSION_DENIED), or a CLI's run token naming another model", body = serde_json::Value),
        (status = 404, description = "Unknown model or method, or a session the key may not see", body = serde_json::Value),
        (status = 429, description = "The provider's limits and queue are full", body = serde_json::Value),
        (status = 502, description = "The provider failed before its first token", body = serde_json::Value),
        (status = 503, description = "The daemon is shutting down, or its store is busy", body = serde_json::Value),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn gemini_call(
    State(state): State<AppState>,
    principal: Option<Extension<Principal>>,
    grant: Option<Extension<RunGrant>>,
    Path(call): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    let door = doors::Gemini::new(call, query.as_deref());
    let grant = grant.map(|Extension(g)| g);
    let actor = door_actor(principal, grant.as_ref());
    serve(door, state, actor, grant, headers, bytes).await
}

/// The gateway's model names in the Gemini API's list shape.
#[utoipa::path(
    get,
    path = "/v1beta/models",
    operation_id = "geminiListModels",
    tag = "gateway",
    responses(
        (status = 200, description = "{\"models\":[{\"name\":\"models/ID\",\"displayName\",\"supportedGenerationMethods\"}]}", body = serde_json::Value),
        (status = 401, description = "Missing key (Google's error shape)", body = serde_json::Value),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn gemini_models(
    State(state): State<AppState>,
    principal: Option<Extension<Principal>>,
) -> Response {
    let actor = match door_actor(principal, None) {
        Ok(a) => a,
        Err(e) => return Door::Gemini.error(&e),
    };
    let models: Vec<serde_json::Value> = model_ids(&state, &actor)
        .into_iter()
        .map(|(id, _)| {
            json!({"name": format!("models/{id}"), "displayName": id,
                   "supportedGenerationMethods": ["generateContent", "streamGenerateContent", "countTokens"]})
        })
        .collect();
    axum::Json(json!({"models": models})).into_response()
}

/// Every model name a door routes for `actor`: each provider's `PROVIDER/DEFAULT_MODEL`, each
/// alias, each `elfgate:ENGINE`, with its owner; only those its key's scopes allow (a call is
/// checked again whatever the list says).
fn model_ids(state: &AppState, actor: &Actor) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (name, p) in &state.config.providers {
        if let Some(m) = &p.default_model
            && scopes::allows_route(actor, name, m)
        {
            out.push((format!("{name}/{m}"), name.clone()));
        }
    }
    for name in state.config.aliases.keys() {
        let allowed = match route::resolve(state, name) {
            Ok(route::Route::Provider {
                provider,
                model,
                fallbacks,
            }) => std::iter::once((&provider, &model))
                .chain(fallbacks.iter().map(|(p, m)| (p, m)))
                .all(|(p, m)| scopes::allows_route(actor, p, m)),
            Ok(route::Route::Engine { engine, .. }) => scopes::allows_engine(actor, engine),
            Err(_) => false,
        };
        if allowed {
            out.push((name.clone(), "elfgate".to_string()));
        }
    }
    for e in EngineType::ALL {
        if state.dispatcher.has_engine(e) && scopes::allows_engine(actor, e) {
            out.push((
                format!("{}{}", route::ENGINE_PREFIX, e.as_str()),
                "elfgate".to_string(),
            ));
        }
    }
    out
}

/// The gateway's model names: providers' default models, aliases and engines, in OpenAI's list
/// shape.
#[utoipa::path(
    get,
    path = "/v1/models",
    operation_id = "listModels",
    tag = "gateway",
    responses(
        (status = 200, description = "{\"object\":\"list\",\"data\":[{\"id\",\"object\":\"model\",\"created\",\"owned_by\"}]}", body = serde_json::Value),
        (status = 401, description = "Missing bearer token (OpenAI's error shape)", body = serde_json::Value),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn models(
    State(state): State<AppState>,
    principal: Option<Extension<Principal>>,
    headers: HeaderMap,
) -> Response {
    // A Gemini client (the google-genai SDK with a base URL of its own) asks here too.
    if headers.contains_key("x-goog-api-key") {
        return gemini_models(State(state), principal).await;
    }
    let actor = match door_actor(principal, None) {
        Ok(a) => a,
        Err(e) => return Door::OpenAi.error(&e),
    };
    let data: Vec<serde_json::Value> = model_ids(&state, &actor)
        .into_iter()
        .map(|(id, owner)| json!({"id": id, "object": "model", "created": 0, "owned_by": owner}))
        .collect();
    axum::Json(json!({"object": "list", "data": data})).into_response()
}
