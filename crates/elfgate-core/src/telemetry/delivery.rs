//! The span of a run-end delivery (a webhook or a session's `notifyUrl`): sent after the run
//! ended, often by a worker on another node, so it cannot be a child of the run's span in
//! memory; it is put in the run's trace by the trace id the run's record keeps.

use super::{TARGET, enabled};
use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// A `POST` client span for one attempt of a delivery of a run's end to `target`, in the trace
/// `trace_id` (the run's, 32 hex digits). A disabled span when nothing is traced or the run was
/// not (no trace id, or one that does not read).
///
/// The run's own span ended before the delivery: the span's parent is a remote context of the
/// run's trace (a span id of its own, as the run's span id is not kept), so that the call's
/// `traceparent` carries the run's trace id and a store files the delivery with the run.
pub fn delivery_span(trace_id: Option<&str>, target: &str, attempt: u32) -> tracing::Span {
    if !enabled() {
        return tracing::Span::none();
    }
    let Some(trace_id) = trace_id.and_then(|t| TraceId::from_hex(t).ok()) else {
        return tracing::Span::none();
    };
    if trace_id == TraceId::INVALID {
        return tracing::Span::none();
    }
    let span = tracing::info_span!(
        target: TARGET,
        "run_end_delivery",
        otel.name = "POST",
        otel.kind = "client",
    );
    let parent = SpanContext::new(
        trace_id,
        RandomIdGenerator::default().new_span_id(),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    let _ = span.set_parent(Context::new().with_remote_span_context(parent));
    span.set_attribute("http.request.method", "POST");
    span.set_attribute("elfgate.webhook.target", target.to_string());
    span.set_attribute("elfgate.webhook.attempt", i64::from(attempt));
    span
}
