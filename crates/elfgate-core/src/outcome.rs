//! How a run ended, as an engine reports it: its own file, because both the engine trait (which
//! returns it) and the run's recorder (which stores it) need it, and neither needs the other.

use crate::event::{ErrorInfo, ModelFinish};
use crate::model::{FinishReason, Message};

/// How an engine's run ended; the dispatcher turns it into `result` and `complete`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    /// Why it ended.
    pub finish_reason: FinishReason,
    /// Input tokens over all LLM calls.
    pub input_tokens: u64,
    /// Output tokens over all LLM calls.
    pub output_tokens: u64,
    /// Whether `output_tokens` includes an estimate (see `RunStats::output_tokens_estimated`).
    pub output_tokens_estimated: bool,
    /// Whether `input_tokens` includes an estimate (see `RunStats::input_tokens_estimated`).
    pub input_tokens_estimated: bool,
    /// Why the model stopped its last answer (see `RunStats::model_finish_reason`).
    pub model_finish: Option<ModelFinish>,
    /// The stop sequence the last answer ended at, when the provider says which.
    pub stop_sequence: Option<String>,
    /// Input tokens read from the provider's prompt cache, over all LLM calls.
    pub cache_read_tokens: u64,
    /// Input tokens written to the provider's prompt cache, over all LLM calls.
    pub cache_write_tokens: u64,
    /// LLM iterations.
    pub iterations: u32,
    /// The error that ended it, if any (already reported as an `error` event by the engine).
    pub error: Option<ErrorInfo>,
    /// The run's closing message, not yet stored: the dispatcher stores it in the same commit
    /// as the run's end and then announces it as `assistantMessage`, before `result`. One commit
    /// instead of two at the end of every run.
    pub answer: Option<Message>,
}

impl RunOutcome {
    /// An outcome with no tokens.
    pub fn new(finish_reason: FinishReason) -> Self {
        RunOutcome {
            finish_reason,
            input_tokens: 0,
            output_tokens: 0,
            output_tokens_estimated: false,
            input_tokens_estimated: false,
            model_finish: None,
            stop_sequence: None,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
            iterations: 0,
            error: None,
            answer: None,
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
