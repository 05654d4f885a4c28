//! Runs a front door's request as a session and follows its run: the events of the run, as
//! [`Out`] items, until its `complete`. Dropping the [`RunHandle`] before then (the caller closed
//! its connection) interrupts the run, which closes the upstream stream.

use super::route::Route;
use super::{Inbound, Stop};
use crate::error::ApiError;
use crate::follower::{Event, Follower, Next, OnLag, Policy};
use crate::service::{self, Actor, GatewayCall, Origin, PromptSpec, RunSpec, SessionSpec};
use crate::state::AppState;
use elfgate_core::{
    ContentBlock, DeltaKind, EngineType, ErrorCode, ErrorInfo, EventEnvelope, EventPayload,
    EventRecord, EventType, HeadStart, ModelFinish, OnBusy, PermissionAnswers, PermissionMode,
    RunId, SessionId,
};
use elfgate_engines::GatewayTurn;
use serde_json::Value;
use std::collections::VecDeque;
use std::fmt::Display;

/// One thing the run produced, in the order it came.
#[derive(Debug, Clone, PartialEq)]
pub enum Out {
    /// Answer text.
    Text(String),
    /// Reasoning text.
    Thinking(String),
    /// The signature of the reasoning (Anthropic), sent by the provider as its reasoning ends.
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
    /// The run failed (its `error` event); nothing follows but the end.
    Error(ErrorInfo),
    /// The run ended.
    End {
        /// Why.
        stop: Stop,
        /// The request's stop sequence the answer ended at, when the provider said which.
        stop_sequence: Option<String>,
        /// Input tokens.
        input_tokens: u64,
        /// Output tokens.
        output_tokens: u64,
        /// What the run cost in US dollars, when its model is priced.
        cost_usd: Option<f64>,
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
                ..
            } => (*stop, *input_tokens, *output_tokens),
            _ => (Stop::End, 0, 0),
        }
    }

    /// What the run cost, if this is the end and its model is priced.
    pub fn cost_usd(&self) -> Option<f64> {
        match self {
            Out::End { cost_usd, .. } => *cost_usd,
            _ => None,
        }
    }

    /// The stop sequence the answer ended at, if this is the end and the provider said which.
    pub fn stop_sequence(&self) -> Option<&str> {
        match self {
            Out::End { stop_sequence, .. } => stop_sequence.as_deref(),
            _ => None,
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
    items: Items,
    guard: InterruptOnDrop,
    // The place taken on the provider's limits, freed with the handle.
    _permit: Option<super::limits::Permit>,
}

impl RunHandle {
    /// The next item; None after the end.
    pub async fn next(&mut self) -> Option<Out> {
        let item = self.items.next().await;
        if matches!(item, Some(Out::End { .. }) | None) {
            self.guard.armed = false;
        }
        item
    }
}

/// Interrupts the request's own run, and only it, when the request ends before the run: other
/// clients' prompts queued on the session behind it were accepted and still run.
struct InterruptOnDrop {
    state: AppState,
    session_id: SessionId,
    run_id: RunId,
    armed: bool,
}

impl Drop for InterruptOnDrop {
    fn drop(&mut self) {
        if self.armed {
            tracing::debug!(session = %self.session_id, run = %self.run_id, "gateway caller left: interrupting its run");
            self.state
                .dispatcher
                .interrupt_run(self.session_id, self.run_id);
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
    /// `x-elfgate-permission-mode`: the run's permission mode (stored with a new session).
    pub permission_mode: Option<PermissionMode>,
}

/// Starts the run of `inbound` on `route` for `actor` (the door's caller) and follows it.
pub async fn start(
    state: &AppState,
    actor: &Actor,
    route: Route,
    inbound: Inbound,
    cont: Continuation,
) -> Result<RunHandle, ApiError> {
    // Every text the request sends is scanned, not only the prompt the session scans.
    super::secrets::check_request(state, &inbound)?;
    // The key's scopes before the caller waits for a place: every provider and model the route
    // may call (an alias's fallbacks too); the session's own checks cover the rest.
    if let Route::Provider {
        provider,
        model,
        fallbacks,
    } = &route
    {
        for (p, m) in
            std::iter::once((provider, model)).chain(fallbacks.iter().map(|(p, m)| (p, m)))
        {
            service::scopes::check_route(actor, p, m)?;
        }
    }
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
                served_search: inbound.served_search,
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
        return Err(ApiError::invalid(
            Some("messages".to_string()),
            "the last user message has no text",
        ));
    }
    let run = RunSpec {
        provider_id: provider,
        model,
        system_prompt: if relay_tools { None } else { engine_system },
        permission_mode: cont.permission_mode,
        // A door's caller cannot answer permission requests: they are asked only while a client
        // follows the session.
        answers: PermissionAnswers::WatchersOnly,
        ..Default::default()
    };
    let call = GatewayCall {
        head_start: prepared,
        project_field: super::PROJECT_HEADER,
        stored_input: inbound.stored_input,
    };
    let hub = state.dispatcher.hub().clone();
    let (session_id, run_id, after) = match cont.session_id {
        None => {
            let spec = SessionSpec {
                engine,
                prompt: inbound.prompt,
                title: None,
                project_path: cont.project_path,
                cli_backend: None,
                agent_id: None,
                run,
                visibility: None,
                owner: None,
            };
            let created =
                service::create_session(state, actor, spec, Origin::Gateway(call)).await?;
            (created.session_id, created.run_id, 0)
        }
        Some(sid) => {
            check_continued(state, actor, sid, engine).await?;
            let after = hub.get(sid).map_or(0, |b| b.last_seq());
            let spec = PromptSpec {
                prompt: inbound.prompt,
                on_busy: OnBusy::Reject,
                parent_id: None,
                run,
            };
            let sent =
                service::send_message(state, actor, sid, spec, Origin::Gateway(call)).await?;
            (sid, sent.run_id, after)
        }
    };
    let tr = Translate {
        run: run_id,
        relay_tools,
        stop: Stop::End,
        stop_sequence: None,
        signed: false,
        input_tokens: 0,
        output_tokens: 0,
        cost_usd: None,
    };
    let items = Items::new(state, session_id, tr, after);
    Ok(RunHandle {
        session_id,
        run_id,
        model: inbound.model,
        items,
        guard: InterruptOnDrop {
            state: state.clone(),
            session_id,
            run_id,
            armed: true,
        },
        _permit: permit,
    })
}

/// That session `sid`, which a request continues, exists, `actor` may see it, and it runs
/// `engine`: else 404 (another principal's session is unknown, as in the API), or 400 naming
/// `model`.
pub async fn check_continued(
    state: &AppState,
    actor: &Actor,
    sid: SessionId,
    engine: EngineType,
) -> Result<(), ApiError> {
    let session = match service::session_view(state, actor, sid).await {
        Ok(view) => view.session,
        Err(ApiError::NotFound(_)) => {
            return Err(ApiError::NotFound(format!(
                "unknown session '{sid}' ({})",
                super::SESSION_HEADER
            )));
        }
        Err(e) => return Err(e),
    };
    if session.engine != engine {
        return Err(ApiError::invalid(
            Some("model".to_string()),
            format!(
                "session '{sid}' runs engine '{}', not '{engine}'",
                session.engine
            ),
        ));
    }
    Ok(())
}

/// Turns the run's events into items.
struct Translate {
    run: RunId,
    relay_tools: bool,
    stop: Stop,
    stop_sequence: Option<String>,
    /// Whether the reasoning's signature was already relayed (from its own delta).
    signed: bool,
    input_tokens: u64,
    output_tokens: u64,
    cost_usd: Option<f64>,
}

impl Translate {
    /// The items of one published event; `true` once the run's `complete` was seen.
    fn record(&mut self, rec: &EventRecord, out: &mut VecDeque<Out>) -> bool {
        // Other runs' events, and the session's own, are skipped.
        rec.run_id == Some(self.run) && self.event(&rec.payload, out)
    }

    /// The items of one followed event; `true` once the run's `complete` was seen.
    fn followed(&mut self, e: &Event, out: &mut VecDeque<Out>) -> bool {
        match e {
            Event::Live(rec) => self.record(rec, out),
            Event::Logged(ev) => {
                RELAYED.contains(&ev.event_type) && self.envelope_json(ev.event_type, &ev.json, out)
            }
            Event::Relayed(f) => f
                .json()
                .is_some_and(|json| self.envelope_json("relayed", json, out)),
        }
    }

    /// The same for an event known by its JSON only (from the log: a follower that fell behind
    /// the bus): the envelope is read back from it.
    fn envelope_json(&mut self, what: impl Display, json: &str, out: &mut VecDeque<Out>) -> bool {
        match serde_json::from_str::<EventEnvelope>(json) {
            Ok(env) => env.run_id == Some(self.run) && self.event(&env.payload, out),
            Err(e) => {
                out.push_back(Out::Error(ErrorInfo::new(
                    ErrorCode::Internal,
                    format!("an unreadable {what} event in the log: {e}"),
                )));
                false
            }
        }
    }

    /// The items of one event of this run.
    fn event(&mut self, payload: &EventPayload, out: &mut VecDeque<Out>) -> bool {
        match payload {
            EventPayload::StreamDelta { delta } => {
                if let Some(sig) = &delta.signature {
                    self.signed = true;
                    out.push_back(Out::Signature(sig.clone()));
                }
                if !delta.text.is_empty() {
                    let text = delta.text.clone();
                    out.push_back(match delta.kind {
                        DeltaKind::Thinking => Out::Thinking(text),
                        DeltaKind::Text => Out::Text(text),
                    });
                }
            }
            EventPayload::AssistantMessage { message } => {
                for block in &message.blocks {
                    match block {
                        ContentBlock::Thinking {
                            signature: Some(sig),
                            ..
                        } if !self.signed => {
                            self.signed = true;
                            out.push_back(Out::Signature(sig.clone()));
                        }
                        ContentBlock::ToolUse { id, name, input } if self.relay_tools => {
                            self.stop = Stop::ToolCalls;
                            out.push_back(Out::ToolCall {
                                id: id.clone(),
                                name: name.clone(),
                                input: input.clone(),
                            });
                        }
                        _ => {}
                    }
                }
            }
            EventPayload::Error { error } => out.push_back(Out::Error(error.clone())),
            // A spent budget: the door answers 429 naming it (the session is paused).
            EventPayload::BudgetPaused { budget } => out.push_back(Out::Error(ErrorInfo::new(
                elfgate_core::ErrorCode::BudgetExceeded,
                budget.to_string(),
            ))),
            EventPayload::Result { stats } => {
                self.input_tokens = stats.usage.input_tokens;
                self.output_tokens = stats.usage.output_tokens;
                self.cost_usd = stats.cost_usd;
                // Cut by a limit: the model's output limit, or a token budget that ended the
                // run before its next call.
                if (stats.model_finish_reason == Some(ModelFinish::MaxTokens)
                    || stats.finish_reason == elfgate_core::FinishReason::BudgetExhausted)
                    && self.stop == Stop::End
                {
                    self.stop = Stop::Length;
                }
                self.stop_sequence.clone_from(&stats.stop_sequence);
            }
            EventPayload::Complete { .. } => {
                out.push_back(Out::End {
                    stop: self.stop,
                    stop_sequence: self.stop_sequence.take(),
                    input_tokens: self.input_tokens,
                    output_tokens: self.output_tokens,
                    cost_usd: self.cost_usd,
                });
                return true;
            }
            _ => {}
        }
        false
    }
}

/// The event types a door relays; the others are skipped unread.
const RELAYED: [EventType; 5] = [
    EventType::StreamDelta,
    EventType::AssistantMessage,
    EventType::Error,
    EventType::Result,
    EventType::Complete,
];

/// Follows the session's events after a seq until the run's `complete`, translated into items.
/// The follower runs in the caller's own task (the answer's body), so that a relayed piece costs
/// no hop between tasks; one that falls behind the bus reads what it missed from the log.
struct Items {
    follower: Option<Follower>,
    tr: Translate,
    pending: VecDeque<Out>,
    done: bool,
}

impl Items {
    fn new(state: &AppState, session_id: SessionId, tr: Translate, after: u64) -> Self {
        let policy = Policy {
            on_lag: OnLag::CatchUp,
            idle: None,
            ends_at_shutdown: false,
        };
        let follower = Follower::on_open_bus(state, session_id, after, policy);
        let mut items = Items {
            done: follower.is_none(),
            follower,
            tr,
            pending: VecDeque::new(),
        };
        if items.done {
            items.pending.push_back(Out::Error(ErrorInfo::new(
                ErrorCode::Internal,
                "the session's events are not available",
            )));
        }
        items
    }

    /// The next item; None after the end.
    async fn next(&mut self) -> Option<Out> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Some(item);
            }
            if self.done {
                return None;
            }
            let follower = self.follower.as_mut()?;
            match follower.next().await {
                Next::Event(e) => self.done = self.tr.followed(&e, &mut self.pending),
                Next::CaughtUp | Next::Idle => {}
                Next::Reset(_) => {
                    self.pending.push_back(Out::Error(ErrorInfo::new(
                        ErrorCode::Internal,
                        "the run's events could not be read back from the session's log",
                    )));
                    self.done = true;
                }
                Next::Closed => {
                    self.pending.push_back(Out::Error(ErrorInfo::new(
                        ErrorCode::Internal,
                        "the session's event stream closed before the run ended",
                    )));
                    self.done = true;
                }
            }
        }
    }
}

/// The whole run, collected (a non-streaming answer): the items before the end, and the end.
pub async fn collect(handle: &mut RunHandle) -> Result<(Vec<Out>, Out), ApiError> {
    let mut items = Vec::new();
    while let Some(item) = handle.next().await {
        match item {
            Out::Error(e) => return Err(ApiError::Upstream(e)),
            end @ Out::End { .. } => return Ok((items, end)),
            other => items.push(other),
        }
    }
    Err(ApiError::Internal("the run ended without an answer".into()))
}
