//! The per-run state (`Runner`) shared by a run's agent and its sub-agents, and one agent's own
//! (`Agent`): what the loop (agent.rs) and the tool pipeline (pipeline.rs) both read, in a file of
//! its own so that neither of those depends on the other for it.

use super::Inner;
use super::context::blocks::SystemPrompt;
use super::settings::RunSettings;
use crate::streaming::{CallTarget, TurnOptions, TurnOutput, relay_turn, retry_event};
use elfgate_core::sync::lock;
use elfgate_core::{
    EngineSessionContext, ErrorCode, ErrorInfo, EventPayload, FinishReason, Message, TokenUsage,
};
use elfgate_llm::{LlmFinishReason, LlmProvider, LlmRequest, RetryNotice, random_unit};
use elfgate_tools::{Guardian, ToolRegistry};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;
use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// How a loop ended.
#[derive(Debug, Clone)]
pub(crate) struct LoopEnd {
    pub finish: FinishReason,
    pub text: String,
    pub iterations: u32,
    pub error: Option<ErrorInfo>,
}

/// A finished background sub-agent.
#[derive(Debug, Clone)]
pub(crate) struct BackgroundResult {
    pub label: String,
    pub run_id: String,
    pub finish: FinishReason,
    pub text: String,
}

/// State of one run, shared by its agent and sub-agents.
/// The directory a run works in: its project, or the daemon's working directory without one.
pub(crate) fn work_dir(project: Option<&std::path::Path>) -> PathBuf {
    match project {
        Some(p) => p.to_path_buf(),
        None => std::env::current_dir().unwrap_or_else(|_| std::env::temp_dir()),
    }
}

pub(crate) struct Runner {
    pub inner: Arc<Inner>,
    pub ctx: EngineSessionContext,
    pub provider: Arc<dyn LlmProvider>,
    pub model: String,
    pub rs: RunSettings,
    /// The project directory, or the daemon's working directory when the session has none (see
    /// `has_project`): where hooks run.
    pub project: PathBuf,
    /// Whether the session has a projectPath; without one the file and shell tools refuse.
    pub has_project: bool,
    pub guardian: Option<Guardian>,
    /// The provider's tokens per estimated token, learned from the last call (docs/context.md).
    pub(crate) token_ratio: std::sync::Mutex<Option<f64>>,
    /// The turn's tool calls and blocked calls, in the order they ended (its postTurn record).
    turn_log: std::sync::Mutex<(
        Vec<elfgate_core::CalledTool>,
        Vec<elfgate_core::BlockedCall>,
    )>,
    /// The run's token totals, sub-agents included.
    usage: std::sync::Mutex<TokenUsage>,
    /// Set once a call's output tokens were estimated from its streamed text.
    output_estimated: std::sync::atomic::AtomicBool,
    /// Set once a call's input tokens were estimated from its request's size.
    input_estimated: std::sync::atomic::AtomicBool,
    /// Why the top-level agent's last model call ended.
    last_finish: std::sync::Mutex<Option<LlmFinishReason>>,
    bg_tx: mpsc::UnboundedSender<BackgroundResult>,
    bg_rx: Mutex<mpsc::UnboundedReceiver<BackgroundResult>>,
    bg_running: AtomicUsize,
    bg_ready: AtomicUsize,
    /// Background sub-agents started in this run (running or finished).
    bg_started: AtomicUsize,
    bg_handles: std::sync::Mutex<Vec<JoinHandle<()>>>,
    /// The background sub-agents running now: (run id, label), in their start order.
    bg_labels: std::sync::Mutex<Vec<(String, String)>>,
    /// Fired when the run ends: stops background sub-agents still going.
    pub bg_cancel: CancellationToken,
}

/// One agent: the top-level one or a sub-agent.
#[derive(Clone)]
pub(crate) struct Agent {
    /// None for the top-level agent.
    pub label: Option<String>,
    /// 0 for the top-level agent.
    pub depth: u32,
    pub tools: ToolRegistry,
    pub cancel: CancellationToken,
    pub model: String,
    pub system: SystemPrompt,
    pub max_iterations: u32,
    /// The run's MCP servers (the top-level agent only): their tools join `tools` before each
    /// iteration.
    pub mcp: Option<Arc<super::mcp::McpRun>>,
    /// The tools the turn's active skills allow (None: no narrowing); MCP tools joining before
    /// each iteration are narrowed by it too.
    pub tool_filter: Option<Arc<std::collections::BTreeSet<String>>>,
}

