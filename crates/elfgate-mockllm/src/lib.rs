//! `elfgate-mockllm`: a scriptable mock LLM provider server.
//!
//! It speaks the real OpenAI Chat Completions (`POST /v1/chat/completions`),
//! Anthropic Messages (`POST /v1/messages`), OpenAI Responses (`POST /v1/responses`)
//! and Gemini (`POST /v1beta/models/{model}:streamGenerateContent`) wire formats over
//! real HTTP/SSE, so integration tests, benchmarks and the coding CLIs can run real
//! clients against it.
//!
//! Behaviour is selected through the request's model name, e.g.
//! `mock:tokens=50,delay_ms=10` or `mock:fail=500x2,id=abc`; see the crate
//! README for the full grammar. Multi-turn agent tests can register [`Script`]s.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! let server = elfgate_mockllm::MockServer::start().await?;
//! let openai_base = format!("{}/v1", server.base_url());
//! let anthropic_base = server.base_url();
//! # let _ = (openai_base, anthropic_base);
//! # Ok(()) }
//! ```

mod behavior;
mod cache;
mod search;
mod wire;

pub use wire::gemini::THOUGHT_SIGNATURE as GEMINI_THOUGHT_SIGNATURE;
pub use wire::responses::ENCRYPTED_REASONING as RESPONSES_ENCRYPTED_REASONING;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post, put};
use axum::serve::ListenerExt;
use axum::{Json, serve};
use bytes::Bytes;
use futures_util::Stream;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::behavior::{Behavior, split_words};
pub use crate::wire::Format;
use crate::wire::{Content, Cut, End, Frame, Reply, ToolCall};

/// Default address of the standalone binary.
pub const DEFAULT_BIND: &str = "127.0.0.1:7421";

/// Maximum accepted request body size.
const BODY_LIMIT: usize = 64 * 1024 * 1024;

/// Maximum size of one coalesced body chunk when there is no per-token delay.
const COALESCE_MAX: usize = 64 * 1024;

// ---------------------------------------------------------------- public data types

/// One request received by a provider endpoint.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedRequest {
    /// The wire format the request spoke.
    pub format: Format,
    /// Request path without the query, e.g. `/v1/chat/completions` or
    /// `/v1beta/models/gemini-pro:streamGenerateContent`.
    pub path: String,
    /// The `model` field of the request body, or for Gemini the model named in the path
    /// (empty if absent).
    pub model: String,
    /// The full JSON request body (a JSON string holding the raw text if it was not valid JSON).
    pub body: Value,
    /// The credential the client sent: the `Authorization` header, or else `x-api-key`,
    /// `x-goog-api-key` or the `key` query parameter.
    pub authorization: Option<String>,
    /// Anthropic's `anthropic-beta` header, when sent (the features the client opted into).
    pub anthropic_beta: Option<String>,
    /// The W3C `traceparent` header, when sent (the span the call is a child of).
    #[serde(default)]
    pub traceparent: Option<String>,
    /// What has happened to this request so far (updated live).
    pub outcome: Outcome,
}

/// Fate of a recorded request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The response is still being produced or streamed.
    InProgress,
    /// The response was delivered in full (including a scripted mid-stream error).
    Completed,
    /// Answered with an HTTP error status.
    Failed,
    /// The mock dropped the connection on purpose (`drop_after`).
    Dropped,
    /// The client went away before the end of the response.
    ClientDisconnected,
}

/// A named sequence of responses: the n-th request using `script=NAME` gets
/// `responses[n]`; once exhausted, the last response repeats.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Script {
    /// Responses in order.
    pub responses: Vec<ScriptedResponse>,
}

/// One scripted response.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ScriptedResponse {
    /// If set (400..=599), answer with this HTTP error status instead.
    pub status: Option<u16>,
    /// Thinking/reasoning text, streamed before the answer text.
    pub thinking: Option<String>,
    /// Answer text, streamed in chunks split at whitespace boundaries (spaces kept).
    pub text: Option<String>,
    /// Tool calls emitted after the text.
    pub tool_calls: Vec<ScriptedToolCall>,
    /// Finish reason override; default `stop`/`end_turn`, or `tool_calls`/`tool_use`
    /// when tool calls exist. Either provider's vocabulary is accepted and mapped.
    pub finish_reason: Option<String>,
    /// After the text, send nothing more, forever.
    pub stall: bool,
    /// The provider searches the web itself first, for this query (Anthropic: a
    /// `server_tool_use` and its `web_search_tool_result` before the text), when the request
    /// offers its web search tool.
    pub server_search: Option<String>,
}

