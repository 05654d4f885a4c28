//! One streamed LLM call, relayed to the session's events: retries before the first token become
//! `retry` events, text and thinking become `streamDelta` events, an interrupt drops the upstream
//! stream at once.

mod telemetry;

use crate::think::ThinkSplitter;
use elfgate_core::{
    CallRefusal, CallReport, ContentBlock, Delta, DeltaKind, EngineSessionContext, ErrorCode,
    ErrorInfo, EventPayload, Prices, RetryInfo, RunOutcome, TokenUsage,
};
use elfgate_llm::{
    FirstAttempt, LlmError, LlmEvent, LlmFinishReason, LlmProvider, LlmRequest, RetryNotice,
    RetryPolicy, stream_with_retry_from,
};
use futures_util::StreamExt;
use std::time::Instant;
use tracing::Instrument;

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestedToolCall {
    /// Provider call id.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Raw JSON arguments.
    pub arguments: String,
}

/// What one streamed call produced, complete or not.
#[derive(Debug, Default)]
pub struct TurnOutput {
    /// Answer text.
    pub text: String,
    /// Reasoning text.
    pub thinking: String,
    /// Reasoning signature (Anthropic's thinking block; Gemini's thought signature, which may
    /// come without any reasoning text, e.g. on a function call).
    pub signature: Option<String>,
    /// Tool calls, in order.
    pub tool_calls: Vec<RequestedToolCall>,
    /// Blocks of the provider's own tools (its web search), in order: stored with the answer
    /// and sent back to that kind of provider.
    pub provider_blocks: Vec<ContentBlock>,
    /// Tokens reported; the output's estimated when the call ended before its usage arrived.
    pub usage: TokenUsage,
    /// Set when `output_tokens` is an estimate from the streamed text, not the provider's.
    pub output_tokens_estimated: bool,
    /// Set when `input_tokens` is an estimate from the request's size, not the provider's.
    pub input_tokens_estimated: bool,
    /// The provider's finish reason.
    pub finish: Option<LlmFinishReason>,
    /// Set when an interrupt stopped it.
    pub interrupted: bool,
    /// Set when it failed (reported as an `error` event unless the options said not to).
    pub error: Option<ErrorInfo>,
    /// Set when the failure must not be retried by a caller either: the call's first-token
    /// deadline, which bounds the call with all its retries, has passed, the server refused the
    /// request for a reason a retry cannot change (a bad key, a missing model, a body too large),
    /// or the server asked for a longer wait than the retry policy's longest delay.
    pub no_retry: bool,
    /// Retries made before the first event.
    pub retries: u32,
    /// How long the server asked to wait before a retry (`Retry-After` of the failure), if it did.
    pub retry_after: Option<std::time::Duration>,
    /// Set when the provider refused the request for a reason no retry can change (see
    /// `LlmError::is_permanent`).
    pub permanent: bool,
    /// Set when the provider refused the request as too long for the model's context window
    /// (never retried as it is: only a shorter request can succeed).
    pub context_overflow: bool,
    /// When the first streamed piece arrived.
    pub first_chunk: Option<Instant>,
    /// Set when a meter (a budget, a rate limit) refused the call before it went upstream;
    /// `error` then says so too, and the call is not retried.
    pub refused: Option<CallRefusal>,
    /// What the call cost, from its (possibly estimated) usage; None when the model has no prices.
    pub cost_usd: Option<f64>,
}

impl TurnOutput {
    /// Whether a budget refused the call: the run pauses (`budget_paused`) rather than fails.
    pub fn budget_paused(&self) -> bool {
        matches!(self.refused, Some(CallRefusal::Budget(_)))
    }

    /// The reasoning as a block of the stored answer: its text, and its signature, which is kept
    /// even without text (the provider needs it back to continue the turn).
    pub fn thinking_block(&self) -> Option<ContentBlock> {
        if self.thinking.is_empty() && self.signature.is_none() {
            return None;
        }
        Some(ContentBlock::Thinking {
            thinking: self.thinking.clone(),
            signature: self.signature.clone(),
        })
    }
}