impl Agent {
    pub(crate) fn is_top(&self) -> bool {
        self.depth == 0
    }
}

/// What is left of a token budget.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    /// Tokens that may still be spent.
    pub left: u64,
    /// The budget.
    pub max: u64,
    /// Its engineConfig key.
    pub key: &'static str,
}

impl Runner {
    pub(crate) fn new(
        inner: Arc<Inner>,
        ctx: EngineSessionContext,
        provider: Arc<dyn LlmProvider>,
        model: String,
        rs: RunSettings,
        project: Option<PathBuf>,
        guardian: Option<Guardian>,
    ) -> Arc<Self> {
        let (bg_tx, bg_rx) = mpsc::unbounded_channel();
        let bg_cancel = ctx.cancel.child_token();
        Arc::new(Runner {
            inner,
            ctx,
            provider,
            model,
            rs,
            has_project: project.is_some(),
            project: work_dir(project.as_deref()),
            guardian,
            token_ratio: std::sync::Mutex::new(None),
            usage: std::sync::Mutex::new(TokenUsage::default()),
            output_estimated: std::sync::atomic::AtomicBool::new(false),
            input_estimated: std::sync::atomic::AtomicBool::new(false),
            last_finish: std::sync::Mutex::new(None),
            turn_log: std::sync::Mutex::new((Vec::new(), Vec::new())),
            bg_tx,
            bg_rx: Mutex::new(bg_rx),
            bg_running: AtomicUsize::new(0),
            bg_ready: AtomicUsize::new(0),
            bg_started: AtomicUsize::new(0),
            bg_handles: std::sync::Mutex::new(Vec::new()),
            bg_labels: std::sync::Mutex::new(Vec::new()),
            bg_cancel,
        })
    }

