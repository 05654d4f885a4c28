//! One front door's whole call, the same for every door: read the body, parse it in the door's
//! wire format, route it, run it as a session, and answer in the door's format (one object, or
//! SSE frames as the run goes), errors included. What differs between the doors is the
//! [`GatewayDoor`] each implements (`doors`); the HTTP routes only pick the door.

use super::error::Door;
use super::route::{self, Route};
use super::run::{self, Continuation, Out, RunHandle};
use super::{Inbound, PERMISSION_MODE_HEADER, PROJECT_HEADER, SESSION_HEADER, body};
use crate::error::ApiError;
use crate::service::Actor;
use crate::state::AppState;
use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use elfgate_core::{PermissionMode, RunGrant, SessionId};
use futures_util::StreamExt;
use serde_json::Value;
use std::future::Future;

/// What a door's parsing gives.
pub enum Parsed<R> {
    /// A request to run.
    Run(R),
    /// A call answered without a run (Gemini's `countTokens`).
    Answered(Response),
}

/// A front door of the gateway: its wire format in and out. A value is one call's door, holding
/// what the door keeps between the call's steps.
pub trait GatewayDoor: Send {
    /// The door's request once parsed: the internal form and what only this door reads.
    type Request: DoorRequest;
    /// Writes the run's items in the door's format.
    type Writer: AnswerWriter;
    /// The wire format of the door's errors.
    const ERRORS: Door;

    /// The `model` the path names, if the door's path names one: a run token naming another
    /// one is refused before the body is read. An error when the path names no call.
    fn path_model(&mut self) -> Result<Option<&str>, ApiError> {
        Ok(None)
    }

    /// Parses the wire request.
    fn parse(
        &mut self,
        body: &Value,
        headers: &HeaderMap,
    ) -> Result<Parsed<Self::Request>, ApiError>;

    /// The door's own steps between routing and the run (built-in tools, a previous response):
    /// the call's continuation. By default only what the headers say.
    fn prepare(
        &mut self,
        state: &AppState,
        actor: &Actor,
        grant: Option<&RunGrant>,
        route: &Route,
        request: &mut Self::Request,
        headers: &HeaderMap,
    ) -> impl Future<Output = Result<Continuation, ApiError>> + Send {
        let _ = (state, actor, route, request);
        std::future::ready(continuation(headers, grant))
    }

    /// The internal form the run takes; the door keeps what its answer echoes of the rest.
    fn take_inbound(&mut self, request: Self::Request) -> Inbound {
        request.into_inbound()
    }

    /// Whether the answer is streamed as SSE.
    fn streams(&self, inbound: &Inbound) -> bool {
        inbound.stream
    }

    /// The writer of the answer of the run `handle` follows.
    fn writer(&mut self, state: &AppState, handle: &RunHandle) -> Self::Writer;

    /// The answer as sent, with what the door adds to it (headers).
    fn finish(&self, answer: Response) -> Response {
        answer
    }
}

/// A door's parsed request: the internal form, with what only the door reads around it.
pub trait DoorRequest: Send {
    /// The internal form.
    fn inbound(&mut self) -> &mut Inbound;

    /// The internal form alone.
    fn into_inbound(self) -> Inbound;
}

impl DoorRequest for Inbound {
    fn inbound(&mut self) -> &mut Inbound {
        self
    }

    fn into_inbound(self) -> Inbound {
        self
    }
}

/// The header of a whole (not streamed) answer saying what its run cost in US dollars, when its
/// model is priced.
pub const COST_HEADER: &str = "x-elfgate-cost-usd";

/// Writes one run's items in a door's format.
pub trait AnswerWriter: Send + 'static {
    /// The SSE frames of one item, in the order they came.
    fn frames(&mut self, item: &Out) -> String;

    /// The whole answer of a run that is not streamed: its items before the end, and the end.
    fn answer(&mut self, items: &[Out], end: &Out) -> Value;
}

