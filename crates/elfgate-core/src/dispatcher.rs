//! The engine dispatcher: the registry of engines and the supervisor of runs.
//!
//! The dispatcher, not the engines, ends every run: it records the outcome, publishes `result` and then
//! exactly one `complete`, and frees the session (or starts the next queued run) in the same step as
//! publishing `complete`, so that a new run's events always come after it.

use crate::active::{ActiveSessions, Admission, Interrupted, OnBusy};
use crate::bus::EventHub;
use crate::engine::{Engine, EngineInfo, EngineSessionContext, RunOutcome};
use crate::engine_type::EngineType;
use crate::event::{ErrorInfo, EventPayload, RunStats};
use crate::ids::{RunId, SessionId};
use crate::metrics::Metrics;
use crate::model::{FinishReason, Message};
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long a session's bus stays open after its last run when nobody follows it.
pub const IDLE_BUS_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// A failure to record a run's state.
#[derive(Debug, thiserror::Error)]
#[error("run ledger: {0}")]
pub struct LedgerError(pub String);

/// Where the dispatcher records runs' lives (the store implements it).
#[async_trait]
pub trait RunLedger: Send + Sync {
    /// The run starts now.
    async fn run_started(&self, session_id: SessionId, run_id: RunId) -> Result<(), LedgerError>;
    /// The run ended; `answer`, its closing message, is stored in the same commit.
    async fn run_finished(
        &self,
        session_id: SessionId,
        run_id: RunId,
        outcome: &RunOutcome,
        answer: Option<&Message>,
    ) -> Result<(), LedgerError>;
}

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
}

/// What became of a dispatched run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DispatchStatus {
    /// It runs now.
    Started,
    /// It waits behind the current run.
    Queued,
}

impl DispatchStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            DispatchStatus::Started => "running",
            DispatchStatus::Queued => "queued",
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
}

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
        })
    }

    /// Adds (or replaces) an engine.
    pub fn register_engine(&self, engine: Arc<dyn Engine>) {
        let mut map = self.engines.write().unwrap_or_else(|p| p.into_inner());
        map.insert(engine.engine_type(), engine);
    }

    /// The engine of a type.
    pub fn get_engine(&self, engine: EngineType) -> Option<Arc<dyn Engine>> {
        let map = self.engines.read().unwrap_or_else(|p| p.into_inner());
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

    /// Starts the first run of a session.
    pub fn dispatch(
        self: &Arc<Self>,
        ctx: EngineSessionContext,
        on_busy: OnBusy,
    ) -> Result<DispatchStatus, DispatchError> {
        self.admit(ctx, on_busy)
    }

    /// Starts (or queues) a later run of a session.
    pub fn resume(
        self: &Arc<Self>,
        ctx: EngineSessionContext,
        on_busy: OnBusy,
    ) -> Result<DispatchStatus, DispatchError> {
        self.admit(ctx, on_busy)
    }

    fn admit(
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
        }
    }

    /// Interrupts the session's run and every run queued behind it. Idempotent: an idle session
    /// gives no run.
    pub fn interrupt(self: &Arc<Self>, session_id: SessionId) -> InterruptResult {
        let engine_extra = {
            let map = self.engines.read().unwrap_or_else(|p| p.into_inner());
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
            let map = self.engines.read().unwrap_or_else(|p| p.into_inner());
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
            let map = self.engines.read().unwrap_or_else(|p| p.into_inner());
            map.values().cloned().collect()
        };
        let mut infos: Vec<EngineInfo> = engines
            .iter()
            .map(|e| EngineInfo {
                engine_type: e.engine_type(),
                description: e.description().to_string(),
                capabilities: e.capabilities().iter().map(|c| c.to_string()).collect(),
                active_sessions: self.active.count_engine(e.engine_type()),
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
            let started = Instant::now();
            // A queued run cancelled before its turn ends without running.
            let outcome = if ctx.cancel.is_cancelled() {
                RunOutcome::new(FinishReason::Interrupted)
            } else {
                self.run_one(engine.clone(), ctx.clone()).await
            };
            let outcome = self.record_end(&ctx, outcome, started).await;
            let (_, next) = ctx.events.bus().publish_then(
                Some(run_id),
                &EventPayload::Complete {
                    finish_reason: outcome.finish_reason,
                },
                || self.active.finish(session_id, run_id),
            );
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
        let (session_id, run_id) = (ctx.session_id(), ctx.run_id);
        let events = ctx.events.clone();
        let is_resume = ctx.is_resume;
        let stored_as_running = ctx.stored_as_running;
        let task = tokio::spawn(async move {
            if is_resume {
                engine.resume_session(ctx).await
            } else {
                engine.start_session(ctx).await
            }
        });
        // Marking the run as running does not hold up the engine; it is done before the end is
        // recorded, so the two writes stay in order.
        let mark = async {
            if stored_as_running {
                return;
            }
            if let Err(e) = self.ledger.run_started(session_id, run_id).await {
                tracing::warn!(error = %e, "could not mark run as running");
            }
        };
        let ((), joined) = tokio::join!(mark, task);
        match joined {
            Ok(outcome) => outcome,
            Err(join) => {
                let error = ErrorInfo::new("engine_panic", format!("the engine failed: {join}"));
                events.emit(EventPayload::Error {
                    error: error.clone(),
                });
                RunOutcome::failed(error)
            }
        }
    }

    /// Stores the outcome with the run's closing message, announces the message, publishes
    /// `result`, and returns the outcome as reported (an error if the commit failed while a
    /// message depended on it).
    async fn record_end(
        &self,
        ctx: &EngineSessionContext,
        mut outcome: RunOutcome,
        started: Instant,
    ) -> RunOutcome {
        let answer = outcome.answer.take();
        let stored = self
            .ledger
            .run_finished(ctx.session_id(), ctx.run_id, &outcome, answer.as_ref())
            .await;
        match (stored, answer) {
            (Ok(()), Some(message)) => {
                ctx.events.emit(EventPayload::AssistantMessage { message });
            }
            (Ok(()), None) => {}
            (Err(e), answer) => {
                tracing::warn!(error = %e, "could not record the end of a run");
                // A message that was not stored is not announced; the run reports the failure.
                if answer.is_some() {
                    let error = ErrorInfo::new("storage", e.to_string());
                    ctx.events.emit(EventPayload::Error {
                        error: error.clone(),
                    });
                    outcome.finish_reason = FinishReason::Error;
                    outcome.error = Some(error);
                }
            }
        }
        self.metrics.run_finished(outcome.finish_reason);
        ctx.events.emit(EventPayload::Result {
            stats: RunStats {
                input_tokens: outcome.input_tokens,
                output_tokens: outcome.output_tokens,
                iterations: outcome.iterations,
                duration_ms: started.elapsed().as_millis() as u64,
                finish_reason: outcome.finish_reason,
            },
        });
        outcome
    }
}