/// One scripted tool call.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScriptedToolCall {
    /// Tool call id; generated (`call_mock_i` / `toolu_mock_i`) when absent.
    #[serde(default)]
    pub id: Option<String>,
    /// Tool name.
    pub name: String,
    /// Raw JSON argument text; may be deliberately malformed.
    #[serde(default)]
    pub arguments: String,
}

// ---------------------------------------------------------------- shared state

struct Entry {
    id: u64,
    req: RecordedRequest,
}

#[derive(Default)]
struct Inner {
    requests: Mutex<Vec<Entry>>,
    next_id: AtomicU64,
    fail_counts: Mutex<HashMap<String, u64>>,
    scripts: Mutex<HashMap<String, (Script, usize)>>,
    /// Prompt prefixes cached so far (see `cache`).
    cached_prefixes: Mutex<std::collections::HashSet<String>>,
    /// Gates that streams of `gate=NAME` wait at (see [`MockServer::open_gate`]).
    gates: Mutex<HashMap<String, Arc<Gate>>>,
    shutdown: CancellationToken,
}

/// A gate: streams wait at it before their first token until it opens.
#[derive(Default)]
struct Gate {
    open: CancellationToken,
    waiting: std::sync::atomic::AtomicUsize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Shared state of a mock server (recorded requests, scripts, failure counters).
/// Cheap to clone.
#[derive(Clone, Default)]
pub struct MockState {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for MockState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockState").finish_non_exhaustive()
    }
}

impl MockState {
    /// Fresh, empty state.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every provider request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.inner.requests)
            .iter()
            .map(|e| e.req.clone())
            .collect()
    }

    /// Forget all recorded requests.
    pub fn clear_requests(&self) {
        lock(&self.inner.requests).clear();
    }

    /// Register (or replace) a script under `name`; resets its response counter.
    pub fn set_script(&self, name: &str, script: Script) {
        lock(&self.inner.scripts).insert(name.to_string(), (script, 0));
    }

    /// The gate `name` (created closed on first use).
    fn gate(&self, name: &str) -> Arc<Gate> {
        lock(&self.inner.gates)
            .entry(name.to_string())
            .or_default()
            .clone()
    }

    /// Stop stalled streams (used on shutdown).
    fn shutdown(&self) {
        self.inner.shutdown.cancel();
    }

    fn record(&self, req: RecordedRequest) -> OutcomeGuard {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        lock(&self.inner.requests).push(Entry { id, req });
        OutcomeGuard {
            state: self.clone(),
            id,
            done: false,
        }
    }

    fn set_outcome(&self, id: u64, outcome: Outcome) {
        let mut reqs = lock(&self.inner.requests);
        if let Some(e) = reqs.iter_mut().rev().find(|e| e.id == id) {
            e.req.outcome = outcome;
        }
    }

    /// Returns true if this request should fail (and bumps the counter).
    fn should_fail(&self, model: &str, times: Option<u64>) -> bool {
        let Some(times) = times else {
            return true;
        };
        let mut counts = lock(&self.inner.fail_counts);
        let n = counts.entry(model.to_string()).or_insert(0);
        let fail = *n < times;
        *n = n.saturating_add(1);
        fail
    }

    fn next_scripted(&self, name: &str) -> Option<ScriptedResponse> {
        let mut scripts = lock(&self.inner.scripts);
        let (script, counter) = scripts.get_mut(name)?;
        let idx = (*counter).min(script.responses.len().saturating_sub(1));
        *counter = counter.saturating_add(1);
        Some(script.responses.get(idx).cloned().unwrap_or_default())
    }
}

/// Marks the recorded outcome; if dropped before [`OutcomeGuard::finish`], records
/// [`Outcome::ClientDisconnected`].
struct OutcomeGuard {
    state: MockState,
    id: u64,
    done: bool,
}

impl OutcomeGuard {
    fn finish(&mut self, outcome: Outcome) {
        self.state.set_outcome(self.id, outcome);
        self.done = true;
    }
}

impl Drop for OutcomeGuard {
    fn drop(&mut self) {
        if !self.done {
            self.state.set_outcome(self.id, Outcome::ClientDisconnected);
        }
    }
}

// ---------------------------------------------------------------- server

