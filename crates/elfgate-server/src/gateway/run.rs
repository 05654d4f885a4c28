//! Runs a front door's request as a session and follows its run: the events of the run, as
//! [`Out`] items, until its `complete`. Dropping the [`RunHandle`] before then (the caller closed
//! its connection) interrupts the run, which closes the upstream stream.

use super::error::GatewayError;
use super::route::Route;
use super::{Inbound, Stop};
use crate::service::{self, CreateSessionRequest, RunOverrides, SendMessageRequest};
use crate::state::AppState;
use elfgate_core::{EngineType, HeadStart, OnBusy, RunId, SessionId};
use elfgate_engines::{GatewayTurn, LENGTH_NOTE};
use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;

/// One thing the run produced, in the order it came.
#[derive(Debug, Clone, PartialEq)]
pub enum Out {
    /// Answer text.
    Text(String),
    /// Reasoning text.
    Thinking(String),
    /// The signature of the reasoning (Anthropic), known at the answer's end.
    Signature(String),
    /// A tool call for the caller to run (provider routes only: an engine runs its own).
    ToolCall {
        /// The call id.
        id: String,
        /// The tool.
        name: String,
        /// Its arguments.
        input: Value,
    },
    /// The run failed; nothing follows but the end.
    Error {
        /// The `error` event's code.
        code: String,
        /// Its message.
        message: String,
    },
    /// The run ended.
    End {
        /// Why.
        stop: Stop,
        /// Input tokens.
        input_tokens: u64,
        /// Output tokens.
        output_tokens: u64,
    },
}

impl Out {
    /// Why it ended and the tokens used, if this is the end.
    pub fn end_parts(&self) -> (Stop, u64, u64) {
        match self {
            Out::End {
                stop,
                input_tokens,
                output_tokens,
            } => (*stop, *input_tokens, *output_tokens),
            _ => (Stop::End, 0, 0),
        }
    }
}

/// Where a request's run is going, and its items.
pub struct RunHandle {
    /// The session.
    pub session_id: SessionId,
    /// The run.
    pub run_id: RunId,
    /// The model the caller named, echoed in answers.
    pub model: String,
    items: mpsc::Receiver<Out>,
    guard: InterruptOnDrop,
    // The place taken on the provider's limits, freed with the handle.
    _permit: Option<super::limits::Permit>,
}

impl RunHandle {
    /// The next item; None after the end.
    pub async fn next(&mut self) -> Option<Out> {
        let item = self.items.recv().await;
        if matches!(item, Some(Out::End { .. }) | None) {
            self.guard.armed = false;
        }
        item
    }
}

struct InterruptOnDrop {
    state: AppState,
    session_id: SessionId,
    armed: bool,
}

impl Drop for InterruptOnDrop {
    fn drop(&mut self) {
        if self.armed {
            tracing::debug!(session = %self.session_id, "gateway caller left: interrupting its run");
            self.state.dispatcher.interrupt(self.session_id);
        }
    }
}

/// What the caller sent besides its body.
#[derive(Debug, Default, Clone)]
pub struct Continuation {
    /// `x-elfgate-session-id`: continue this session.
    pub session_id: Option<SessionId>,
    /// `x-elfgate-project-path`: the session's project directory.
    pub project_path: Option<String>,
}

