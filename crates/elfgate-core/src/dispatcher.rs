//! The engine dispatcher: the registry of engines and the supervisor of runs.
//!
//! The dispatcher, not the engines, ends every run: it records the outcome, publishes `result` and then
//! exactly one `complete`, and frees the session (or starts the next queued run) in the same step as
//! publishing `complete`, so that a new run's events always come after it.

use crate::active::{ActiveSessions, Admission, Interrupted, OnBusy};
use crate::bus::EventHub;
use crate::engine::{Engine, EngineInfo, EngineSessionContext};
use crate::engine_type::EngineType;
use crate::error_code::ErrorCode;
use crate::event::{ErrorInfo, EventPayload, RunStats};
use crate::ids::{RunId, SessionId};
use crate::metrics::Metrics;
use crate::model::{FinishReason, Message};
use crate::outcome::RunOutcome;
use crate::recorder::RunRecorder;
pub use crate::recorder::{LedgerError, RunLedger};
use crate::sync::{read, write};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// How long a session's bus stays open after its last run when nobody follows it.
pub const IDLE_BUS_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Why a run could not be dispatched.
#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    /// No engine of that type is registered.
    #[error("engine '{0}' is not available")]
    UnknownEngine(EngineType),
    /// The daemon is shutting down and takes no new runs.
    #[error("the daemon is shutting down")]
    ShuttingDown,
    /// The session is running and the prompt was not allowed to wait.
    #[error("session is busy with run {active_run_id}")]
    Busy {
        /// The run going on.
        active_run_id: RunId,
    },
    /// The session is running and as many prompts as allowed already wait behind it.
    #[error("{max_queued} prompts already wait for this session")]
    QueueFull {
        /// How many prompts may wait.
        max_queued: usize,
    },
}

/// What became of a dispatched run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DispatchStatus {
    /// It runs now.
    Started,
    /// It waits behind the current run.
    Queued,
}

impl From<DispatchStatus> for crate::RunStatus {
    fn from(s: DispatchStatus) -> Self {
        match s {
            DispatchStatus::Started => crate::RunStatus::Running,
            DispatchStatus::Queued => crate::RunStatus::Queued,
        }
    }
}

/// The result of an interrupt request.
#[derive(Debug, Clone)]
pub struct InterruptResult {
    /// The run that was stopped, if one was going on.
    pub run_id: Option<RunId>,
    /// Fired when it has ended.
    pub done: Option<CancellationToken>,
}

/// The registry of engines and the supervisor of their runs.
pub struct EngineDispatcher {
    engines: RwLock<HashMap<EngineType, Arc<dyn Engine>>>,
    active: ActiveSessions,
    hub: EventHub,
    ledger: Arc<dyn RunLedger>,
    metrics: Arc<Metrics>,
    accepting: std::sync::atomic::AtomicBool,
    /// The finish reason of runs the daemon's stop interrupts, when not `interrupted` (a fleet
    /// node's drain ends what is left as `node_shutdown`).
    stop_reason: std::sync::OnceLock<FinishReason>,
    /// Where each run's end is told, once its `complete` is out (see [`RunEnded`]).
    run_ends: std::sync::OnceLock<tokio::sync::mpsc::Sender<RunEnded>>,
}

/// A run that ended, as told to what watches run ends (workflows triggered by them): after its
/// `complete`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunEnded {
    /// Its session.
    pub session_id: SessionId,
    /// The run.
    pub run_id: RunId,
    /// The session's engine.
    pub engine: EngineType,
    /// How it ended.
    pub finish_reason: FinishReason,
    /// Its tokens.
    pub usage: crate::TokenUsage,
    /// The error that ended it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
    /// The session's `notifyUrl`, told of the end too.
    #[serde(skip)]
    pub notify_url: Option<String>,
}

/// How many ended runs may wait for their watcher before more are dropped (with a warning).
const RUN_ENDS_QUEUE: usize = 1024;

impl std::fmt::Debug for EngineDispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineDispatcher")
            .field("active", &self.active.len())
            .finish()
    }
}

impl EngineDispatcher {
    /// A dispatcher with no engines.
    pub fn new(
        active: ActiveSessions,
        hub: EventHub,
        ledger: Arc<dyn RunLedger>,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        Arc::new(EngineDispatcher {
            engines: RwLock::new(HashMap::new()),
            active,
            hub,
            ledger,
            metrics,
            accepting: std::sync::atomic::AtomicBool::new(true),
            stop_reason: std::sync::OnceLock::new(),
            run_ends: std::sync::OnceLock::new(),
        })
    }