/// A mock provider server running in a background tokio task. Dropping it stops the server.
#[derive(Debug)]
pub struct MockServer {
    addr: SocketAddr,
    state: MockState,
    task: JoinHandle<()>,
}

impl MockServer {
    /// Bind 127.0.0.1:0 and serve in a background tokio task.
    pub async fn start() -> std::io::Result<MockServer> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        Self::start_on(listener)
    }

    /// Serve on an existing listener in a background tokio task.
    pub fn start_on(listener: TcpListener) -> std::io::Result<MockServer> {
        let addr = listener.local_addr()?;
        let state = MockState::new();
        let app = router(state.clone());
        let token = state.inner.shutdown.clone();
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let task = tokio::spawn(async move {
            let _ = serve(listener, app)
                .with_graceful_shutdown(token.cancelled_owned())
                .await;
        });
        Ok(MockServer { addr, state, task })
    }

    /// The bound socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` (no trailing slash). OpenAI clients (and codex) use
    /// `base_url() + "/v1"`, Anthropic and Gemini clients use `base_url()`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every provider request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state.requests()
    }

    /// Forget all recorded requests.
    pub fn clear_requests(&self) {
        self.state.clear_requests();
    }

    /// Register a script under a name (replacing any previous one and resetting its counter).
    pub fn set_script(&self, name: &str, script: Script) {
        self.state.set_script(name, script);
    }

    /// Opens the gate `name`: the streams of `gate=NAME` waiting at it go on, later ones pass.
    pub fn open_gate(&self, name: &str) {
        self.state.gate(name).open.cancel();
    }

    /// How many streams wait at the gate `name` now.
    pub fn waiting_at_gate(&self, name: &str) -> usize {
        self.state.gate(name).waiting.load(Ordering::SeqCst)
    }

    /// The shared state behind this server.
    pub fn state(&self) -> &MockState {
        &self.state
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.state.shutdown();
        self.task.abort();
    }
}

/// Serve the mock on `listener` until the process ends (or an I/O error occurs).
pub async fn serve_listener(listener: TcpListener) -> std::io::Result<()> {
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    serve(listener, router(MockState::new())).await
}

/// Bind `bind` (e.g. `127.0.0.1:7421`) and serve forever.
pub async fn serve_forever(bind: &str) -> std::io::Result<()> {
    let listener = TcpListener::bind(bind).await?;
    serve_listener(listener).await
}

