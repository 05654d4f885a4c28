//! The four front doors as [`GatewayDoor`]s: OpenAI's chat completions and Responses,
//! Anthropic's Messages and the Gemini API. Each says how its wire request is parsed, what it
//! does between routing and the run, and which writer answers; `door::serve` does the rest.

use super::door::{
    AnswerWriter, DoorRequest, GatewayDoor, Parsed, check_grant_session, continuation,
};
use super::error::Door;
use super::route::Route;
use super::run::{Continuation, Out, RunHandle};
use super::{
    Inbound, anthropic_in, anthropic_out, builtin_tools, gemini_in, gemini_out, openai_in,
    openai_out, responses, responses_in, responses_out,
};
use crate::error::ApiError;
use crate::service::Actor;
use crate::state::AppState;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use elfgate_core::RunGrant;
use serde_json::{Value, json};

/// OpenAI's chat completions (`POST /v1/chat/completions`).
#[derive(Default)]
pub struct ChatCompletions {
    /// `stream_options.include_usage`.
    include_usage: bool,
}

impl GatewayDoor for ChatCompletions {
    type Request = Inbound;
    type Writer = openai_out::ChunkWriter;
    const ERRORS: Door = Door::OpenAi;

    fn parse(&mut self, body: &Value, _: &HeaderMap) -> Result<Parsed<Inbound>, ApiError> {
        let (inbound, include_usage) = openai_in::parse(body)?;
        self.include_usage = include_usage;
        Ok(Parsed::Run(inbound))
    }

    fn writer(&mut self, _: &AppState, handle: &RunHandle) -> openai_out::ChunkWriter {
        let id = format!("chatcmpl-{}", handle.run_id);
        let created = chrono::Utc::now().timestamp();
        openai_out::ChunkWriter::new(id, handle.model.clone(), created, self.include_usage)
    }
}

impl AnswerWriter for openai_out::ChunkWriter {
    fn frames(&mut self, item: &Out) -> String {
        openai_out::ChunkWriter::frames(self, item)
    }

    fn answer(&mut self, items: &[Out], end: &Out) -> Value {
        self.completion(items, end)
    }
}

/// Anthropic's Messages (`POST /v1/messages`).
pub struct Messages;

impl GatewayDoor for Messages {
    type Request = Inbound;
    type Writer = anthropic_out::EventWriter;
    const ERRORS: Door = Door::Anthropic;

    fn parse(&mut self, body: &Value, headers: &HeaderMap) -> Result<Parsed<Inbound>, ApiError> {
        let mut inbound = anthropic_in::parse(body)?;
        inbound.request.extended_context = anthropic_in::asks_long_context(headers);
        Ok(Parsed::Run(inbound))
    }

    fn writer(&mut self, _: &AppState, handle: &RunHandle) -> anthropic_out::EventWriter {
        anthropic_out::EventWriter::new(format!("msg_{}", handle.run_id), handle.model.clone())
    }
}

impl AnswerWriter for anthropic_out::EventWriter {
    fn frames(&mut self, item: &Out) -> String {
        anthropic_out::EventWriter::frames(self, item)
    }

    fn answer(&mut self, items: &[Out], end: &Out) -> Value {
        anthropic_out::message_json(&self.id, &self.model, items, end)
    }
}

/// OpenAI's Responses (`POST /v1/responses`): built-in tools against the route,
/// `previous_response_id`, and `store: false`.
#[derive(Default)]
pub struct Responses {
    /// The built-in tools the route left out, named by the answer's header.
    omitted: Vec<String>,
    /// What the answer echoes of the request.
    echo: responses_out::Echo,
}

impl GatewayDoor for Responses {
    type Request = responses_in::ResponsesInbound;
    type Writer = ResponsesWriter;
    const ERRORS: Door = Door::OpenAi;

    fn parse(&mut self, body: &Value, _: &HeaderMap) -> Result<Parsed<Self::Request>, ApiError> {
        responses_in::parse(body).map(Parsed::Run)
    }

    async fn prepare(
        &mut self,
        state: &AppState,
        actor: &Actor,
        grant: Option<&RunGrant>,
        route: &Route,
        r: &mut Self::Request,
        headers: &HeaderMap,
    ) -> Result<Continuation, ApiError> {
        self.omitted = builtin_tools::apply(state, route, r);
        let mut cont = continuation(headers, grant)?;
        check_grant_session(
            grant,
            responses::previous_session(r),
            "previous_response_id",
        )?;
        if let Some(sid) = responses::continue_previous(state, actor, r).await? {
            cont.session_id = Some(sid);
        }
        if !r.store {
            responses::keep_nothing(state, actor, route, &mut cont).await?;
        }
        Ok(cont)
    }

    fn take_inbound(&mut self, r: Self::Request) -> Inbound {
        self.echo = responses_out::Echo {
            model: r.inbound.model.clone(),
            previous_response_id: r.previous_response_id,
            store: r.store,
            include_encrypted_reasoning: r.include_encrypted_reasoning,
        };
        r.inbound
    }

    fn writer(&mut self, state: &AppState, handle: &RunHandle) -> ResponsesWriter {
        // The session is the call's own here (keep_nothing saw to it).
        let cleanup = (!self.echo.store).then(|| responses::DeleteWhenDone {
            state: state.clone(),
            session_id: handle.session_id,
        });
        let id = responses::response_id(handle.session_id, handle.run_id);
        ResponsesWriter {
            builder: responses_out::ResponseBuilder::new(id, std::mem::take(&mut self.echo)),
            _cleanup: cleanup,
        }
    }