/// What the client is told of a provider block: the search the provider ran, and the titles and
/// URLs it found (the pages' content is encrypted for the provider).
fn provider_block_note(block: &serde_json::Value) -> String {
    let Some(results) = block.get("content").and_then(serde_json::Value::as_array) else {
        return format!(
            "the provider ran its own tool: {}",
            elfgate_core::provider_block_label(block)
        );
    };
    let found: Vec<String> = results
        .iter()
        .filter_map(|r| {
            Some(format!(
                "{} <{}>",
                r.get("title")?.as_str()?,
                r.get("url")?.as_str()?
            ))
        })
        .collect();
    format!(
        "the provider's {} came back with {} results: {}",
        block["type"].as_str().unwrap_or("tool result"),
        found.len(),
        found.join("; ")
    )
}

/// How [`relay_turn`] relays a call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TurnOptions<'a> {
    /// Emit `streamDelta` events.
    pub relay_deltas: bool,
    /// Route `<think>...</think>` text into thinking (deltas and output).
    pub split_think: bool,
    /// Emit an `error` event when the call fails.
    pub report_errors: bool,
    /// The token that stops the call (default: the run's).
    pub cancel: Option<&'a tokio_util::sync::CancellationToken>,
    /// Retries the caller already made of this call (see [`stream_with_retry_from`]).
    pub retries_done: u32,
}

impl Default for TurnOptions<'_> {
    fn default() -> Self {
        TurnOptions {
            relay_deltas: true,
            split_think: false,
            report_errors: true,
            cancel: None,
            retries_done: 0,
        }
    }
}

/// Reports the error that ends a run before it produced anything, and the run's outcome.
pub(crate) async fn fail(
    ctx: &EngineSessionContext,
    code: ErrorCode,
    message: String,
) -> RunOutcome {
    let error = ErrorInfo::new(code, message);
    ctx.events
        .emit(EventPayload::Error {
            error: error.clone(),
        })
        .await;
    RunOutcome::failed(error)
}

/// The `retry` event of a retry about to happen.
pub(crate) fn retry_event(n: RetryNotice) -> EventPayload {
    EventPayload::Retry {
        retry: RetryInfo {
            attempt: n.attempt,
            max_attempts: n.max_attempts,
            delay_ms: n.delay.as_millis() as u64,
            reason: n.reason,
        },
    }
}

fn error_info(e: &LlmError) -> ErrorInfo {
    ErrorInfo::new(e.code(), e.to_string()).with_upstream_status(e.upstream_status())
}

/// A failed call's error, announced as an `error` event when `report` (see
/// [`TurnOptions::report_errors`]).
async fn report_error(
    e: &LlmError,
    events: &elfgate_core::EventEmitter,
    report: bool,
) -> ErrorInfo {
    let info = error_info(e);
    if report {
        events
            .emit(EventPayload::Error {
                error: info.clone(),
            })
            .await;
    }
    info
}

/// Sends a text piece to the output (and the events), split at `<think>` tags when asked.
async fn push_text(
    out: &mut TurnOutput,
    splitter: &mut Option<ThinkSplitter>,
    opts: &TurnOptions<'_>,
    ctx: &EngineSessionContext,
    t: String,
) {
    let pieces = match splitter {
        Some(sp) => sp.feed(&t),
        None => vec![(DeltaKind::Text, t)],
    };
    for (kind, text) in pieces {
        push_piece(out, opts, ctx, kind, text).await;
    }
}

async fn push_piece(
    out: &mut TurnOutput,
    opts: &TurnOptions<'_>,
    ctx: &EngineSessionContext,
    kind: DeltaKind,
    text: String,
) {
    if text.is_empty() {
        return;
    }
    match kind {
        DeltaKind::Text => out.text.push_str(&text),
        DeltaKind::Thinking => out.thinking.push_str(&text),
    }
    if opts.relay_deltas {
        ctx.events
            .emit(EventPayload::StreamDelta {
                delta: Delta {
                    kind,
                    text,
                    signature: None,
                },
            })
            .await;
    }
}

/// Bytes of streamed text counted as one token when the provider sent no figure: the usual
/// rule of thumb for English text and code with the providers' tokenizers.
const STREAMED_BYTES_PER_TOKEN: u64 = 4;

