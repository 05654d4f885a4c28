//! The gateway's front doors: POST /v1/chat/completions and POST /v1/responses (OpenAI), POST
//! /v1/messages (Anthropic), POST /v1beta/models/{model}:generateContent and its kin (Gemini),
//! GET /v1/models and GET /v1beta/models. Thin: parsing, routing and running are in crate::gateway.

use crate::error::ApiError;
use crate::gateway::error::Door;
use crate::gateway::run::{self, Continuation, Out, RunHandle};
use crate::gateway::{
    Inbound, PERMISSION_MODE_HEADER, PROJECT_HEADER, SESSION_HEADER, anthropic_in, anthropic_out,
    body, builtin_tools, gemini_in, gemini_out, openai_in, openai_out, responses, responses_in,
    responses_out, route,
};
use crate::state::AppState;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use elfgate_core::{EngineType, PermissionMode, RunGrant};
use futures_util::StreamExt;
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

fn read_body(
    state: &AppState,
    headers: &HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<serde_json::Value, ApiError> {
    let bytes = bytes.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge(state.config.server.body_limit_bytes)
        } else {
            ApiError::BadRequest(format!("cannot read the body: {r}"))
        }
    })?;
    body::json_object(headers, &bytes)
}

fn continuation(headers: &HeaderMap) -> Result<Continuation, ApiError> {
    let text = |name: &str| -> Result<Option<String>, ApiError> {
        headers
            .get(name)
            .map(|v| {
                v.to_str().map(str::to_string).map_err(|_| {
                    ApiError::invalid(None, format!("header {name} is not valid text"))
                })
            })
            .transpose()
    };
    let session_id = text(SESSION_HEADER)?
        .map(|s| {
            crate::service::parse_session_id(&s).map_err(|_| {
                ApiError::invalid(None, format!("{SESSION_HEADER}: unknown session '{s}'"))
            })
        })
        .transpose()?;
    let permission_mode = text(PERMISSION_MODE_HEADER)?
        .map(|m| {
            m.parse::<PermissionMode>()
                .map_err(|e| ApiError::invalid(None, format!("{PERMISSION_MODE_HEADER}: {e}")))
        })
        .transpose()?;
    Ok(Continuation {
        session_id,
        project_path: text(PROJECT_HEADER)?,
        permission_mode,
    })
}

async fn begin(
    state: &AppState,
    grant: &Option<Extension<RunGrant>>,
    headers: &HeaderMap,
    inbound: Inbound,
) -> Result<RunHandle, ApiError> {
    let route = route::resolve(state, &inbound.model)?;
    let cont = continuation(headers)?;
    check_grant_session(grant, cont.session_id, SESSION_HEADER)?;
    run::start(state, route, inbound, cont).await
}

/// A CLI's run token (the proxy) names one route: any other `model` is refused.
fn check_grant(grant: &Option<Extension<RunGrant>>, model: &str) -> Result<(), ApiError> {
    match grant {
        Some(Extension(g)) if g.route != model => Err(ApiError::Refused(format!(
            "this run token is valid only for model '{}' (run {} of session {})",
            g.route, g.run_id, g.session_id
        ))),
        _ => Ok(()),
    }
}

/// A run token (the proxy) reaches its own session only: another one named by `field` is
/// refused before anything of it is read.
fn check_grant_session(
    grant: &Option<Extension<RunGrant>>,
    session: Option<elfgate_core::SessionId>,
    field: &str,
) -> Result<(), ApiError> {
    match (grant, session) {
        (Some(Extension(g)), Some(sid)) if g.session_id != sid => Err(ApiError::Refused(format!(
            "{field}: this run token reaches only its own session ({}), not session {sid}",
            g.session_id
        ))),
        _ => Ok(()),
    }
}

fn with_session(mut resp: Response, handle: &RunHandle) -> Response {
    if let Ok(v) = HeaderValue::from_str(&handle.session_id.to_string()) {
        resp.headers_mut().insert(SESSION_HEADER, v);
    }
    resp
}