    fn finish(&self, answer: Response) -> Response {
        builtin_tools::with_notice(answer, &self.omitted)
    }
}

/// The Responses door's writer, holding a `store: false` call's session until the answer ends.
pub struct ResponsesWriter {
    builder: responses_out::ResponseBuilder,
    _cleanup: Option<responses::DeleteWhenDone>,
}

impl AnswerWriter for ResponsesWriter {
    fn frames(&mut self, item: &Out) -> String {
        self.builder.frames(item)
    }

    fn answer(&mut self, items: &[Out], end: &Out) -> Value {
        for item in items.iter().chain(std::iter::once(end)) {
            self.builder.frames(item);
        }
        self.builder.response()
    }
}

/// The Gemini API (`POST /v1beta/models/{model}:{method}`): `generateContent`,
/// `streamGenerateContent` (`?alt=sse`: SSE; without it one JSON array) and `countTokens`.
pub struct Gemini {
    /// The path's `MODEL:METHOD`.
    call: String,
    /// `?alt=sse`.
    sse_wanted: bool,
    /// The model the path names.
    model: String,
    /// Whether the method streams.
    stream: bool,
}

impl Gemini {
    /// The door of the call `MODEL:METHOD` with the query `query`.
    pub fn new(call: String, query: Option<&str>) -> Self {
        let sse_wanted = query.is_some_and(|q| q.split('&').any(|kv| kv == "alt=sse"));
        Gemini {
            call,
            sse_wanted,
            model: String::new(),
            stream: false,
        }
    }
}

impl GatewayDoor for Gemini {
    type Request = gemini_in::GeminiInbound;
    type Writer = GeminiWriter;
    const ERRORS: Door = Door::Gemini;

    fn path_model(&mut self) -> Result<Option<&str>, ApiError> {
        let (model, _) = self.call.rsplit_once(':').ok_or_else(|| {
            ApiError::NotFound(format!(
                "'{}' names no method (MODEL:generateContent, :streamGenerateContent, \
                 :countTokens)",
                self.call
            ))
        })?;
        self.model = model.strip_prefix("models/").unwrap_or(model).to_string();
        Ok(Some(&self.model))
    }

    fn parse(&mut self, body: &Value, _: &HeaderMap) -> Result<Parsed<Self::Request>, ApiError> {
        let method = self.call.rsplit_once(':').map_or("", |(_, m)| m);
        self.stream = match method {
            "generateContent" => false,
            "streamGenerateContent" => true,
            "countTokens" => return Ok(Parsed::Answered(count_tokens(body))),
            other => {
                return Err(ApiError::NotFound(format!(
                    "unknown method '{other}' (generateContent, streamGenerateContent, \
                     countTokens)"
                )));
            }
        };
        gemini_in::parse(&self.model, body, self.stream).map(Parsed::Run)
    }

    async fn prepare(
        &mut self,
        state: &AppState,
        _: &Actor,
        grant: Option<&RunGrant>,
        route: &Route,
        g: &mut Self::Request,
        headers: &HeaderMap,
    ) -> Result<Continuation, ApiError> {
        builtin_tools_of_gemini(state, route, g)?;
        continuation(headers, grant)
    }

    fn streams(&self, inbound: &Inbound) -> bool {
        inbound.stream && self.sse_wanted
    }

    fn writer(&mut self, _: &AppState, handle: &RunHandle) -> GeminiWriter {
        let model = std::mem::take(&mut self.model);
        GeminiWriter {
            builder: gemini_out::GeminiBuilder::new(handle.run_id.to_string(), model),
            stream: self.stream,
        }
    }
}

impl DoorRequest for responses_in::ResponsesInbound {
    fn inbound(&mut self) -> &mut Inbound {
        &mut self.inbound
    }

    fn into_inbound(self) -> Inbound {
        self.inbound
    }
}

impl DoorRequest for gemini_in::GeminiInbound {
    fn inbound(&mut self) -> &mut Inbound {
        &mut self.inbound
    }

    fn into_inbound(self) -> Inbound {
        self.inbound
    }
}

/// The Gemini door's writer.
pub struct GeminiWriter {
    builder: gemini_out::GeminiBuilder,
    /// Whether the call asked for a stream (answered as one JSON array without `alt=sse`).
    stream: bool,
}

impl AnswerWriter for GeminiWriter {
    fn frames(&mut self, item: &Out) -> String {
        self.builder.frames(item)
    }

    fn answer(&mut self, items: &[Out], end: &Out) -> Value {
        for item in items.iter().chain(std::iter::once(end)) {
            self.builder.frames(item);
        }
        // Without alt=sse a stream is one JSON array of responses: here, the whole answer.
        if self.stream {
            json!([self.builder.response()])
        } else {
            self.builder.response()
        }
    }
}

/// `web_search`'s Gemini names become the provider's native search where its kind has one;
/// other built-in tools (`codeExecution`, `urlContext`, …) are refused, naming them.
fn builtin_tools_of_gemini(
    state: &AppState,
    route: &Route,
    g: &mut gemini_in::GeminiInbound,
) -> Result<(), ApiError> {
    for t in &g.builtin_tools {
        let kind = match route {
            Route::Provider { provider, .. } => state
                .providers
                .resolve(Some(provider))
                .ok()
                .map(|(_, p)| p.kind()),
            Route::Engine { .. } => None,
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
fn count_tokens(body: &Value) -> Response {
    let request = body.get("generateContentRequest").unwrap_or(body);
    let mut bytes = 0usize;
    let mut add = |v: &Value| {
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