/// The axum router implementing all endpoints on top of `state`.
pub fn router(state: MockState) -> Router {
    Router::new()
        .route("/v1/chat/completions", provider_route(Format::OpenAiChat))
        .route("/v1/messages", provider_route(Format::Anthropic))
        // codex appends `/responses` to whatever base URL it is given, with or without `/v1`.
        .route("/v1/responses", provider_route(Format::OpenAiResponses))
        .route("/responses", provider_route(Format::OpenAiResponses))
        .route("/v1/models", get(list_models))
        .route("/models", get(list_models))
        // A Gemini method is a `:` suffix of the model's path segment, which axum cannot route
        // on: the handler splits it off.
        .route("/v1beta/models/{*rest}", post(gemini_handler))
        .route("/search", get(search::searxng).post(search::tavily))
        .route("/res/v1/web/search", get(search::brave))
        .route("/_mock/requests", get(list_requests).delete(clear_requests))
        .route("/_mock/scripts/{name}", put(put_script))
        .route("/healthz", get(|| async { "ok" }))
        // claude-code probes this (with HEAD) before its first request unless told not to.
        .route("/api/hello", get(|| async { "ok" }))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

async fn list_requests(State(state): State<MockState>) -> Json<Vec<RecordedRequest>> {
    Json(state.requests())
}

async fn clear_requests(State(state): State<MockState>) -> StatusCode {
    state.clear_requests();
    StatusCode::NO_CONTENT
}

async fn put_script(
    State(state): State<MockState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    match serde_json::from_slice::<Script>(&body) {
        Ok(script) => {
            state.set_script(&name, script);
            StatusCode::NO_CONTENT.into_response()
        }
        Err(e) => (
            StatusCode::BAD_REQUEST,
            Json(serde_json::json!({"error": format!("invalid script: {e}")})),
        )
            .into_response(),
    }
}

/// The model list: any model string works, so it names only `mock`. It carries both the
/// OpenAI shape (`data`) and the shape codex reads (`models`, empty, so that codex keeps its
/// built-in model presets).
async fn list_models() -> Json<Value> {
    Json(serde_json::json!({
        "object": "list",
        "data": [{"id": "mock", "object": "model", "created": 0, "owned_by": "elfgate-mockllm"}],
        "models": [],
    }))
}

/// What routing tells about a provider request before its body is read.
struct Incoming {
    format: Format,
    /// Path without the query.
    path: String,
    authorization: Option<String>,
    anthropic_beta: Option<String>,
    traceparent: Option<String>,
    /// The model, when the path names it (Gemini).
    model: Option<String>,
    /// Whether to stream, when the path says so (Gemini).
    stream: Option<bool>,
}

impl Incoming {
    fn new(format: Format, uri: &Uri, headers: &HeaderMap) -> Self {
        let authorization = ["authorization", "x-api-key", "x-goog-api-key"]
            .into_iter()
            .find_map(|name| header_str(headers, name))
            .or_else(|| query_param(uri, "key"));
        Self {
            format,
            path: uri.path().to_string(),
            authorization,
            anthropic_beta: header_str(headers, "anthropic-beta"),
            traceparent: header_str(headers, "traceparent"),
            model: None,
            stream: None,
        }
    }
}

fn query_param(uri: &Uri, name: &str) -> Option<String> {
    uri.query()?
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

/// The route of a provider endpoint whose path says nothing but the format.
fn provider_route(format: Format) -> MethodRouter<MockState> {
    post(
        move |State(state): State<MockState>, uri: Uri, headers: HeaderMap, body: Bytes| async move {
            handle(state, Incoming::new(format, &uri, &headers), body).await
        },
    )
}

async fn gemini_handler(
    State(state): State<MockState>,
    Path(rest): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let not_found = |what: &str| {
        error_response(
            Format::Gemini,
            404,
            &format!("mock: unknown Gemini method '{what}'"),
            None,
        )
    };
    let Some((model, method)) = rest.rsplit_once(':') else {
        return not_found(&rest);
    };
    let stream = match method {
        "generateContent" => false,
        "streamGenerateContent" => true,
        "countTokens" => return gemini_count_tokens(&body),
        other => return not_found(other),
    };
    let mut incoming = Incoming::new(Format::Gemini, &uri, &headers);
    incoming.model = Some(model.to_string());
    incoming.stream = Some(stream);
    handle(state, incoming, body).await
}

/// `:countTokens` is not a model call: it is answered from the body, not recorded, and no model
/// behaviour applies to it.
fn gemini_count_tokens(raw: &Bytes) -> Response {
    match serde_json::from_slice::<Value>(raw) {
        Ok(body @ Value::Object(_)) => {
            // The request holds either `contents` or a whole `generateContentRequest`.
            let req = body.get("generateContentRequest").unwrap_or(&body);
            let n = wire::prompt_tokens(Format::Gemini, req);
            Json(serde_json::json!({"totalTokens": n})).into_response()
        }
        _ => error_response(Format::Gemini, 400, "countTokens: invalid JSON body", None),
    }
}

// ---------------------------------------------------------------- request handling

fn error_response(
    format: Format,
    status: u16,
    message: &str,
    retry_after: Option<&str>,
) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = (code, Json(wire::error_body(format, status, message))).into_response();
    if let Some(ra) = retry_after
        && let Ok(v) = HeaderValue::from_str(ra)
    {
        resp.headers_mut().insert(RETRY_AFTER, v);
    }
    resp
}

fn header_str(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn behavior_cut(b: &Behavior) -> Option<(usize, Cut)> {
    [
        (b.drop_after, Cut::Drop),
        (b.stall_after, Cut::Stall),
        (b.error_after, Cut::Error),
    ]
    .into_iter()
    .filter_map(|(k, c)| k.map(|k| (k, c)))
    .min_by_key(|(k, _)| *k)
}

fn min_cut(a: Option<(usize, Cut)>, b: Option<(usize, Cut)>) -> Option<(usize, Cut)> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if y.0 < x.0 { y } else { x }),
        (x, y) => x.or(y),
    }
}

