//! What a model call (`relay_turn`) tells the run's meters: the plan of a call before it
//! goes upstream (with its up-front estimate), a refusal as the call's output, and the call's end.

use elfgate_core::{
    CallPlan, CallRefusal, CallReport, EngineSessionContext, ErrorInfo, EventPayload, FinishReason,
    MetersGrant, ModelCall, Prices, RunOutcome, TokenUsage,
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
        max_cost_usd: ctx.engine_config.max_cost_usd,
        estimate: estimate(req),
    }
}

/// The longest a model call waits in all for its tokens-per-minute buckets before it is refused
/// (docs/spend.md, "Rate limits"): two refills of a per-minute bucket, so that a call that fits
/// a bucket gets it even when others of its team take from the same one meanwhile.
pub(crate) const MAX_RATE_LIMIT_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// Asks the run's meters before a call. A tokens-per-minute rule that refuses says how long
/// until its bucket holds the call: the run waits that long (a `retry` event saying why), then
/// asks again, up to [`MAX_RATE_LIMIT_WAIT`] in all or until the run is cancelled; any other
/// refusal, and one past the bound, is the call's answer.
pub(crate) async fn ask_meters(
    ctx: &EngineSessionContext,
    plan: &CallPlan,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<elfgate_core::MetersGrant, CallRefusal> {
    let mut waited = std::time::Duration::ZERO;
    let mut attempt = 0u32;
    loop {
        let refusal = match ctx.meters.before_call(plan).await {
            Ok(grant) => return Ok(grant),
            Err(refusal) => refusal,
        };
        let CallRefusal::RateLimited(limited) = &refusal else {
            return Err(refusal);
        };
        let delay = limited
            .retry_after
            .max(std::time::Duration::from_millis(10));
        if limited.kind != elfgate_core::RateLimitKind::Tokens
            || waited + delay > MAX_RATE_LIMIT_WAIT
            || cancel.is_cancelled()
        {
            return Err(refusal);
        }
        attempt += 1;
        waited += delay;
        // As many more waits of this length as the bound leaves room for.
        let room = (MAX_RATE_LIMIT_WAIT - waited).as_millis() / delay.as_millis().max(1);
        ctx.events
            .emit(EventPayload::Retry {
                retry: elfgate_core::RetryInfo {
                    attempt,
                    max_attempts: attempt.saturating_add(u32::try_from(room).unwrap_or(u32::MAX)),
                    delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                    reason: format!(
                        "waiting {} ms for the tokens-per-minute bucket of the rate limit {}",
                        delay.as_millis(),
                        limited.rule
                    ),
                },
            })
            .await;
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = cancel.cancelled() => return Err(refusal),
        }
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
        announce(ctx, refusal).await;
    }
    error
}

/// Tells the run's client why a call was refused: a spent budget pauses the session
/// (`budgetPaused`, naming the budget), anything else is an `error`.
pub(crate) async fn announce(ctx: &EngineSessionContext, refusal: &CallRefusal) {
    let payload = match refusal {
        CallRefusal::Budget(budget) => EventPayload::BudgetPaused {
            budget: budget.clone(),
        },
        other => EventPayload::Error {
            error: ErrorInfo::new(other.code(), other.to_string()),
        },
    };
    ctx.events.emit(payload).await;
}

/// A run whose model calls the daemon does not make (the cli engine: its CLI calls its provider
/// itself) asks the budgets once, before it starts, with nothing estimated: a spent budget pauses
/// it there (`budget_paused`, the CLI not started). Ok: what to tell the meters when it ended.
pub(crate) async fn open_run(
    ctx: &EngineSessionContext,
) -> Result<Option<(CallPlan, MetersGrant)>, RunOutcome> {
    if ctx.meters.is_empty() {
        return Ok(None);
    }
    let plan = CallPlan {
        session_id: ctx.session_id(),
        run_id: ctx.run_id,
        payer: ctx.payer.clone(),
        provider: ctx.provider_id.clone().unwrap_or_default(),
        model: ctx.model.clone().unwrap_or_default(),
        prices: None,
        max_cost_usd: ctx.engine_config.max_cost_usd,
        estimate: TokenUsage::default(),
    };
    match ctx.meters.before_call(&plan).await {
        Ok(grant) => Ok(Some((plan, grant))),
        Err(refusal @ CallRefusal::Budget(_)) => {
            announce(ctx, &refusal).await;
            Err(RunOutcome::new(FinishReason::BudgetPaused))
        }
        // A per-call limit does not apply to a run the daemon makes no call of.
        Err(_) => Ok(None),
    }
}

/// Tells the meters that a run opened by [`open_run`] ended, with what it cost where known.
pub(crate) async fn close_run(
    meters: &elfgate_core::Meters,
    opened: Option<(CallPlan, MetersGrant)>,
    outcome: &RunOutcome,
) {
    let Some((plan, grant)) = opened else {
        return;
    };
    let report = CallReport {
        usage: outcome.usage,
        input_tokens_estimated: outcome.input_tokens_estimated,
        output_tokens_estimated: outcome.output_tokens_estimated,
        cost_usd: outcome.turn.as_ref().and_then(|t| t.cost_usd),
        made: true,
    };
    meters.after_call(&plan, grant, &report).await;
}

#[cfg(test)]
#[path = "metering_tests.rs"]
mod tests;