/// An SSE answer: `first` (already read) then the rest of the run, each item through `write`.
fn sse(
    handle: RunHandle,
    first: Out,
    mut write: impl FnMut(&Out) -> String + Send + 'static,
) -> Response {
    let session = handle.session_id;
    let stream = futures_util::stream::unfold(
        (handle, Some(first), false),
        move |(mut handle, pending, ended)| async move {
            if ended {
                return None;
            }
            let item = match pending {
                Some(i) => i,
                None => handle.next().await?,
            };
            let ended = matches!(item, Out::End { .. });
            Some((item, (handle, None, ended)))
        },
    );
    let body =
        stream.map(move |item| Ok::<Bytes, std::convert::Infallible>(Bytes::from(write(&item))));
    let mut resp = Response::new(Body::from_stream(body));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(v) = HeaderValue::from_str(&session.to_string()) {
        h.insert(SESSION_HEADER, v);
    }
    resp
}

/// The first item, or the error that fails the request before anything was sent.
async fn first_item(handle: &mut RunHandle) -> Result<Out, ApiError> {
    match handle.next().await {
        Some(Out::Error(e)) => Err(ApiError::Upstream(e)),
        Some(item) => Ok(item),
        None => Err(ApiError::Internal("the run ended without an answer".into())),
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
        (status = 404, description = "Unknown model (model_not_found)", body = serde_json::Value),
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
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    let door = Door::OpenAi;
    let answer = async {
        let value = read_body(&state, &headers, bytes)?;
        let (inbound, include_usage) = openai_in::parse(&value)?;
        let stream = inbound.stream;
        // No run token opens this door (see auth): no grant to check.
        let mut handle = begin(&state, &None, &headers, inbound).await?;
        let id = format!("chatcmpl-{}", handle.run_id);
        let created = chrono::Utc::now().timestamp();
        let model = handle.model.clone();
        if stream {
            let first = first_item(&mut handle).await?;
            let mut w = openai_out::ChunkWriter::new(id, model, created, include_usage);
            return Ok(sse(handle, first, move |item| w.frames(item)));
        }
        let (items, end) = run::collect(&mut handle).await?;
        let body = openai_out::completion(&id, &model, created, &items, &end);
        Ok(with_session(axum::Json(body).into_response(), &handle))
    };
    answer.await.unwrap_or_else(|e| door.error(&e))
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
        (status = 404, description = "Unknown model (not_found_error)", body = serde_json::Value),
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
    grant: Option<Extension<RunGrant>>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    let door = Door::Anthropic;
    let answer = async {
        let value = read_body(&state, &headers, bytes)?;
        let mut inbound = anthropic_in::parse(&value)?;
        inbound.request.extended_context = anthropic_in::asks_long_context(&headers);
        check_grant(&grant, &inbound.model)?;
        let stream = inbound.stream;
        let mut handle = begin(&state, &grant, &headers, inbound).await?;
        let id = format!("msg_{}", handle.run_id);
        let model = handle.model.clone();
        if stream {
            let first = first_item(&mut handle).await?;
            let mut w = anthropic_out::EventWriter::new(id, model);
            return Ok(sse(handle, first, move |item| w.frames(item)));
        }
        let (items, end) = run::collect(&mut handle).await?;
        let body = anthropic_out::message_json(&id, &model, &items, &end);
        Ok(with_session(axum::Json(body).into_response(), &handle))
    };
    answer.await.unwrap_or_else(|e| door.error(&e))
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
        (status = 403, description = "A CLI's run token naming another model or another session", body = serde_json::Value),
        (status = 404, description = "Unknown model (model_not_found) or previous_response_id", body = serde_json::Value),
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
    grant: Option<Extension<RunGrant>>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    let door = Door::OpenAi;
    let answer = async {
        let value = read_body(&state, &headers, bytes)?;
        let mut r = responses_in::parse(&value)?;
        check_grant(&grant, &r.inbound.model)?;
        let route = route::resolve(&state, &r.inbound.model)?;
        let omitted = builtin_tools::apply(&state, &route, &mut r);
        let mut cont = continuation(&headers)?;
        check_grant_session(&grant, cont.session_id, SESSION_HEADER)?;
        check_grant_session(
            &grant,
            responses::previous_session(&r),
            "previous_response_id",
        )?;
        if let Some(sid) = responses::continue_previous(&state, &mut r).await? {
            cont.session_id = Some(sid);
        }
        if !r.store {
            responses::keep_nothing(&state, &route, &mut cont).await?;
        }
        let echo = responses_out::Echo {
            model: r.inbound.model.clone(),
            previous_response_id: r.previous_response_id.clone(),
            store: r.store,
            include_encrypted_reasoning: r.include_encrypted_reasoning,
        };
        let stream = r.inbound.stream;
        let mut handle = run::start(&state, route, r.inbound, cont).await?;
        // The session is the call's own here (keep_nothing saw to it).
        let cleanup = (!r.store).then(|| responses::DeleteWhenDone {
            state: state.clone(),
            session_id: handle.session_id,
        });
        let id = responses::response_id(handle.session_id, handle.run_id);
        let mut b = responses_out::ResponseBuilder::new(id, echo);
        if stream {
            let first = first_item(&mut handle).await?;
            let resp = sse(handle, first, move |item| {
                let _cleanup = &cleanup;
                b.frames(item)
            });
            return Ok(builtin_tools::with_notice(resp, &omitted));
        }
        let (items, end) = run::collect(&mut handle).await?;
        for item in items.iter().chain(std::iter::once(&end)) {
            b.frames(item);
        }
        let resp = with_session(axum::Json(b.response()).into_response(), &handle);
        drop(handle);
        drop(cleanup);
        Ok(builtin_tools::with_notice(resp, &omitted))
    };
    answer.await.unwrap_or_else(|e| door.error(&e))
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
        (status = 404, description = "Unknown model or method", body = serde_json::Value),
        (status = 429, description = "The provider's limits and queue are full", body = serde_json::Value),
        (status = 502, description = "The provider failed before its first token", body = serde_json::Value),
        (status = 503, description = "The daemon is shutting down, or its store is busy", body = serde_json::Value),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn gemini_call(
    State(state): State<AppState>,
    grant: Option<Extension<RunGrant>>,
    Path(call): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    let door = Door::Gemini;
    let answer = async {
        let (model, method) = call.rsplit_once(':').ok_or_else(|| {
            ApiError::NotFound(format!(
                "'{call}' names no method (MODEL:generateContent, :streamGenerateContent, \
                 :countTokens)"
            ))
        })?;
        let model = model.strip_prefix("models/").unwrap_or(model).to_string();
        check_grant(&grant, &model)?;
        let value = read_body(&state, &headers, bytes)?;
        let stream = match method {
            "generateContent" => false,
            "streamGenerateContent" => true,
            "countTokens" => return Ok(count_tokens(&value)),
            other => {
                return Err(ApiError::NotFound(format!(
                    "unknown method '{other}' (generateContent, streamGenerateContent, \
                     countTokens)"
                )));
            }
        };
        let sse_wanted = query
            .as_deref()
            .is_some_and(|q| q.split('&').any(|kv| kv == "alt=sse"));
        let mut g = gemini_in::parse(&model, &value, stream)?;
        let route = route::resolve(&state, &model)?;
        gemini_builtin_tools(&state, &route, &mut g)?;
        let cont = continuation(&headers)?;
        check_grant_session(&grant, cont.session_id, SESSION_HEADER)?;
        let mut handle = run::start(&state, route, g.inbound, cont).await?;
        let mut b = gemini_out::GeminiBuilder::new(handle.run_id.to_string(), model);
        if stream && sse_wanted {
            let first = first_item(&mut handle).await?;
            return Ok(sse(handle, first, move |item| b.frames(item)));
        }
        let (items, end) = run::collect(&mut handle).await?;
        for item in items.iter().chain(std::iter::once(&end)) {
            b.frames(item);
        }
        // Without alt=sse a stream is one JSON array of responses: here, the whole answer.
        let body = if stream {
            json!([b.response()])
        } else {
            b.response()
        };
        Ok(with_session(axum::Json(body).into_response(), &handle))
    };
    answer.await.unwrap_or_else(|e| door.error(&e))
}

/// `web_search`'s Gemini names become the provider's native search where its kind has one;
/// other built-in tools (`codeExecution`, `urlContext`, …) are refused, naming them.
fn gemini_builtin_tools(
    state: &AppState,
    route: &route::Route,
    g: &mut gemini_in::GeminiInbound,
) -> Result<(), ApiError> {
    for t in &g.builtin_tools {
        let kind = match route {
            route::Route::Provider { provider, .. } => state
                .providers
                .resolve(Some(provider))
                .ok()
                .map(|(_, p)| p.kind()),
            route::Route::Engine { .. } => None,
        };
        match kind {
            Some(k) if gemini_in::SEARCH_TOOLS.contains(&t.as_str()) && k.searches_natively() => {
                g.inbound.request.native_search = true;
            }
            _ => {
                return Err(ApiError::invalid(
                    Some("tools".to_string()),
                    format!(
                        "'tools': the built-in tool '{t}' is not available on this route; only \
                         functionDeclarations are (and googleSearch on gemini, anthropic and \
                         openai-responses providers)"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// `countTokens`: an estimate (4 bytes a token) of the request's text, without a provider call.
fn count_tokens(body: &serde_json::Value) -> Response {
    let request = body.get("generateContentRequest").unwrap_or(body);
    let mut bytes = 0usize;
    let mut add = |v: &serde_json::Value| {
        for c in v.as_array().into_iter().flatten() {
            for p in c["parts"].as_array().into_iter().flatten() {
                bytes += p["text"].as_str().map_or(0, str::len);
                if let Some(call) = p.get("functionCall").or_else(|| p.get("functionResponse")) {
                    bytes += call.to_string().len();
                }
            }
        }
    };
    add(&request["contents"]);
    if let Some(s) = request.get("systemInstruction") {
        add(&json!([s]));
    }
    axum::Json(json!({"totalTokens": bytes.div_ceil(4)})).into_response()
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
pub(crate) async fn gemini_models(State(state): State<AppState>) -> Response {
    let models: Vec<serde_json::Value> = model_ids(&state)
        .into_iter()
        .map(|(id, _)| {
            json!({"name": format!("models/{id}"), "displayName": id,
                   "supportedGenerationMethods": ["generateContent", "streamGenerateContent", "countTokens"]})
        })
        .collect();
    axum::Json(json!({"models": models})).into_response()
}

/// Every model name a door routes: each provider's `PROVIDER/DEFAULT_MODEL`, each alias, each
/// `elfgate:ENGINE`, with its owner.
fn model_ids(state: &AppState) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (name, p) in &state.config.providers {
        if let Some(m) = &p.default_model {
            out.push((format!("{name}/{m}"), name.clone()));
        }
    }
    for name in state.config.aliases.keys() {
        out.push((name.clone(), "elfgate".to_string()));
    }
    for e in EngineType::ALL {
        if state.dispatcher.has_engine(e) {
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
pub(crate) async fn models(State(state): State<AppState>, headers: HeaderMap) -> Response {
    // A Gemini client (the google-genai SDK with a base URL of its own) asks here too.
    if headers.contains_key("x-goog-api-key") {
        return gemini_models(State(state)).await;
    }
    let data: Vec<serde_json::Value> = model_ids(&state)
        .into_iter()
        .map(|(id, owner)| json!({"id": id, "object": "model", "created": 0, "owned_by": owner}))
        .collect();
    axum::Json(json!({"object": "list", "data": data})).into_response()
}
