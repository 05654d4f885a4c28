//! How a run ended, as an engine reports it: its own file, because both the engine trait (which
//! returns it) and the run's recorder (which stores it) need it, and neither needs the other.

use crate::event::{ErrorInfo, ModelFinish};
use crate::model::{FinishReason, Message};
use crate::usage::TokenUsage;

/// How an engine's run ended; the dispatcher turns it into `result` and `complete`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    /// Why it ended.
    pub finish_reason: FinishReason,
    /// Tokens over all LLM calls.
    pub usage: TokenUsage,
    /// Whether `output_tokens` includes an estimate (see `RunStats::output_tokens_estimated`).
    pub output_tokens_estimated: bool,
    /// Whether `input_tokens` includes an estimate (see `RunStats::input_tokens_estimated`).
    pub input_tokens_estimated: bool,
    /// Why the model stopped its last answer (see `RunStats::model_finish_reason`).
    pub model_finish: Option<ModelFinish>,
    /// The stop sequence the last answer ended at, when the provider says which.
    pub stop_sequence: Option<String>,
    /// LLM iterations.
    pub iterations: u32,
    /// The error that ended it, if any (already reported as an `error` event by the engine).
    pub error: Option<ErrorInfo>,
    /// The run's closing message, not yet stored: the dispatcher stores it in the same commit
    /// as the run's end and then announces it as `assistantMessage`, before `result`. One commit
    /// instead of two at the end of every run.
    pub answer: Option<Message>,
    /// What the turn decided and used, for the `postTurn` event after `result` (the agent
    /// loop's runs; None: no such event).
    pub turn: Option<crate::TurnRecord>,
    /// A workflow's run: what each step spent, for `result`.
    pub steps: Vec<crate::StepUsage>,
    /// What the run cost, when the engine knows it itself (a CLI's own figure); None: the sum
    /// of its model calls' costs, filled in at the run's end (absent when none is priced).
    pub cost_usd: Option<f64>,
    /// The run's model calls, for the ledger: taken from the run's recorder at its end and
    /// stored in the same commit as the end.
    pub model_calls: Vec<crate::ModelCall>,
}

impl RunOutcome {
    /// An outcome with no tokens.
    pub fn new(finish_reason: FinishReason) -> Self {
        RunOutcome {
            finish_reason,
            usage: TokenUsage::default(),
            output_tokens_estimated: false,
            input_tokens_estimated: false,
            model_finish: None,
            stop_sequence: None,
            iterations: 0,
            error: None,
            answer: None,
            turn: None,
            steps: Vec::new(),
            cost_usd: None,
            model_calls: Vec::new(),
        }
    }

    /// An error outcome.
    pub fn failed(error: ErrorInfo) -> Self {
        RunOutcome {
            error: Some(error),
            ..RunOutcome::new(FinishReason::Error)
        }
    }
}