fn content_from_behavior(b: &Behavior, format: Format, body: &Value) -> Content {
    let thinking = (0..b.think).map(|i| format!("think{i} ")).collect();
    let text = if b.echo {
        split_words(&format!("You said: {}", wire::last_user_text(format, body)))
    } else {
        (0..b.tokens).map(|i| format!("tok{i} ")).collect()
    };
    let tools = b
        .tool
        .iter()
        .map(|name| ToolCall {
            id: None,
            name: name.clone(),
            arguments: "{}".to_string(),
        })
        .collect();
    Content {
        thinking,
        text,
        tools,
        finish: None,
        cut: behavior_cut(b),
        stop_sequence: None,
        server_search: None,
    }
}

fn content_from_script(r: ScriptedResponse, b: &Behavior) -> Content {
    let text = r.text.as_deref().map(split_words).unwrap_or_default();
    let stall = r.stall.then_some((text.len(), Cut::Stall));
    Content {
        thinking: r.thinking.as_deref().map(split_words).unwrap_or_default(),
        tools: r
            .tool_calls
            .into_iter()
            .map(|t| ToolCall {
                id: t.id,
                name: t.name,
                arguments: t.arguments,
            })
            .collect(),
        finish: r.finish_reason,
        cut: min_cut(stall, behavior_cut(b)),
        stop_sequence: None,
        server_search: r.server_search,
        text,
    }
}

async fn handle(state: MockState, incoming: Incoming, raw: Bytes) -> Response {
    let Incoming {
        format,
        path,
        authorization,
        anthropic_beta,
        traceparent,
        model: path_model,
        stream: path_stream,
    } = incoming;

    let body = match serde_json::from_slice::<Value>(&raw) {
        Ok(v @ Value::Object(_)) => v,
        parsed => {
            let message = match parsed {
                Err(e) => format!("invalid JSON body: {e}"),
                Ok(_) => "request body must be a JSON object".to_string(),
            };
            let mut guard = state.record(RecordedRequest {
                format,
                path,
                model: path_model.unwrap_or_default(),
                body: Value::String(String::from_utf8_lossy(&raw).into_owned()),
                authorization,
                anthropic_beta,
                traceparent,
                outcome: Outcome::InProgress,
            });
            guard.finish(Outcome::Failed);
            return error_response(format, 400, &message, None);
        }
    };

    let model = path_model.unwrap_or_else(|| {
        body.get("model")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    });
    let stream =
        path_stream.unwrap_or_else(|| body.get("stream").and_then(Value::as_bool).unwrap_or(false));
    let include_usage = body
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let include_encrypted_reasoning = body
        .get("include")
        .and_then(Value::as_array)
        .is_some_and(|i| i.iter().any(|v| v == "reasoning.encrypted_content"));
    let prompt_tokens = wire::prompt_tokens(format, &body);
    let behavior = Behavior::parse(&model);

    let content = match &behavior.script {
        Some(_) => None,
        None => Some(content_from_behavior(&behavior, format, &body)),
    };

    // Anthropic's own checks of server tool blocks sent back, and whether it may search.
    let (server_blocks_problem, offers_search) = match format {
        Format::Anthropic => (
            wire::anthropic::server_blocks_problem(&body),
            wire::anthropic::offers_web_search(&body),
        ),
        _ => (None, false),
    };
    let cached_prefix = cache::marked_prefix(format, &body);
    let stops = wire::stop_sequences(format, &body);
    let mut guard = state.record(RecordedRequest {
        format,
        path,
        model: model.clone(),
        body,
        authorization,
        anthropic_beta,
        traceparent,
        outcome: Outcome::InProgress,
    });

    if let Some((code, times)) = behavior.fail
        && state.should_fail(&model, times)
    {
        guard.finish(Outcome::Failed);
        return error_response(
            format,
            code,
            &format!("mock failure (HTTP {code}) for model '{model}'"),
            behavior.retry_after.as_deref(),
        );
    }

    if let Some(problem) = server_blocks_problem {
        guard.finish(Outcome::Failed);
        return error_response(format, 400, &problem, None);
    }

    if let Some(limit) = behavior.context_limit
        && prompt_tokens > limit
    {
        // Before the script: a refused prompt does not use up a scripted response.
        guard.finish(Outcome::Failed);
        let body = wire::context_error(format, limit, prompt_tokens);
        return (StatusCode::BAD_REQUEST, Json(body)).into_response();
    }

    let content = match (content, &behavior.script) {
        (Some(c), _) => c,
        (None, Some(name)) => match state.next_scripted(name) {
            None => {
                guard.finish(Outcome::Failed);
                return error_response(
                    format,
                    400,
                    &format!("mock: unknown script '{name}'"),
                    None,
                );
            }
            Some(r) => {
                if let Some(status) = r.status
                    && (400..=599).contains(&status)
                {
                    guard.finish(Outcome::Failed);
                    return error_response(
                        format,
                        status,
                        &format!("mock scripted failure (HTTP {status})"),
                        behavior.retry_after.as_deref(),
                    );
                }
                content_from_script(r, &behavior)
            }
        },
        (None, None) => Content::default(),
    };
    let mut content = content;
    if !offers_search {
        content.server_search = None;
    }
    content.stop_at(&stops);

    let delay = (behavior.delay_ms > 0).then(|| Duration::from_millis(behavior.delay_ms));
    // Only an answered request fills the cache.
    let cache = cache::cache_use(
        cached_prefix,
        &behavior,
        &mut lock(&state.inner.cached_prefixes),
    );
    let reply = Reply {
        model: &model,
        created: unix_now(),
        prompt_tokens,
        cache,
        include_usage,
        include_encrypted_reasoning,
    };

    if stream {
        let plan = wire::stream(format, &content, &reply);
        let plan = if delay.is_none() {
            plan.coalesce(COALESCE_MAX)
        } else {
            plan
        };
        let body = Body::from_stream(body_stream(StreamState {
            frames: plan.frames.into_iter(),
            delay,
            gate: behavior.gate.as_deref().map(|g| state.gate(g)),
            end: plan.end,
            guard,
            shutdown: state.inner.shutdown.clone(),
            finished: false,
        }));
        let mut resp = Response::new(body);
        let h = resp.headers_mut();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        return resp;
    }

    // Non-streaming: wait the total per-token delay, then answer in one piece.
    if let Some(d) = delay {
        let n = (content.thinking.len() + content.text.len()) as u32;
        tokio::time::sleep(d.saturating_mul(n)).await;
    }
    match content.cut {
        Some((_, Cut::Error)) => {
            guard.finish(Outcome::Failed);
            let status = wire::error_after_status(format);
            error_response(format, status, "mock error (error_after)", None)
        }
        Some((_, cut @ (Cut::Drop | Cut::Stall))) => {
            let end = if cut == Cut::Drop {
                End::Drop
            } else {
                End::Stall
            };
            let body = Body::from_stream(body_stream(StreamState {
                frames: Vec::new().into_iter(),
                delay: None,
                gate: None,
                end,
                guard,
                shutdown: state.inner.shutdown.clone(),
                finished: false,
            }));
            let mut resp = Response::new(body);
            resp.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            resp
        }
        None => {
            guard.finish(Outcome::Completed);
            Json(wire::message(format, &content, &reply)).into_response()
        }
    }
}