/// Answers one call at door `door` for `actor` (the caller's principal; the daemon for a CLI's
/// run token, whose run was checked when it started): the generic handler of every gateway route.
pub async fn serve<D: GatewayDoor>(
    mut door: D,
    state: AppState,
    actor: Result<Actor, ApiError>,
    grant: Option<RunGrant>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    let grant = grant.as_ref();
    let answer = async {
        let actor = actor?;
        if let Some(model) = door.path_model()? {
            check_grant(grant, model)?;
        }
        let value = read_body(&state, &headers, bytes)?;
        let mut request = match door.parse(&value, &headers)? {
            Parsed::Run(request) => request,
            Parsed::Answered(answer) => return Ok(answer),
        };
        let model = &request.inbound().model;
        check_grant(grant, model)?;
        let route = route::resolve(&state, model)?;
        let cont = door
            .prepare(&state, &actor, grant, &route, &mut request, &headers)
            .await?;
        let inbound = door.take_inbound(request);
        let streams = door.streams(&inbound);
        let mut handle = run::start(&state, &actor, route, inbound, cont).await?;
        let mut writer = door.writer(&state, &handle);
        if streams {
            let first = first_item(&mut handle).await?;
            return Ok(door.finish(sse(handle, first, writer)));
        }
        let (items, end) = run::collect(&mut handle).await?;
        let body = writer.answer(&items, &end);
        let mut answer = with_session(axum::Json(body).into_response(), handle.session_id);
        // A streamed answer's headers go before its cost is known: only a whole answer has it.
        if let Some(cost) = end.cost_usd()
            && let Ok(v) = HeaderValue::from_str(&cost.to_string())
        {
            answer.headers_mut().insert(COST_HEADER, v);
        }
        // The run is over: its handle goes before what the writer holds until then (the
        // Responses door's `store: false` session, deleted once the run ended).
        drop(handle);
        drop(writer);
        Ok(door.finish(answer))
    };
    answer.await.unwrap_or_else(|e| D::ERRORS.error(&e))
}

fn read_body(
    state: &AppState,
    headers: &HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Value, ApiError> {
    let bytes = bytes.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge(state.config.server.body_limit_bytes)
        } else {
            ApiError::BadRequest(format!("cannot read the body: {r}"))
        }
    })?;
    body::json_object(headers, &bytes)
}

/// What the headers say of the call's session, checked against a run token.
pub fn continuation(
    headers: &HeaderMap,
    grant: Option<&RunGrant>,
) -> Result<Continuation, ApiError> {
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
    let cont = Continuation {
        session_id,
        project_path: text(PROJECT_HEADER)?,
        permission_mode,
    };
    check_grant_session(grant, cont.session_id, SESSION_HEADER)?;
    Ok(cont)
}

/// A CLI's run token (the proxy) names one route: any other `model` is refused.
fn check_grant(grant: Option<&RunGrant>, model: &str) -> Result<(), ApiError> {
    match grant {
        Some(g) if g.route != model => Err(ApiError::Refused(format!(
            "this run token is valid only for model '{}' (run {} of session {})",
            g.route, g.run_id, g.session_id
        ))),
        _ => Ok(()),
    }
}

/// A run token (the proxy) reaches its own session only: another one named by `field` is
/// refused before anything of it is read.
pub fn check_grant_session(
    grant: Option<&RunGrant>,
    session: Option<SessionId>,
    field: &str,
) -> Result<(), ApiError> {
    match (grant, session) {
        (Some(g), Some(sid)) if g.session_id != sid => Err(ApiError::Refused(format!(
            "{field}: this run token reaches only its own session ({}), not session {sid}",
            g.session_id
        ))),
        _ => Ok(()),
    }
}

fn with_session(mut answer: Response, session: SessionId) -> Response {
    if let Ok(v) = HeaderValue::from_str(&session.to_string()) {
        answer.headers_mut().insert(SESSION_HEADER, v);
    }
    answer
}

/// An SSE answer: `first` (already read) then the rest of the run, each item through `writer`.
fn sse(handle: RunHandle, first: Out, mut writer: impl AnswerWriter) -> Response {
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
    let body = stream
        .map(move |item| Ok::<Bytes, std::convert::Infallible>(Bytes::from(writer.frames(&item))));
    let mut answer = Response::new(Body::from_stream(body));
    let h = answer.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    with_session(answer, session)
}

/// The first item, or the error that fails the request before anything was sent.
async fn first_item(handle: &mut RunHandle) -> Result<Out, ApiError> {
    match handle.next().await {
        Some(Out::Error(e)) => Err(ApiError::Upstream(e)),
        Some(item) => Ok(item),
        None => Err(ApiError::Internal("the run ended without an answer".into())),
    }
}
