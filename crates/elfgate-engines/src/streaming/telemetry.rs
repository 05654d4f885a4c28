//! A model call's `chat {model}` span, from the request and what the call came to (the spans
//! themselves: [`elfgate_core::telemetry`]).

use super::TurnOutput;
use elfgate_core::telemetry::{self, ChatEnd};
use elfgate_llm::{LlmFinishReason, LlmProvider, LlmRequest};
use std::time::Instant;

/// The model a request goes to: its own, else the provider's default.
fn model_of<'a>(provider: &'a dyn LlmProvider, req: &'a LlmRequest) -> &'a str {
    if req.model.is_empty() {
        provider.default_model().unwrap_or_default()
    } else {
        &req.model
    }
}

/// The call's span (disabled when nothing is traced).
pub(crate) fn chat_span(provider: &dyn LlmProvider, req: &LlmRequest) -> tracing::Span {
    if !telemetry::enabled() {
        return tracing::Span::none();
    }
    telemetry::chat_span(provider.kind(), model_of(provider, req))
}

/// The conventions' name of a finish reason.
fn finish_name(reason: &LlmFinishReason) -> &str {
    match reason {
        LlmFinishReason::Stop | LlmFinishReason::StopSequence(_) => "stop",
        LlmFinishReason::Length => "length",
        LlmFinishReason::ToolCalls => "tool_calls",
        LlmFinishReason::ContentFilter => "content_filter",
        LlmFinishReason::Paused => "pause_turn",
        LlmFinishReason::Other(other) => other,
    }
}

/// Records the call's end on its span (tokens, finish, time to first chunk, error) and its
/// metrics.
pub(crate) fn record_turn(
    span: &tracing::Span,
    provider: &dyn LlmProvider,
    req: &LlmRequest,
    out: &TurnOutput,
    started: Instant,
) {
    if span.is_disabled() {
        return;
    }
    let error = match (&out.error, out.interrupted) {
        (Some(e), _) => Some(e.code.as_str()),
        (None, true) => Some("interrupted"),
        (None, false) => None,
    };
    telemetry::record_chat(
        span,
        &ChatEnd {
            kind: provider.kind(),
            model: model_of(provider, req),
            usage: &out.usage,
            finish: out.finish.as_ref().map(finish_name),
            first_chunk: out.first_chunk.map(|t| t.duration_since(started)),
            elapsed: started.elapsed(),
            retries: out.retries,
            error,
            output: &out.text,
            cost_usd: out.cost_usd,
        },
    );
}
