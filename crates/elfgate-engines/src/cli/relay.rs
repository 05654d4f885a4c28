//! One run's relay: from a CLI's adapter events to Elfgate's events and stored messages, and from
//! how the CLI ended to the run's outcome.

use super::adapter::AdapterEvent;
use super::backend::BackendProgram;
use super::settings::CliConfig;
use super::supervisor::Ended;
use super::transcript::Transcript;
use elfgate_core::CliBackend;
use elfgate_core::{
    EngineSessionContext, ErrorCode, ErrorInfo, EventPayload, FinishReason, RunOutcome, TokenUsage,
    ToolCallStatus,
};

/// One run's relay from adapter events to Elfgate's events, messages and outcome.
pub(crate) struct Relay<'a> {
    ctx: &'a EngineSessionContext,
    transcript: Transcript,
    /// The CLI session id stored on the session.
    cli_session: Option<String>,
    tokens: TokenUsage,
    /// The CLI's own figure of the run's cost, if it gives one.
    cost_usd: Option<f64>,
    turns: u32,
    /// What the CLI said went wrong.
    failure: Option<String>,
    /// Where a fleet node notes the CLI sessions of this home (None on a single node).
    markers: Option<std::path::PathBuf>,
    /// The CLI reported the run's end.
    finished: bool,
    /// A store failure, which ends the run.
    storage: Option<ErrorInfo>,
}

impl<'a> Relay<'a> {
    /// A relay for the run of `ctx`, whose CLI session so far is `cli_session`.
    pub(crate) fn new(
        ctx: &'a EngineSessionContext,
        transcript: Transcript,
        cli_session: Option<String>,
        markers: Option<std::path::PathBuf>,
    ) -> Self {
        Relay {
            ctx,
            transcript,
            cli_session,
            markers,
            tokens: TokenUsage::default(),
            cost_usd: None,
            turns: 0,
            failure: None,
            finished: false,
            storage: None,
        }
    }

    /// Notes, in a fleet, that this home holds CLI session `id` (see `cli_session_marker`).
    fn note_cli_session(&self, id: &str) {
        let Some(dir) = &self.markers else {
            return;
        };
        let noted = elfgate_core::private_files::create_private_dir_all(dir).and_then(|()| {
            elfgate_core::private_files::write_private(&super::cli_session_marker(dir, id), b"")
        });
        if let Err(e) = noted {
            tracing::warn!(error = %e, "cannot note the CLI session in its home: a resume of it \
                will be refused");
        }
    }

    /// Whether storing failed (the run then ends).
    pub(crate) fn storage_failed(&self) -> bool {
        self.storage.is_some()
    }

    /// Relays one adapter event.
    pub(crate) async fn apply(&mut self, ev: AdapterEvent) {
        let ctx = self.ctx;
        match ev {
            AdapterEvent::Delta(kind, text) => self.transcript.delta(ctx, kind, text).await,
            AdapterEvent::ToolStart { id, name, input } => {
                self.transcript.tool_start(ctx, id, name, input).await;
            }
            AdapterEvent::ToolEnd {
                id,
                content,
                is_error,
            } => {
                // A CLI that closes a call cut by the interrupt itself (claude-code answers it with
                // an error result) reports it like the calls the engine closes: interrupted.
                let status = if is_error && ctx.cancel.is_cancelled() {
                    ToolCallStatus::Interrupted
                } else if is_error {
                    ToolCallStatus::Error
                } else {
                    ToolCallStatus::Success
                };
                if let Err(e) = self.transcript.tool_end(ctx, id, content, status).await {
                    self.storage = Some(e);
                }
            }
            AdapterEvent::SessionId(id) => {
                if self.cli_session.as_deref() != Some(id.as_str()) {
                    match ctx.recorder.set_cli_session_id(&id).await {
                        Ok(()) => {
                            self.note_cli_session(&id);
                            self.cli_session = Some(id);
                        }
                        Err(e) => self.storage = Some(ErrorInfo::new(ErrorCode::Storage, e.0)),
                    }
                }
            }
            AdapterEvent::Usage(counts) => self.tokens = counts,
            AdapterEvent::Cost(usd) => self.cost_usd = Some(usd),
            AdapterEvent::Turns(n) => self.turns = n,
            AdapterEvent::Notice(message) => {
                ctx.events.emit(EventPayload::Processing { message }).await;
            }
            AdapterEvent::Failed(why) => self.failure = Some(why),
            AdapterEvent::Finished => self.finished = true,
            // Answered by the engine, which holds the CLI's stdin.
            AdapterEvent::PermissionAsk { .. } => {}
        }
    }