    /// The ends of runs from now on, for one watcher (None: one already watches).
    pub fn watch_run_ends(&self) -> Option<tokio::sync::mpsc::Receiver<RunEnded>> {
        let (tx, rx) = tokio::sync::mpsc::channel(RUN_ENDS_QUEUE);
        self.run_ends.set(tx).ok().map(|()| rx)
    }

    /// Adds (or replaces) an engine.
    pub fn register_engine(&self, engine: Arc<dyn Engine>) {
        let mut map = write(&self.engines);
        map.insert(engine.engine_type(), engine);
    }

    /// Has every engine let go of what it keeps for a deleted session.
    pub async fn forget_session(&self, session_id: SessionId) {
        let engines: Vec<Arc<dyn Engine>> = read(&self.engines).values().cloned().collect();
        for engine in engines {
            engine.forget_session(session_id).await;
        }
    }

    /// The engine of a type.
    pub fn get_engine(&self, engine: EngineType) -> Option<Arc<dyn Engine>> {
        let map = read(&self.engines);
        map.get(&engine).cloned()
    }

    /// Whether an engine of that type is registered.
    pub fn has_engine(&self, engine: EngineType) -> bool {
        self.get_engine(engine).is_some()
    }

    /// The active-run map.
    pub fn active(&self) -> &ActiveSessions {
        &self.active
    }

    /// The event hub.
    pub fn hub(&self) -> &EventHub {
        &self.hub
    }

    /// The recorder of a run stored as `queued`, for its context.
    pub fn recorder(&self, session_id: SessionId, run_id: RunId) -> Arc<RunRecorder> {
        RunRecorder::new(self.ledger.clone(), session_id, run_id)
    }

    /// The recorder of a session's first run, stored as running with the session and `user`.
    pub fn first_run_recorder(
        &self,
        session_id: SessionId,
        run_id: RunId,
        user: Message,
    ) -> Arc<RunRecorder> {
        RunRecorder::stored_with_session(self.ledger.clone(), session_id, run_id, user)
    }