/// Starts the run of `inbound` on `route` and follows it.
pub async fn start(
    state: &AppState,
    route: Route,
    inbound: Inbound,
    cont: Continuation,
) -> Result<RunHandle, GatewayError> {
    // Waits (in order) for a place on the route's provider, before anything is stored.
    let permit = match route.provider() {
        Some(p) => state.gateway_limits.acquire(p).await?,
        None => None,
    };
    // An engine route keeps the caller's system prompt as the session's; a provider route sends
    // it with the whole request.
    let engine_system = inbound.request.system.clone();
    let (engine, provider, model, prepared, relay_tools) = match route {
        Route::Provider {
            provider,
            model,
            fallbacks,
        } => {
            let turn = GatewayTurn {
                request: inbound.request,
                fallbacks,
            };
            (
                EngineType::Chat,
                Some(provider),
                Some(model),
                Some(HeadStart::new(turn)),
                true,
            )
        }
        Route::Engine {
            engine,
            provider,
            model,
        } => (engine, provider, model, None, false),
    };
    if inbound.prompt.trim().is_empty() {
        return Err(GatewayError::invalid(
            Some("messages".to_string()),
            "the last user message has no text",
        ));
    }
    let overrides = RunOverrides {
        provider_id: provider,
        model,
        system_prompt: if relay_tools { None } else { engine_system },
        ..Default::default()
    };
    let hub = state.dispatcher.hub().clone();
    let (session_id, run_id, after) = match cont.session_id {
        None => {
            let created = service::create_session_with(
                state,
                CreateSessionRequest {
                    engine: engine.as_str().to_string(),
                    prompt: inbound.prompt,
                    title: None,
                    project_path: cont.project_path,
                    cli_backend: None,
                    agent_id: None,
                    mcp_config: None,
                    overrides,
                },
                prepared,
            )
            .await?;
            (created.session_id, created.run_id, 0)
        }
        Some(sid) => {
            let session = state
                .store
                .get_session(sid)
                .await
                .map_err(crate::error::ApiError::from)?
                .ok_or_else(|| {
                    GatewayError::from_status(
                        axum::http::StatusCode::NOT_FOUND,
                        format!("unknown session '{sid}' (x-elfgate-session-id)"),
                    )
                })?;
            if session.engine != engine {
                return Err(GatewayError::invalid(
                    Some("model".to_string()),
                    format!(
                        "session '{sid}' runs engine '{}', not '{engine}'",
                        session.engine
                    ),
                ));
            }
            let after = hub.get(sid).map_or(0, |b| b.last_seq());
            let sent = service::send_message_with(
                state,
                sid,
                SendMessageRequest {
                    prompt: inbound.prompt,
                    on_busy: OnBusy::Reject,
                    parent_id: None,
                    overrides,
                },
                prepared,
            )
            .await?;
            (sid, sent.run_id, after)
        }
    };
    let (tx, items) = mpsc::channel(64);
    let follower_state = state.clone();
    tokio::spawn(async move {
        follow(&follower_state, session_id, run_id, after, relay_tools, tx).await;
    });
    Ok(RunHandle {
        session_id,
        run_id,
        model: inbound.model,
        items,
        guard: InterruptOnDrop {
            state: state.clone(),
            session_id,
            armed: true,
        },
        _permit: permit,
    })
}

/// Turns the run's events into items.
struct Translate {
    run: String,
    relay_tools: bool,
    stop: Stop,
    input_tokens: u64,
    output_tokens: u64,
}