/// A call that streamed output but ended before the provider reported its usage (providers send
/// it last: an interrupt or a broken stream comes before it) still read its prompt and produced
/// those tokens, and they are billed: count the output from what was streamed and the input from
/// the request's size, each marked as an estimate. A figure the provider did send, partial or
/// not (Anthropic's prompt figures come first), is kept as it is.
fn estimate_unreported(req: &LlmRequest, out: &mut TurnOutput) {
    // Something was streamed: the provider had read the prompt.
    let streamed = !out.text.is_empty() || !out.thinking.is_empty() || !out.tool_calls.is_empty();
    if out.usage.input_tokens == 0 && out.finish.is_none() && streamed {
        out.usage.input_tokens = crate::metering::request_input_tokens(req);
        out.input_tokens_estimated = out.usage.input_tokens > 0;
    }
    if out.usage.output_tokens > 0 {
        return;
    }
    let bytes = out.text.len()
        + out.thinking.len()
        + out
            .tool_calls
            .iter()
            .map(|c| c.name.len() + c.arguments.len())
            .sum::<usize>();
    let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
    if bytes > 0 && out.finish.is_none() {
        out.usage.output_tokens = bytes.div_ceil(STREAMED_BYTES_PER_TOKEN);
        out.output_tokens_estimated = true;
    }
}

/// Where a model call goes: the provider's client, its configured name, the model's prices.
#[derive(Clone, Copy)]
pub(crate) struct CallTarget<'a> {
    /// The provider's client.
    pub provider: &'a dyn LlmProvider,
    /// Its configured name.
    pub name: &'a str,
    /// The model's prices (None: unpriced, the call has no cost).
    pub prices: Option<Prices>,
}