// ---------------------------------------------------------------- streaming body

struct StreamState {
    frames: std::vec::IntoIter<Frame>,
    delay: Option<Duration>,
    /// Waited at before the first token (`gate=NAME`), then dropped.
    gate: Option<Arc<Gate>>,
    end: End,
    guard: OutcomeGuard,
    shutdown: CancellationToken,
    finished: bool,
}

fn body_stream(st: StreamState) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send {
    futures_util::stream::unfold(st, |mut st| async move {
        if st.finished {
            return None;
        }
        if let Some(frame) = st.frames.next() {
            if frame.delayed
                && let Some(gate) = st.gate.take()
            {
                gate.waiting.fetch_add(1, Ordering::SeqCst);
                tokio::select! {
                    () = gate.open.cancelled() => {}
                    () = st.shutdown.cancelled() => {}
                }
                gate.waiting.fetch_sub(1, Ordering::SeqCst);
            }
            if frame.delayed
                && let Some(d) = st.delay
            {
                tokio::time::sleep(d).await;
            }
            return Some((Ok(frame.bytes), st));
        }
        st.finished = true;
        match st.end {
            End::Complete => {
                st.guard.finish(Outcome::Completed);
                None
            }
            End::Drop => {
                st.guard.finish(Outcome::Dropped);
                // Let hyper flush what was already produced before aborting.
                tokio::time::sleep(Duration::from_millis(20)).await;
                Some((
                    Err(std::io::Error::other(
                        "mock: connection dropped on purpose (drop_after)",
                    )),
                    st,
                ))
            }
            End::Stall => {
                st.shutdown.cancelled().await;
                Some((Err(std::io::Error::other("mock: server shutting down")), st))
            }
        }
    })
}