impl Translate {
    /// The items of one event envelope; `true` once the run's `complete` was seen.
    fn event(&mut self, env: &Value, out: &mut Vec<Out>) -> bool {
        if env["runId"].as_str() != Some(self.run.as_str()) {
            return false;
        }
        match env["type"].as_str().unwrap_or_default() {
            "streamDelta" => {
                let text = env["delta"]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                match env["delta"]["kind"].as_str() {
                    Some("thinking") => out.push(Out::Thinking(text)),
                    _ => out.push(Out::Text(text)),
                }
            }
            "assistantMessage" => {
                for b in env["message"]["blocks"].as_array().into_iter().flatten() {
                    match b["type"].as_str() {
                        Some("thinking") => {
                            if let Some(sig) = b["signature"].as_str() {
                                out.push(Out::Signature(sig.to_string()));
                            }
                        }
                        Some("tool_use") if self.relay_tools => {
                            self.stop = Stop::ToolCalls;
                            out.push(Out::ToolCall {
                                id: b["id"].as_str().unwrap_or_default().to_string(),
                                name: b["name"].as_str().unwrap_or_default().to_string(),
                                input: b["input"].clone(),
                            });
                        }
                        _ => {}
                    }
                }
            }
            "processing"
                if env["message"].as_str() == Some(LENGTH_NOTE) && self.stop == Stop::End =>
            {
                self.stop = Stop::Length;
            }
            "error" => out.push(Out::Error {
                code: env["error"]["code"].as_str().unwrap_or("error").to_string(),
                message: env["error"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            }),
            "result" => {
                self.input_tokens = env["stats"]["inputTokens"].as_u64().unwrap_or(0);
                self.output_tokens = env["stats"]["outputTokens"].as_u64().unwrap_or(0);
            }
            "complete" => {
                out.push(Out::End {
                    stop: self.stop,
                    input_tokens: self.input_tokens,
                    output_tokens: self.output_tokens,
                });
                return true;
            }
            _ => {}
        }
        false
    }
}

/// Follows the session's events after `after` until the run's `complete`: live from the bus,
/// from the log for what the bus no longer holds (a subscriber that fell behind).
async fn follow(
    state: &AppState,
    session_id: SessionId,
    run_id: RunId,
    after: u64,
    relay_tools: bool,
    tx: mpsc::Sender<Out>,
) {
    let mut tr = Translate {
        run: run_id.to_string(),
        relay_tools,
        stop: Stop::End,
        input_tokens: 0,
        output_tokens: 0,
    };
    let hub = state.dispatcher.hub().clone();
    let Some(sub) = hub.subscribe_after(session_id, after) else {
        let _ = tx
            .send(Out::Error {
                code: "internal".into(),
                message: "the session's events are not available".into(),
            })
            .await;
        return;
    };
    let mut live = sub.live;
    let mut last = after;
    let mut out = Vec::new();
    let mut done = match sub.recent {
        Some(recent) => {
            let mut done = false;
            for rec in recent {
                last = rec.seq;
                if let Ok(env) = serde_json::from_str::<Value>(&rec.json) {
                    done |= tr.event(&env, &mut out);
                }
            }
            done
        }
        None => catch_up(state, session_id, &mut last, &mut tr, &mut out).await,
    };
    loop {
        for item in out.drain(..) {
            if tx.send(item).await.is_err() {
                return;
            }
        }
        if done {
            return;
        }
        match live.recv().await {
            Ok(rec) if rec.seq > last => {
                last = rec.seq;
                if let Ok(env) = serde_json::from_str::<Value>(&rec.json) {
                    done = tr.event(&env, &mut out);
                }
            }
            Ok(_) => {}
            Err(RecvError::Lagged(_)) => {
                done = catch_up(state, session_id, &mut last, &mut tr, &mut out).await;
            }
            Err(RecvError::Closed) => {
                let _ = tx
                    .send(Out::Error {
                        code: "internal".into(),
                        message: "the session's event stream closed before the run ended".into(),
                    })
                    .await;
                return;
            }
        }
    }
}

/// Reads the log after `last` (flushed first) into items.
async fn catch_up(
    state: &AppState,
    session_id: SessionId,
    last: &mut u64,
    tr: &mut Translate,
    out: &mut Vec<Out>,
) -> bool {
    state.dispatcher.hub().flush().await;
    loop {
        let Ok(page) = state.store.events_after(session_id, *last, 500).await else {
            return false;
        };
        if page.is_empty() {
            return false;
        }
        for ev in page {
            *last = ev.seq;
            if let Ok(env) = serde_json::from_str::<Value>(&ev.json)
                && tr.event(&env, out)
            {
                return true;
            }
        }
    }
}

/// The whole run, collected (a non-streaming answer): the items before the end, and the end.
pub async fn collect(handle: &mut RunHandle) -> Result<(Vec<Out>, Out), GatewayError> {
    let mut items = Vec::new();
    while let Some(item) = handle.next().await {
        match item {
            Out::Error { code, message } => return Err(GatewayError::upstream(&code, message)),
            end @ Out::End { .. } => return Ok((items, end)),
            other => items.push(other),
        }
    }
    Err(GatewayError::from_status(
        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
        "the run ended without an answer".into(),
    ))
}