/// Streams one call and relays it as `opts` say: whether deltas are relayed, `<think>` tags
/// split, errors reported, and which token stops it. `started` is the run's start, for
/// time-to-first-token; `first` is the call's first attempt when it is already under way (the
/// run's head start). The run's meters are asked before the call and told its end (see
/// `elfgate_core::meter`); a refused call does not go upstream (a `first` attempt already under
/// way is dropped, which closes it) and comes back with `refused` set.
pub(crate) async fn relay_turn(
    target: CallTarget<'_>,
    req: &LlmRequest,
    policy: &RetryPolicy,
    ctx: &EngineSessionContext,
    started: Instant,
    opts: TurnOptions<'_>,
    first: Option<FirstAttempt>,
) -> TurnOutput {
    // No meter registered: nothing to ask, nothing to plan (a branch per call).
    let metered = if ctx.meters.is_empty() {
        None
    } else {
        let plan = crate::metering::call_plan(ctx, target.name, target.prices, req);
        let cancel = opts.cancel.unwrap_or(&ctx.cancel);
        match crate::metering::ask_meters(ctx, &plan, cancel).await {
            Ok(grant) => Some((plan, grant)),
            Err(refusal) => {
                drop(first);
                let error = crate::metering::refusal_error(ctx, &refusal, opts.report_errors).await;
                return TurnOutput {
                    error: Some(error),
                    no_retry: true,
                    permanent: true,
                    refused: Some(refusal),
                    ..TurnOutput::default()
                };
            }
        }
    };
    let provider = target.provider;
    let mut opened = false;
    let span = telemetry::chat_span(provider, req);
    let call_started = Instant::now();
    // The call's body is a block of its own so that each of its early returns still gets the
    // estimate.
    let mut out = async {
        let mut out = TurnOutput::default();
        let mut splitter = opts.split_think.then(ThinkSplitter::default);
        let cancel = opts.cancel.unwrap_or(&ctx.cancel);
        let events = &ctx.events;
        let metrics = &ctx.metrics;
        let mut retries = 0u32;
        let relay = opts.relay_deltas;
        let mut on_retry = |n: RetryNotice| {
            retries += 1;
            elfgate_core::telemetry::retry_event(n.attempt, n.max_attempts, n.delay, &n.reason);
            if !relay {
                return;
            }
            metrics.retry();
            // The provider client calls this synchronously, right before it sleeps until the retry:
            // the notice cannot wait for room in the log queue, and goes past its bound if need be
            // (one per retry, so it cannot flood it).
            events.emit_now(retry_event(n));
        };
        // A model call only while this node holds the session's lease (a fleet node paused or cut
        // off past it may have lost the session to another node, which ended this run).
        if !events.bus().lease().confirm(cancel).await {
            out.interrupted = true;
            return out;
        }
        opened = true;
        let connect = tokio::select! {
            biased;
            _ = cancel.cancelled() => Err(LlmError::Cancelled),
            r = stream_with_retry_from(
                provider, req, policy, cancel, &mut on_retry, first, opts.retries_done,
            ) => r,
        };
        out.retries = retries;
        let mut stream = match connect {
            Ok(s) => s,
            Err(LlmError::Cancelled) => {
                out.interrupted = true;
                return out;
            }
            Err(e) => {
                out.error = Some(report_error(&e, events, opts.report_errors).await);
                out.permanent = e.is_permanent();
                out.context_overflow = e.is_context_overflow();
                out.retry_after = e.retry_after();
                out.no_retry = matches!(
                    e,
                    LlmError::FirstTokenTimeout(_) | LlmError::MissingApiKey(_)
                ) || e.is_permanent()
                    || out.context_overflow
                    || !policy.accepts_retry_after(e.retry_after());
                return out;
            }
        };
        // Sub-agent calls (not relayed) stay out of the time-to-first-token metric.
        let mut first_token = opts.relay_deltas;
        // An item read ahead while merging deltas; Some(None) is the end of the stream.
        loop {
            if cancel.is_cancelled() {
                out.interrupted = true;
                return out;
            }
            // A burst from upstream arrives as one delta: the stream merges what is already
            // there (elfgate_llm's event stream), so nothing here waits for more.
            let next = tokio::select! {
                biased;
                _ = cancel.cancelled() => {
                    out.interrupted = true;
                    // Dropping the stream closes the upstream connection now.
                    drop(stream);
                    return out;
                }
                n = stream.next() => n,
            };
            let Some(item) = next else { break };
            if out.first_chunk.is_none() && item.is_ok() {
                out.first_chunk = Some(Instant::now());
            }
            match item {
                Ok(LlmEvent::TextDelta(t)) => {
                    if first_token {
                        first_token = false;
                        metrics.observe_ttft(started.elapsed());
                    }
                    push_text(&mut out, &mut splitter, &opts, ctx, t).await;
                }
                Ok(LlmEvent::ThinkingDelta(t)) => {
                    if first_token {
                        first_token = false;
                        metrics.observe_ttft(started.elapsed());
                    }
                    push_piece(&mut out, &opts, ctx, DeltaKind::Thinking, t).await;
                }
                Ok(LlmEvent::ThinkingSignature(s)) => {
                    // Relayed when it arrives (before the answer's text, in Anthropic's streams), so
                    // that a relay of the stream can close the thinking block with it.
                    if opts.relay_deltas {
                        ctx.events
                            .emit(EventPayload::StreamDelta {
                                delta: Delta {
                                    kind: DeltaKind::Thinking,
                                    text: String::new(),
                                    signature: Some(s.clone()),
                                },
                            })
                            .await;
                    }
                    out.signature = Some(s);
                }
                Ok(LlmEvent::ToolCall {
                    id,
                    name,
                    arguments,
                }) => out.tool_calls.push(RequestedToolCall {
                    id,
                    name,
                    arguments,
                }),
                Ok(LlmEvent::ProviderBlock { kind, block }) => {
                    if opts.relay_deltas {
                        ctx.events
                            .emit(EventPayload::Processing {
                                message: provider_block_note(&block),
                            })
                            .await;
                    }
                    out.provider_blocks.push(ContentBlock::ProviderBlock {
                        provider_kind: kind,
                        block,
                    });
                }
                // Each report replaces the one before (see LlmEvent::Usage).
                Ok(LlmEvent::Usage(usage)) => out.usage = usage,
                Ok(LlmEvent::Finish(reason)) => out.finish = Some(reason),
                Err(LlmError::Cancelled) => {
                    out.interrupted = true;
                    return out;
                }
                Err(e) => {
                    out.error = Some(report_error(&e, events, opts.report_errors).await);
                    return out;
                }
            }
        }
        if let Some(sp) = splitter.as_mut() {
            for (kind, text) in sp.finish() {
                push_piece(&mut out, &opts, ctx, kind, text).await;
            }
        }
        out
    }
    .instrument(span.clone())
    .await;
    estimate_unreported(req, &mut out);
    out.cost_usd = target.prices.map(|p| p.cost(&out.usage));
    let report = CallReport {
        usage: out.usage,
        input_tokens_estimated: out.input_tokens_estimated,
        output_tokens_estimated: out.output_tokens_estimated,
        cost_usd: out.cost_usd,
        made: opened,
    };
    // A call that used nothing (refused upstream before its first token) is no spend.
    if opened && out.usage != TokenUsage::default() {
        crate::metering::note_call(ctx, target.name, &req.model, &report);
    }
    if let Some((plan, grant)) = metered {
        ctx.meters.after_call(&plan, grant, &report).await;
    }
    telemetry::record_turn(&span, provider, req, &out, call_started);
    out
}