    /// Starts, queues or refuses a run of a session, as `on_busy` says when the session is busy.
    /// The first run and later ones differ only in `ctx.is_resume`, which the engine reads.
    pub fn dispatch(
        self: &Arc<Self>,
        ctx: EngineSessionContext,
        on_busy: OnBusy,
    ) -> Result<DispatchStatus, DispatchError> {
        let engine_type = ctx.session.engine;
        let engine = self
            .get_engine(engine_type)
            .ok_or(DispatchError::UnknownEngine(engine_type))?;
        if !self.accepting.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(DispatchError::ShuttingDown);
        }
        let cancel = ctx.cancel.clone();
        let admission = self.active.admit(ctx.clone(), engine_type, on_busy);
        // Shutdown may have walked the map between the check above and the admission: a run
        // admitted then ends at once instead of outliving the shutdown.
        if !self.accepting.load(std::sync::atomic::Ordering::SeqCst) {
            cancel.cancel();
        }
        match admission {
            Admission::Start { done } => {
                let this = self.clone();
                tokio::spawn(async move { this.supervise(engine, ctx, done).await });
                Ok(DispatchStatus::Started)
            }
            Admission::Queued => Ok(DispatchStatus::Queued),
            Admission::Busy { active_run_id } => Err(DispatchError::Busy { active_run_id }),
            Admission::QueueFull { max_queued } => Err(DispatchError::QueueFull { max_queued }),
        }
    }

    /// Interrupts the session's run and every run queued behind it. Idempotent: an idle session
    /// gives no run.
    pub fn interrupt(self: &Arc<Self>, session_id: SessionId) -> InterruptResult {
        let engine_extra = {
            let map = read(&self.engines);
            map.values().any(|e| e.interrupt(session_id))
        };
        match self.active.interrupt(session_id) {
            Some(Interrupted { run_id, done }) => InterruptResult {
                run_id: Some(run_id),
                done: Some(done),
            },
            None => {
                if engine_extra {
                    tracing::debug!(%session_id, "engine held state of an idle session");
                }
                InterruptResult {
                    run_id: None,
                    done: None,
                }
            }
        }
    }

    /// Interrupts one run of a session (running or queued) and leaves the others alone: the runs
    /// queued behind it still run. Idempotent: a run that has ended gives None.
    pub fn interrupt_run(&self, session_id: SessionId, run_id: RunId) -> InterruptResult {
        match self.active.interrupt_run(session_id, run_id) {
            Some(Interrupted { run_id, done }) => InterruptResult {
                run_id: Some(run_id),
                done: Some(done),
            },
            None => InterruptResult {
                run_id: None,
                done: None,
            },
        }
    }

    /// Takes no new runs from now on; those running go on (a fleet node's drain).
    pub fn stop_admitting(&self) {
        self.accepting
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// [`Self::interrupt_all`], the runs ending with `reason` instead of `interrupted`.
    pub fn interrupt_all_as(self: &Arc<Self>, reason: FinishReason) -> Vec<CancellationToken> {
        let _ = self.stop_reason.set(reason);
        self.interrupt_all()
    }

    /// Stops taking runs and interrupts every run (shutdown); returns the tokens that fire when
    /// each running run has ended. Queued runs end right after, without running.
    pub fn interrupt_all(self: &Arc<Self>) -> Vec<CancellationToken> {
        self.accepting
            .store(false, std::sync::atomic::Ordering::SeqCst);
        self.active
            .interrupt_all()
            .into_iter()
            .map(|i| i.done)
            .collect()
    }

    /// Reloads MCP tools in every engine; returns how many sessions were reloaded.
    pub async fn reload_mcp_for_all_active(&self) -> usize {
        let engines: Vec<Arc<dyn Engine>> = {
            let map = read(&self.engines);
            map.values().cloned().collect()
        };
        let mut n = 0;
        for e in engines {
            n += e.reload_mcp_for_all_active().await;
        }
        n
    }

    /// What each registered engine is and how busy it is.
    pub fn engine_infos(&self) -> Vec<EngineInfo> {
        let engines: Vec<Arc<dyn Engine>> = {
            let map = read(&self.engines);
            map.values().cloned().collect()
        };
        let mut infos: Vec<EngineInfo> = engines
            .iter()
            .map(|e| EngineInfo {
                engine_type: e.engine_type(),
                description: e.description().to_string(),
                capabilities: e
                    .capabilities()
                    .iter()
                    .map(std::string::ToString::to_string)
                    .collect(),
                active_sessions: self.active.count_engine(e.engine_type()),
                backends: e.backends(),
            })
            .collect();
        infos.sort_by_key(|i| i.engine_type.as_str());
        infos
    }

    /// Runs `ctx` and every run queued behind it, one after the other.
    async fn supervise(
        self: Arc<Self>,
        engine: Arc<dyn Engine>,
        mut ctx: EngineSessionContext,
        mut done: CancellationToken,
    ) {
        loop {
            let session_id = ctx.session_id();
            let run_id = ctx.run_id;
            // Every log line about the run, the engine's included, carries its ids (and, when
            // runs are traced, its trace's: the `invoke_agent` span's ids).
            // The `otel.*` fields make it the trace's `invoke_agent` span when runs are traced.
            let span = tracing::info_span!(
                "run",
                %session_id,
                %run_id,
                trace_id = tracing::field::Empty,
                span_id = tracing::field::Empty,
                otel.name = tracing::field::Empty,
                otel.kind = tracing::field::Empty,
            );
            crate::telemetry::start_run(&span, &ctx);
            let next = async {
                let started = Instant::now();
                let log_failures = self.hub.log_failed_writes();
                // A queued run cancelled before its turn ends without running.
                let mut outcome = if ctx.cancel.is_cancelled() {
                    RunOutcome::new(FinishReason::Interrupted)
                } else {
                    self.run_one(engine.clone(), ctx.clone()).await
                };
                if outcome.finish_reason == FinishReason::Interrupted
                    && let Some(reason) = self.stop_reason.get()
                {
                    outcome.finish_reason = *reason;
                }
                let outcome = self.record_end(&ctx, outcome, started, log_failures).await;
                crate::telemetry::record_end(&span, &outcome);
                let (_, next) = ctx
                    .events
                    .bus()
                    .publish_then(
                        Some(run_id),
                        EventPayload::Complete {
                            finish_reason: outcome.finish_reason,
                        },
                        || self.active.finish(session_id, run_id),
                    )
                    .await;
                // A run whose lease another node took over was ended there (`node_lost`), and
                // told there: this node's end of it is no end anyone hears of.
                if !ctx.events.bus().lease().is_lost()
                    && let Some(tx) = self.run_ends.get()
                {
                    let ended = RunEnded {
                        session_id,
                        run_id,
                        engine: ctx.session.engine,
                        finish_reason: outcome.finish_reason,
                        usage: outcome.usage,
                        error: outcome.error.clone(),
                        notify_url: ctx.engine_config.notify_url.clone(),
                    };
                    match tx.try_send(ended) {
                        Ok(()) => {}
                        Err(tokio::sync::mpsc::error::TrySendError::Full(_)) => {
                            tracing::warn!(
                                "a run's end was not told to its watcher (its queue is full)"
                            );
                        }
                        // The watcher stopped with the daemon: nothing is waiting to be told.
                        Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => {}
                    }
                }
                next
            }
            .instrument(span.clone())
            .await;
            done.cancel();
            match next {
                Some((next_ctx, next_done)) => {
                    done = next_done;
                    ctx = next_ctx;
                }
                None => {
                    // The context holds the bus: let it go so that the bus can close.
                    drop(ctx);
                    // Kept a moment after the run: a client that connects right after a short
                    // run (the usual POST-then-GET) is served from memory, instead of the session
                    // being reopened from the log with a new seq reservation.
                    let active = self.active.clone();
                    let hub = self.hub.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(IDLE_BUS_GRACE).await;
                        hub.close_if_idle(session_id, || active.contains(session_id));
                    });
                    return;
                }
            }
        }
    }

    /// Runs one engine call in its own task so that a panic becomes an error outcome.
    async fn run_one(&self, engine: Arc<dyn Engine>, ctx: EngineSessionContext) -> RunOutcome {
        self.metrics.run_started();
        let events = ctx.events.clone();
        let recorder = ctx.recorder.clone();
        let task = tokio::spawn(async move { engine.run_prompt(ctx).await }.in_current_span());
        // Marking the run as running does not hold up the engine; it is done before the end is
        // recorded, so the two writes stay in order.
        let mark = async {
            if let Err(e) = recorder.mark_running().await {
                tracing::warn!(error = %e, "could not mark run as running");
            }
        };
        let ((), joined) = tokio::join!(mark, task);
        match joined {
            Ok(outcome) => outcome,
            Err(join) => {
                let error =
                    ErrorInfo::new(ErrorCode::EnginePanic, format!("the engine failed: {join}"));
                events
                    .emit(EventPayload::Error {
                        error: error.clone(),
                    })
                    .await;
                RunOutcome::failed(error)
            }
        }
    }

    /// Stores the outcome with the run's closing message, announces the message, publishes
    /// `result`, and returns the outcome as reported.
    ///
    /// A run during which the event log could not be written (`log_failures`, the count when it
    /// started, has grown) ends with an `error {code: storage}` and, if it would have stopped
    /// normally, the finish reason `error`: its events were kept and are written once the store
    /// can write again, but they were not durable when it ended.
    ///
    /// If the commit of the end fails, the message is not announced yet: an `error {code:
    /// storage}` says so and a run that would have stopped normally ends with `error`. A failure
    /// that may pass (a full disk, a busy database) is retried until the end, with the message,
    /// is stored, so that the run is neither left `running` nor loses its answer; meanwhile the
    /// session stays busy (its queued prompts wait) and `complete` waits with it. Only shutdown
    /// stops the retries: the restart then ends the run. A refusal of the write itself stores the
    /// end again without the message.
    async fn record_end(
        &self,
        ctx: &EngineSessionContext,
        mut outcome: RunOutcome,
        started: Instant,
        log_failures: u64,
    ) -> RunOutcome {
        if self.hub.log_failed_writes() != log_failures {
            let error = ErrorInfo::new(
                ErrorCode::Storage,
                "the event log could not be written during this run; its events are kept in order \
                 and written once the store can write again",
            );
            self.fail_storage(ctx, &mut outcome, error).await;
        }
        outcome.model_calls = ctx.recorder.take_model_calls();
        if outcome.cost_usd.is_none() {
            outcome.cost_usd = crate::spend::calls_cost(&outcome.model_calls);
        }
        let answer = outcome.answer.take();
        let stored = match ctx.recorder.finish(&outcome, answer.as_ref()).await {
            Ok(()) => answer,
            Err(e) => {
                tracing::warn!(error = %e, "could not store a run's end");
                let what = if answer.is_some() {
                    "the answer could not be stored"
                } else {
                    "the run's end could not be stored"
                };
                let transient = e.is_transient();
                let error = ErrorInfo::new(ErrorCode::Storage, format!("{what}: {}", e.0));
                self.fail_storage(ctx, &mut outcome, error).await;
                if transient {
                    self.retry_end(ctx, &outcome, answer).await
                } else {
                    // Refused for itself (not a full disk): the end alone, so that a message the
                    // store will not take does not hold the run up.
                    match ctx.recorder.finish(&outcome, None).await {
                        Ok(()) => None,
                        Err(e) if e.is_transient() => self.retry_end(ctx, &outcome, None).await,
                        Err(e) => {
                            tracing::warn!(error = %e, "could not record the end of a run");
                            None
                        }
                    }
                }
            }
        };
        if let Some(message) = stored {
            ctx.events
                .emit(EventPayload::AssistantMessage { message })
                .await;
        }
        self.metrics.run_finished(outcome.finish_reason);
        self.metrics.spend.count(&outcome.model_calls);
        ctx.events
            .emit(EventPayload::Result {
                stats: RunStats {
                    usage: outcome.usage,
                    output_tokens_estimated: outcome.output_tokens_estimated,
                    input_tokens_estimated: outcome.input_tokens_estimated,
                    model_finish_reason: outcome.model_finish,
                    stop_sequence: outcome.stop_sequence.clone(),
                    steps: outcome.steps.clone(),
                    cost_usd: outcome.cost_usd,
                    iterations: outcome.iterations,
                    duration_ms: started.elapsed().as_millis() as u64,
                    finish_reason: outcome.finish_reason,
                },
            })
            .await;
        if let Some(mut turn) = outcome.turn.clone() {
            // The run's end as stored, which a storage failure may have changed.
            turn.finish_reason = outcome.finish_reason;
            turn.usage = outcome.usage;
            ctx.events.emit(EventPayload::PostTurn { turn }).await;
        }
        outcome
    }

    /// Reports a storage failure of the run (the first error reported stays the run's error)
    /// and makes a run that would have stopped normally end with `error`.
    async fn fail_storage(
        &self,
        ctx: &EngineSessionContext,
        outcome: &mut RunOutcome,
        error: ErrorInfo,
    ) {
        ctx.events
            .emit(EventPayload::Error {
                error: error.clone(),
            })
            .await;
        if matches!(
            outcome.finish_reason,
            FinishReason::Stop
                | FinishReason::MaxIterations
                | FinishReason::BudgetExhausted
                | FinishReason::BudgetPaused
        ) {
            outcome.finish_reason = FinishReason::Error;
        }
        // The engine's own error, if it reported one, stays the run's error.
        outcome.error.get_or_insert(error);
    }

    /// Stores the run's end (with `answer`) until the store takes it; the answer if stored.
    async fn retry_end(
        &self,
        ctx: &EngineSessionContext,
        outcome: &RunOutcome,
        answer: Option<Message>,
    ) -> Option<Message> {
        let mut delay = std::time::Duration::from_millis(50);
        loop {
            if !self.accepting.load(std::sync::atomic::Ordering::SeqCst) {
                tracing::warn!("shutting down: the run's end is left to the restart");
                return None;
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(END_RETRY_MAX_DELAY);
            match ctx.recorder.finish(outcome, answer.as_ref()).await {
                Ok(()) => {
                    tracing::info!("the run's end is stored after failed attempts");
                    return answer;
                }
                Err(e) => tracing::debug!(error = %e, "the run's end is still not stored"),
            }
        }
    }
}