    /// Where the run's model calls go, with the model's prices.
    pub(crate) fn call_target(&self) -> CallTarget<'_> {
        CallTarget {
            provider: self.provider.as_ref(),
            name: &self.rs.provider_name,
            prices: self.rs.prices,
        }
    }

    /// The run's token totals (sub-agents included).
    pub(crate) fn usage(&self) -> TokenUsage {
        *lock(&self.usage)
    }

    /// Notes a tool call's end for the turn's record.
    pub(crate) fn turn_called(&self, called: elfgate_core::CalledTool) {
        lock(&self.turn_log).0.push(called);
    }

    /// Notes a blocked call for the turn's record.
    pub(crate) fn turn_blocked(&self, blocked: elfgate_core::BlockedCall) {
        lock(&self.turn_log).1.push(blocked);
    }

    /// The turn's record so far: its tool calls and blocked calls, tokens and cost.
    pub(crate) fn turn_record(
        &self,
        finish_reason: elfgate_core::FinishReason,
    ) -> elfgate_core::TurnRecord {
        let (tools_called, denied) = lock(&self.turn_log).clone();
        let usage = self.usage();
        elfgate_core::TurnRecord {
            tools_called,
            denied,
            usage,
            cost_usd: self.rs.prices.map(|p| p.cost(&usage)),
            finish_reason,
        }
    }

    /// The tokens the run may still spend under its own and its session's budgets, and the
    /// budget that is the tighter one; None without a budget.
    pub(crate) fn budget_left(&self) -> Option<Budget> {
        let u = self.usage();
        let used = u.input_tokens + u.output_tokens;
        let run = self.rs.max_total_tokens.map(|max| Budget {
            left: max.saturating_sub(used),
            max,
            key: "maxTotalTokens",
        });
        let session = self.rs.max_session_tokens.map(|max| Budget {
            left: max.saturating_sub(self.rs.session_tokens_before + used),
            max,
            key: "maxSessionTokens",
        });
        match (run, session) {
            (Some(r), Some(s)) => Some(if s.left < r.left { s } else { r }),
            (r, s) => r.or(s),
        }
    }

    /// Whether the (input, output) totals include an estimate (a call that ended before its
    /// usage).
    pub(crate) fn tokens_estimated(&self) -> (bool, bool) {
        (
            self.input_estimated.load(Ordering::SeqCst),
            self.output_estimated.load(Ordering::SeqCst),
        )
    }

    /// Why the top-level agent's last model call ended, in the daemon's words, with its stop
    /// sequence.
    pub(crate) fn last_finish(&self) -> (Option<elfgate_core::ModelFinish>, Option<String>) {
        let last = lock(&self.last_finish);
        match last.as_ref().map(LlmFinishReason::model_finish) {
            Some((f, s)) => (Some(f), s),
            None => (None, None),
        }
    }

    pub(crate) fn add_tokens(&self, turn: &TurnOutput) {
        *lock(&self.usage) += turn.usage;
        if turn.output_tokens_estimated {
            self.output_estimated.store(true, Ordering::SeqCst);
        }
        if turn.input_tokens_estimated {
            self.input_estimated.store(true, Ordering::SeqCst);
        }
    }

    /// Takes one of the run's `max_background_agents` slots; false when none is left. Concurrent
    /// spawn calls of one response cannot overshoot the cap between them.
    pub(crate) fn reserve_background(&self) -> bool {
        let max = self.inner.config.max_background_agents as usize;
        self.bg_started
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok()
    }

    /// Starts a background sub-agent task. Its end is announced (a `processing` event) once its
    /// result is ready to be drained.
    pub(crate) fn start_background(
        self: &Arc<Self>,
        label: String,
        run_id: String,
        fut: futures_util::future::BoxFuture<'static, LoopEnd>,
    ) {
        self.bg_running.fetch_add(1, Ordering::SeqCst);
        lock(&self.bg_labels).push((run_id.clone(), label.clone()));
        let this = self.clone();
        let handle = tokio::spawn(
            async move {
                let end = fut.await;
                let said = format!(
                    "[agent \"{label}\" ({run_id})] {} (in the background)",
                    end.finish.as_str()
                );
                lock(&this.bg_labels).retain(|(id, _)| *id != run_id);
                this.bg_ready.fetch_add(1, Ordering::SeqCst);
                let _ = this.bg_tx.send(BackgroundResult {
                    label,
                    run_id,
                    finish: end.finish,
                    text: super::spawn::outcome_text(end.finish, &end.text),
                });
                this.bg_running.fetch_sub(1, Ordering::SeqCst);
                this.ctx
                    .events
                    .emit(EventPayload::Processing { message: said })
                    .await;
            }
            // The run's span (session_id, run_id) follows the sub-agent into its task.
            .in_current_span(),
        );
        if let Ok(mut h) = self.bg_handles.lock() {
            h.push(handle);
        }
    }

    /// The background sub-agents running now, as `"label" (runId)`.
    pub(super) fn background_running(&self) -> Vec<String> {
        lock(&self.bg_labels)
            .iter()
            .map(|(id, label)| format!("\"{label}\" ({id})"))
            .collect()
    }

    /// The background results ready now, without waiting (none while another waits for them).
    pub(super) fn take_ready_background(&self) -> Vec<BackgroundResult> {
        let Ok(mut rx) = self.bg_rx.try_lock() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        while let Ok(r) = rx.try_recv() {
            out.push(r);
        }
        self.bg_ready.fetch_sub(out.len(), Ordering::SeqCst);
        out
    }

    /// Whether background results are ready or still coming.
    pub(super) fn background_pending(&self) -> bool {
        self.bg_running.load(Ordering::SeqCst) > 0 || self.bg_ready.load(Ordering::SeqCst) > 0
    }

    /// Waits for at least one background result (or `cancel`) and takes every ready one.
    pub(super) async fn take_background(
        &self,
        cancel: &CancellationToken,
    ) -> Option<Vec<BackgroundResult>> {
        let mut rx = self.bg_rx.lock().await;
        let first = tokio::select! {
            biased;
            _ = cancel.cancelled() => return None,
            r = rx.recv() => r?,
        };
        let mut out = vec![first];
        while let Ok(r) = rx.try_recv() {
            out.push(r);
        }
        self.bg_ready.fetch_sub(out.len(), Ordering::SeqCst);
        Some(out)
    }

    /// Stops background sub-agents still going and waits for them.
    pub(crate) async fn stop_background(&self) {
        self.bg_cancel.cancel();
        let handles: Vec<JoinHandle<()>> = match self.bg_handles.lock() {
            Ok(mut h) => h.drain(..).collect(),
            Err(_) => Vec::new(),
        };
        for h in handles {
            let _ = h.await;
        }
    }

    pub(super) async fn persist(&self, msg: &Message) -> Result<(), ErrorInfo> {
        let Err(e) = self.ctx.recorder.add_message(msg).await else {
            return Ok(());
        };
        let info = ErrorInfo::new(ErrorCode::Storage, e.0);
        self.ctx
            .events
            .emit(EventPayload::Error {
                error: info.clone(),
            })
            .await;
        Err(info)
    }

    /// One LLM call with the loop's retry rule, on top of the provider client's: a call that
    /// fails (or finishes with reason error) before producing anything is retried even when the
    /// client does not retry it (a non-retryable status, an error after an empty first event).
    /// Both share the run's retry policy: one budget of `max_llm_retries`, the same schedule for
    /// the delays, a `retry` event each; an `error` event after the last. A call whose first-token
    /// deadline passed (it bounds the call, retries included), or whose server asked for a longer
    /// wait than the policy's longest delay, is not retried.
    pub(crate) async fn call_llm(&self, agent: &Agent, req: &LlmRequest) -> TurnOutput {
        let policy = &self.rs.llm_retry;
        let max = policy.max_retries;
        let mut used = 0u32;
        loop {
            if agent.cancel.is_cancelled() {
                return TurnOutput {
                    interrupted: true,
                    ..TurnOutput::default()
                };
            }
            let mut turn = relay_turn(
                self.call_target(),
                req,
                policy,
                &self.ctx,
                // Time to first token is measured per call in the agent loop.
                Instant::now(),
                TurnOptions {
                    relay_deltas: agent.is_top(),
                    split_think: true,
                    report_errors: false,
                    cancel: Some(&agent.cancel),
                    retries_done: used,
                },
                None,
            )
            .await;
            used += turn.retries;
            self.add_tokens(&turn);
            if agent.is_top()
                && let Some(f) = &turn.finish
            {
                *lock(&self.last_finish) = Some(f.clone());
            }
            if turn.interrupted {
                return turn;
            }
            if turn.error.is_none()
                && matches!(&turn.finish, Some(LlmFinishReason::Other(r)) if r == "error")
            {
                turn.error = Some(ErrorInfo::new(
                    ErrorCode::ModelError,
                    "the model finished with reason error",
                ));
            }
            let empty =
                turn.text.is_empty() && turn.thinking.is_empty() && turn.tool_calls.is_empty();
            if let Some(err) = &turn.error {
                // The same wait as the client's retries: the schedule, raised to Retry-After
                // (a Retry-After past the policy's longest delay already set no_retry).
                let delay = policy.delay(used + 1, turn.retry_after, &mut random_unit);
                if let Some(delay) = delay.filter(|_| empty && used < max && !turn.no_retry) {
                    used += 1;
                    if agent.is_top() {
                        self.ctx.metrics.retry();
                        self.ctx
                            .events
                            .emit(retry_event(RetryNotice {
                                attempt: used,
                                max_attempts: max,
                                delay,
                                reason: err.message.clone(),
                            }))
                            .await;
                    }
                    tokio::select! {
                        biased;
                        _ = agent.cancel.cancelled() => {
                            return TurnOutput { interrupted: true, ..TurnOutput::default() };
                        }
                        _ = tokio::time::sleep(delay) => {}
                    }
                    continue;
                }
                // An overflow is the caller's to recover from (Runner::call_fitted).
                if agent.is_top() && !turn.context_overflow {
                    self.ctx
                        .events
                        .emit(EventPayload::Error { error: err.clone() })
                        .await;
                }
            }
            return turn;
        }
    }
}