    /// The run's outcome from how the CLI ended.
    pub(crate) async fn end(self, b: CliBackend, ended: Ended, config: &CliConfig) -> RunOutcome {
        let ctx = self.ctx;
        let name = b.as_str();
        // The CLI's run is one row of the ledger: it reports its figures for the run as a whole.
        if self.tokens != TokenUsage::default() || self.cost_usd.is_some() {
            ctx.recorder.note_model_call(elfgate_core::ModelCall {
                seq: 0,
                at: chrono::Utc::now(),
                session_id: ctx.session_id(),
                run_id: ctx.run_id,
                payer: ctx.payer.clone(),
                provider: name.to_string(),
                model: ctx.model.clone().unwrap_or_default(),
                usage: self.tokens,
                input_tokens_estimated: false,
                output_tokens_estimated: false,
                cost_usd: self.cost_usd,
            });
        }
        let tail = || {
            if ended.stderr_tail.is_empty() {
                String::new()
            } else {
                format!("; stderr:\n{}", ended.stderr_tail.join("\n"))
            }
        };
        let error = if ended.interrupted {
            None
        } else if let Some(e) = self.storage.clone() {
            Some(e)
        } else if ended.idle_timed_out {
            Some(ErrorInfo::new(
                ErrorCode::CliIdleTimeout,
                format!(
                    "{name} printed nothing for {} s and was stopped (engines.cli.idle_timeout_secs){}",
                    config.idle_timeout_secs,
                    tail()
                ),
            ))
        } else if let Some(why) = self.failure.clone() {
            Some(ErrorInfo::new(
                ErrorCode::CliFailed,
                format!("{name}: {why}"),
            ))
        } else {
            match ended.exit {
                Some(s) if s.success() && self.finished => None,
                Some(s) if s.success() => Some(ErrorInfo::new(
                    ErrorCode::CliNoResult,
                    format!(
                        "{name} exited without reporting the end of its run{}",
                        tail()
                    ),
                )),
                Some(s) => {
                    use std::os::unix::process::ExitStatusExt;
                    match (s.code(), s.signal()) {
                        (Some(code), _) => {
                            let meaning = b
                                .exit_meaning(code)
                                .map(|m| format!(": {m}"))
                                .unwrap_or_default();
                            Some(ErrorInfo::new(
                                ErrorCode::CliExit,
                                format!("{name} exited with status {code}{meaning}{}", tail()),
                            ))
                        }
                        (None, sig) => Some(ErrorInfo::new(
                            ErrorCode::CliCrashed,
                            format!(
                                "{name} was killed by signal {}{}",
                                sig.unwrap_or_default(),
                                tail()
                            ),
                        )),
                    }
                }
                None => Some(ErrorInfo::new(
                    ErrorCode::CliCrashed,
                    format!("{name} stopped answering before it exited{}", tail()),
                )),
            }
        };
        if ended.garbage > 0 {
            tracing::info!(
                backend = name,
                lines = ended.garbage,
                "skipped lines of CLI output"
            );
        }
        if let Some(e) = &error {
            ctx.events
                .emit(EventPayload::Error { error: e.clone() })
                .await;
        }
        let finish_reason = match (&error, ended.interrupted) {
            (_, true) => FinishReason::Interrupted,
            (Some(_), false) => FinishReason::Error,
            (None, false) => FinishReason::Stop,
        };
        let tool_status = if ended.interrupted {
            ToolCallStatus::Interrupted
        } else {
            ToolCallStatus::Error
        };
        let (answer, error) = match self.transcript.finish(ctx, tool_status, self.tokens).await {
            Ok(a) => (a, error),
            Err(e) => (None, error.or(Some(e))),
        };
        RunOutcome {
            finish_reason: if error.is_some() && finish_reason == FinishReason::Stop {
                FinishReason::Error
            } else {
                finish_reason
            },
            usage: self.tokens,
            // A CLI reports its own figures, or none: nothing is estimated here.
            output_tokens_estimated: false,
            input_tokens_estimated: false,
            // A CLI's own loop decides; its last model call's reason is not reported.
            model_finish: None,
            stop_sequence: None,
            iterations: self.turns.max(1),
            error,
            answer,
            turn: None,
            steps: Vec::new(),
            cost_usd: self.cost_usd,
            model_calls: Vec::new(),
        }
    }
}
