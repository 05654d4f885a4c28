//! What a model call (`relay_turn`) tells the run's meters: the plan of a call before it
//! goes upstream (with its up-front estimate), a refusal as the call's output, and the call's end.

use elfgate_core::{
    CallPlan, CallRefusal, CallReport, EngineSessionContext, ErrorInfo, EventPayload, ModelCall,
    Prices, TokenUsage,
};
use elfgate_llm::LlmRequest;

/// The output tokens a call is expected to use at most when its request sets no limit: the
/// largest default of the provider clients (Anthropic's requests need one and get 8192).
pub(crate) const DEFAULT_OUTPUT_ESTIMATE: u64 = 8192;

/// Bytes of a request counted as one prompt token in an estimate: the usual rule of thumb for
/// English text and code with the providers' tokenizers.
const REQUEST_BYTES_PER_TOKEN: u64 = 4;

/// The prompt tokens of `req`, estimated from its size.
pub(crate) fn request_input_tokens(req: &LlmRequest) -> u64 {
    let bytes = crate::tinyelf::context::compaction::fixed_bytes(req)
        + crate::tinyelf::context::compaction::messages_bytes(&req.messages);
    bytes.div_ceil(REQUEST_BYTES_PER_TOKEN)
}

/// The up-front estimate of a call: its input from the request's size, its output from the
/// request's output limit.
pub(crate) fn estimate(req: &LlmRequest) -> TokenUsage {
    TokenUsage {
        input_tokens: request_input_tokens(req),
        output_tokens: req.max_tokens.map_or(DEFAULT_OUTPUT_ESTIMATE, u64::from),
        ..TokenUsage::default()
    }
}

/// The plan of a call of `ctx`'s run to provider `provider` with `req`.
pub(crate) fn call_plan(
    ctx: &EngineSessionContext,
    provider: &str,
    prices: Option<Prices>,
    req: &LlmRequest,
) -> CallPlan {
    CallPlan {
        session_id: ctx.session_id(),
        run_id: ctx.run_id,
        payer: ctx.payer.clone(),
        provider: provider.to_string(),
        model: req.model.clone(),
        prices,
        estimate: estimate(req),
    }
}

/// Notes a call that went upstream on the run's recorder, for the ledger.
pub(crate) fn note_call(
    ctx: &EngineSessionContext,
    provider: &str,
    model: &str,
    report: &CallReport,
) {
    ctx.recorder.note_model_call(ModelCall {
        seq: 0,
        at: chrono::Utc::now(),
        session_id: ctx.session_id(),
        run_id: ctx.run_id,
        payer: ctx.payer.clone(),
        provider: provider.to_string(),
        model: model.to_string(),
        usage: report.usage,
        input_tokens_estimated: report.input_tokens_estimated,
        output_tokens_estimated: report.output_tokens_estimated,
        cost_usd: report.cost_usd,
    });
}

/// The error of a call a meter refused, announced as an `error` event when the caller reports
/// errors.
pub(crate) async fn refusal_error(
    ctx: &EngineSessionContext,
    refusal: &CallRefusal,
    report_errors: bool,
) -> ErrorInfo {
    let error = ErrorInfo::new(refusal.code(), refusal.to_string());
    if report_errors {
        ctx.events
            .emit(EventPayload::Error {
                error: error.clone(),
            })
            .await;
    }
    error
}

#[cfg(test)]
#[path = "metering_tests.rs"]
mod tests;