/// The longest pause between two attempts to store a run's end while the store cannot write.
const END_RETRY_MAX_DELAY: std::time::Duration = std::time::Duration::from_secs(1);

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::bus::EventEmitter;
    use crate::ids::MessageId;
    use crate::model::{ContentBlock, Role, Session};
    use async_trait::async_trait;
    use std::sync::Mutex;

    /// Records each `run_finished`; refuses those that carry an answer when `refuse_answers`.
    #[derive(Default)]
    pub(crate) struct Ledger {
        refuse_answers: bool,
        /// Ends that fail as a full disk does before the store takes them.
        full_disk_ends: Mutex<u32>,
        ends: Mutex<Vec<(FinishReason, bool)>>,
    }

    #[async_trait]
    impl RunLedger for Ledger {
        async fn run_started(
            &self,
            _: SessionId,
            _: RunId,
            _: Option<String>,
        ) -> Result<(), LedgerError> {
            Ok(())
        }
        async fn run_finished(
            &self,
            _: SessionId,
            _: RunId,
            outcome: &RunOutcome,
            answer: Option<&Message>,
        ) -> Result<(), LedgerError> {
            if self.refuse_answers && answer.is_some() {
                return Err(LedgerError::permanent("refused"));
            }
            {
                let mut full = self.full_disk_ends.lock().unwrap();
                if *full > 0 {
                    *full -= 1;
                    return Err(LedgerError("disk full".into(), true));
                }
            }
            let mut ends = self.ends.lock().unwrap();
            ends.push((outcome.finish_reason, answer.is_some()));
            Ok(())
        }
        async fn message_added(&self, _: &Message) -> Result<(), LedgerError> {
            Ok(())
        }
        async fn cli_session_id_set(&self, _: SessionId, _: &str) -> Result<(), LedgerError> {
            Ok(())
        }
    }

    /// Answers every prompt with "hi".
    struct Answering;

    #[async_trait]
    impl Engine for Answering {
        fn engine_type(&self) -> EngineType {
            EngineType::Chat
        }
        fn description(&self) -> &'static str {
            "test"
        }
        async fn run_prompt(&self, ctx: EngineSessionContext) -> RunOutcome {
            let answer = Message::new(
                ctx.session_id(),
                Some(ctx.run_id),
                None,
                Role::Assistant,
                vec![ContentBlock::text("hi")],
            );
            RunOutcome {
                answer: Some(answer),
                ..RunOutcome::new(FinishReason::Stop)
            }
        }
    }

    /// A chat run's context on `hub`, its writes going to `ledger`.
    pub(crate) fn context(hub: &EventHub, ledger: Arc<dyn RunLedger>) -> EngineSessionContext {
        let now = chrono::Utc::now();
        let session = Session {
            id: SessionId::new(),
            engine: EngineType::Chat,
            title: None,
            provider_id: None,
            model: None,
            cli_backend: None,
            project_path: None,
            agent_id: None,
            system_prompt: None,
            permission_mode: None,
            engine_config: Default::default(),
            cli_session_id: None,
            created_at: now,
            updated_at: now,
            ownership: crate::Ownership::root(),
        };
        let run_id = RunId::new();
        let bus = hub.open(session.id, 0, crate::SEQ_RESERVE_BLOCK);
        let session_id = session.id;
        EngineSessionContext {
            recorder: RunRecorder::new(ledger, session_id, run_id),
            session,
            run_id,
            prompt: "q".into(),
            is_resume: false,
            user_message_id: MessageId::new(),
            head_start: Default::default(),
            client_msg_id: None,
            parent_id: None,
            provider_id: None,
            model: None,
            system_prompt: None,
            thinking_level: None,
            project_path: None,
            agent_id: None,
            engine_config: Default::default(),
            permission_mode: None,
            cli_backend: None,
            attachments: Vec::new(),
            stored_input: None,
            permission_answers: Default::default(),
            events: EventEmitter::new(bus, run_id),
            cancel: CancellationToken::new(),
            sandbox: None,
            metrics: Arc::new(Metrics::default()),
            tool_run: None,
            node: None,
            channel: Default::default(),
            trace: None,
            payer: Default::default(),
            meters: Default::default(),
        }
    }

    /// Runs one prompt through a dispatcher with `ledger`; returns the run's event types and the
    /// data of its `result`.
    async fn run_once(ledger: Arc<Ledger>) -> (Vec<String>, serde_json::Value) {
        let (log, _log_rx) = crate::log_queue::log_channel(crate::log_queue::LOG_QUEUE_EVENTS);
        let metrics = Arc::new(Metrics::default());
        let hub = EventHub::new(log, metrics.clone());
        let dispatcher =
            EngineDispatcher::new(ActiveSessions::new(), hub.clone(), ledger.clone(), metrics);
        dispatcher.register_engine(Arc::new(Answering));
        let ctx = context(&hub, ledger);
        let mut sub = ctx.events.bus().subscribe_after(0);
        dispatcher.dispatch(ctx, OnBusy::Reject).unwrap();
        let (mut types, mut result) = (Vec::new(), serde_json::Value::Null);
        loop {
            // A guard, not a synchronization: a missing `complete` fails the test.
            let e = tokio::time::timeout(std::time::Duration::from_secs(30), sub.live.recv())
                .await
                .expect("no event within 30 s")
                .unwrap();
            types.push(e.event_type().to_string());
            let data: serde_json::Value = serde_json::from_str(&e.json).unwrap();
            if e.event_type() == "result" {
                result = data["stats"].clone();
            }
            if e.event_type() == "complete" {
                return (types, result);
            }
        }
    }

    #[tokio::test]
    async fn the_answer_is_announced_after_it_is_stored_with_the_runs_end() {
        let ledger = Arc::new(Ledger::default());
        let (types, result) = run_once(ledger.clone()).await;
        assert_eq!(types, ["assistantMessage", "result", "complete"]);
        assert_eq!(result["finishReason"], "stop");
        assert_eq!(*ledger.ends.lock().unwrap(), [(FinishReason::Stop, true)]);
    }

    #[tokio::test]
    async fn an_answer_that_cannot_be_stored_is_not_announced_and_the_run_still_ends() {
        let ledger = Arc::new(Ledger {
            refuse_answers: true,
            ..Ledger::default()
        });
        let (types, result) = run_once(ledger.clone()).await;
        assert_eq!(types, ["error", "result", "complete"]);
        assert_eq!(result["finishReason"], "error");
        // The end is stored without the answer: the run is not left running.
        assert_eq!(*ledger.ends.lock().unwrap(), [(FinishReason::Error, false)]);
    }

    #[tokio::test]
    async fn an_end_the_store_cannot_write_yet_is_retried_with_its_answer_until_it_is() {
        let ledger = Arc::new(Ledger {
            full_disk_ends: Mutex::new(3),
            ..Ledger::default()
        });
        let (types, result) = run_once(ledger.clone()).await;
        // Said once, announced once stored, ended once.
        assert_eq!(types, ["error", "assistantMessage", "result", "complete"]);
        assert_eq!(result["finishReason"], "error");
        assert_eq!(*ledger.ends.lock().unwrap(), [(FinishReason::Error, true)]);
        assert_eq!(*ledger.full_disk_ends.lock().unwrap(), 0);
    }

    /// Another run of `ctx`'s session.
    fn next_run(ctx: &EngineSessionContext) -> EngineSessionContext {
        let run_id = RunId::new();
        EngineSessionContext {
            run_id,
            events: EventEmitter::new(ctx.events.bus().clone(), run_id),
            cancel: CancellationToken::new(),
            ..ctx.clone()
        }
    }

    #[tokio::test]
    async fn enqueued_prompts_past_the_bound_are_refused_and_dropped_ones_do_not_count() {
        let (log, _log_rx) = crate::log_queue::log_channel(crate::log_queue::LOG_QUEUE_EVENTS);
        let hub = EventHub::new(log, Arc::new(Metrics::default()));
        let active = ActiveSessions::with_max_queued(2);
        let first = context(&hub, Arc::new(Ledger::default()));
        let admit = |on_busy| active.admit(next_run(&first), EngineType::Chat, on_busy);
        assert!(matches!(
            active.admit(first.clone(), EngineType::Chat, OnBusy::Enqueue),
            Admission::Start { .. }
        ));
        assert!(matches!(admit(OnBusy::Enqueue), Admission::Queued));
        assert!(!active.queue_is_full(first.session_id()));
        assert!(matches!(admit(OnBusy::Enqueue), Admission::Queued));
        assert!(active.queue_is_full(first.session_id()));
        assert!(matches!(
            admit(OnBusy::Enqueue),
            Admission::QueueFull { max_queued: 2 }
        ));
        // An interrupting prompt always gets in; the queued runs it cancels end without running
        // and no longer count against the bound.
        assert!(matches!(admit(OnBusy::Interrupt), Admission::Queued));
        assert!(matches!(admit(OnBusy::Enqueue), Admission::Queued));
        assert!(matches!(
            admit(OnBusy::Enqueue),
            Admission::QueueFull { .. }
        ));
        assert_eq!(active.get(first.session_id()).map(|r| r.queued), Some(4));
    }
}
