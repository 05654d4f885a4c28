//! Runs as OpenTelemetry traces (`[telemetry]`): the switch, the run's `invoke_agent` span, and
//! W3C `traceparent` in and out.
//!
//! Spans are `tracing` spans of the target [`TARGET`]: the daemon's OpenTelemetry layer (present
//! only when `[telemetry]` is configured) is the only one that takes them, so that without it
//! creating one is a disabled callsite (a branch) and the log lines keep naming the run's `run`
//! span. Attributes go straight to the OpenTelemetry span ([`OpenTelemetrySpanExt`]), never
//! into the log.

mod calls;
mod delivery;
mod metrics;

pub use calls::{
    ChatEnd, chat_span, compaction_span, mark_reported, permission_span, provider_name,
    record_chat, record_permission, record_refusal, record_step, record_tool, retry_event,
    step_span, tool_span,
};
pub use delivery::delivery_span;

use crate::EngineSessionContext;
use metrics::Instruments;
use opentelemetry::metrics::Meter;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The `tracing` target of the spans (and span events) that become OpenTelemetry spans.
pub const TARGET: &str = "elfgate::trace";

static ENABLED: AtomicBool = AtomicBool::new(false);
static CONTENT_LIMIT: OnceLock<usize> = OnceLock::new();
static INSTRUMENTS: OnceLock<Instruments> = OnceLock::new();

/// Turns the spans on (the daemon's start, once its exporter is installed). `content_limit`:
/// the bytes of message and tool content kept on spans, None: no content (`capture_content`
/// off); `meter`: where the GenAI metrics are recorded.
pub fn enable(content_limit: Option<usize>, meter: &Meter) {
    if let Some(limit) = content_limit {
        let _ = CONTENT_LIMIT.set(limit);
    }
    let _ = INSTRUMENTS.set(Instruments::new(meter));
    ENABLED.store(true, Ordering::Release);
}

/// One model call's metrics: its duration and tokens, under the conventions' attributes.
pub fn record_model_call(
    provider: &str,
    model: &str,
    elapsed: std::time::Duration,
    usage: &crate::TokenUsage,
    error: Option<&str>,
) {
    if let Some(instruments) = INSTRUMENTS.get() {
        instruments.record(provider, model, elapsed, usage, error);
    }
}

/// Whether runs are traced.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// `text` cut to the content bound, when content is captured; None when it is not.
pub fn content(text: &str) -> Option<String> {
    CONTENT_LIMIT.get().map(|limit| cut(text, *limit))
}

/// One message of `role` holding `text`, as the conventions' `gen_ai.*.messages` write it (a JSON
/// array of messages with their parts).
pub fn messages(role: &str, text: &str) -> String {
    serde_json::json!([{"role": role, "parts": [{"type": "text", "content": text}]}]).to_string()
}

/// `text` cut to at most `limit` bytes at a character boundary, marked with `…` when cut.
fn cut(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_string();
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// What a run's trace takes from the request that started it: the caller's trace (its
/// `traceparent`, or the request's server span) and the principal it runs for.
#[derive(Debug, Clone, Default)]
pub struct RunTrace {
    /// The span the run's `invoke_agent` span is a child of; None: the run's trace is its own.
    pub parent: Option<opentelemetry::Context>,
    /// The principal's API key id, when the request came with a key.
    pub key_id: Option<String>,
    /// The principal's team.
    pub team: Option<String>,
}

impl RunTrace {
    /// The trace of a run started now, by the principal with `key_id` in `team`: None when
    /// nothing is traced (no allocation then).
    pub fn here(key_id: Option<&str>, team: Option<&str>) -> Option<RunTrace> {
        enabled().then(|| RunTrace {
            parent: current_parent(),
            key_id: key_id.map(str::to_string),
            team: team.map(str::to_string),
        })
    }
}

/// The trace a run started here belongs to: the current span's (a request's server span, the
/// caller's `traceparent`), to carry into the run's own task. None when nothing is traced or no
/// trace is under way.
pub fn current_parent() -> Option<opentelemetry::Context> {
    if !enabled() {
        return None;
    }
    let span_context = tracing::Span::current()
        .context()
        .span()
        .span_context()
        .clone();
    span_context
        .is_valid()
        .then(|| opentelemetry::Context::new().with_remote_span_context(span_context))
}

/// The context a caller's W3C trace headers (`traceparent`, `tracestate`) name; None when they
/// name none (absent or malformed: the trace starts here).
pub fn extract_parent(get: impl Fn(&str) -> Option<String>) -> Option<opentelemetry::Context> {
    struct Headers(Vec<(&'static str, String)>);
    impl Extractor for Headers {
        fn get(&self, key: &str) -> Option<&str> {
            self.0
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(key))
                .map(|(_, v)| v.as_str())
        }
        fn keys(&self) -> Vec<&str> {
            self.0.iter().map(|(k, _)| *k).collect()
        }
    }
    let found: Vec<(&'static str, String)> = ["traceparent", "tracestate"]
        .into_iter()
        .filter_map(|k| get(k).map(|v| (k, v)))
        .collect();
    if found.is_empty() {
        return None;
    }
    let cx = TraceContextPropagator::new().extract(&Headers(found));
    cx.span().span_context().is_valid().then_some(cx)
}

/// The W3C headers (`traceparent`, and `tracestate` when there is one) that make a call made
/// now a child of the current span; empty when nothing is traced.
pub fn outgoing_headers() -> Vec<(&'static str, String)> {
    struct Headers(Vec<(&'static str, String)>);
    impl Injector for Headers {
        fn set(&mut self, key: &str, value: String) {
            match key {
                "traceparent" => self.0.push(("traceparent", value)),
                "tracestate" if !value.is_empty() => self.0.push(("tracestate", value)),
                _ => {}
            }
        }
    }
    if !enabled() {
        return Vec::new();
    }
    let cx = tracing::Span::current().context();
    if !cx.span().span_context().is_valid() {
        return Vec::new();
    }
    let mut headers = Headers(Vec::with_capacity(1));
    TraceContextPropagator::new().inject_context(&cx, &mut headers);
    headers.0
}

/// The trace and span ids of `span` (lowercase hex), when it is traced.
pub fn ids_of(span: &tracing::Span) -> Option<(String, String)> {
    if !enabled() || span.is_disabled() {
        return None;
    }
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid()
        .then(|| (sc.trace_id().to_string(), sc.span_id().to_string()))
}

/// The id of the trace the current span belongs to.
pub fn current_trace_id() -> Option<String> {
    ids_of(&tracing::Span::current()).map(|(trace, _)| trace)
}

/// Makes a run's `run` span its trace's `invoke_agent {name}` span (`invoke_workflow {name}`
/// for a workflow's run), child of the trace its context carries (else a trace of its own), and
/// records the trace's ids on it for the log. Nothing when nothing is traced.
///
/// One span for both: the log's lines name the span stack's innermost span the log takes, and
/// tasks an engine spawns carry the current span only, so a second span for the trace would
/// hide the run's ids from their lines.
pub fn start_run(span: &tracing::Span, ctx: &EngineSessionContext) {
    if !enabled() || span.is_disabled() {
        return;
    }
    match &ctx.engine_config.workflow {
        Some(workflow) if ctx.session.engine == crate::EngineType::Workflow => {
            span.record(
                "otel.name",
                format!("invoke_workflow {}", workflow.name).as_str(),
            );
            span.set_attribute("gen_ai.operation.name", "invoke_workflow");
            span.set_attribute("elfgate.workflow.name", workflow.name.clone());
            span.set_attribute("elfgate.workflow.version", i64::from(workflow.version));
        }
        _ => {
            let name = agent_name(ctx);
            span.record("otel.name", format!("invoke_agent {name}").as_str());
            span.set_attribute("gen_ai.operation.name", "invoke_agent");
            span.set_attribute("gen_ai.agent.name", name);
        }
    }
    span.record("otel.kind", "internal");
    if let Some(parent) = ctx.trace.as_ref().and_then(|t| t.parent.clone()) {
        let _ = span.set_parent(parent);
    }
    span.set_attribute("gen_ai.conversation.id", ctx.session_id().to_string());
    span.set_attribute("elfgate.run.id", ctx.run_id.to_string());
    span.set_attribute("elfgate.engine", ctx.session.engine.as_str());
    span.set_attribute("elfgate.owner", ctx.session.ownership.owner.clone());
    let principal = ctx.trace.as_ref();
    let team = principal.and_then(|t| t.team.clone());
    span.set_attribute(
        "elfgate.team",
        team.unwrap_or_else(|| ctx.session.ownership.team.clone()),
    );
    if let Some(key_id) = principal.and_then(|t| t.key_id.clone()) {
        span.set_attribute("elfgate.key.id", key_id);
    }
    if let Some(provider) = &ctx.provider_id {
        span.set_attribute("elfgate.provider", provider.clone());
    }
    if let Some(model) = &ctx.model {
        span.set_attribute("gen_ai.request.model", model.clone());
    }
    if let Some(node) = &ctx.node {
        span.set_attribute("elfgate.node.id", node.to_string());
    }
    if let Some(prompt) = content(&ctx.prompt) {
        span.set_attribute("gen_ai.input.messages", messages("user", &prompt));
    }
    if let Some((trace_id, span_id)) = ids_of(span) {
        span.record("trace_id", trace_id.as_str());
        span.record("span_id", span_id.as_str());
    }
}

/// The agent a run is: its agent profile, else the CLI it runs, else its engine.
fn agent_name(ctx: &EngineSessionContext) -> String {
    if let Some(profile) = &ctx.agent_id {
        return profile.clone();
    }
    match (ctx.session.engine, ctx.cli_backend) {
        (crate::EngineType::Cli, Some(backend)) => backend.as_str().to_string(),
        (engine, _) => engine.as_str().to_string(),
    }
}

/// An `invoke_agent {name}` span under the current one (a run's, or a sub-agent's under the
/// tool call that started it).
pub fn agent_span(name: &str) -> tracing::Span {
    if !enabled() {
        return tracing::Span::none();
    }
    let span = tracing::info_span!(
        target: TARGET,
        "invoke_agent",
        otel.name = format!("invoke_agent {name}"),
        otel.kind = "internal",
    );
    span.set_attribute("gen_ai.operation.name", "invoke_agent");
    span.set_attribute("gen_ai.agent.name", name.to_string());
    span
}

/// Sets the GenAI token counts of `usage` on `span` (`gen_ai.usage.*`).
pub fn record_usage(span: &tracing::Span, usage: &crate::TokenUsage) {
    if span.is_disabled() {
        return;
    }
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    span.set_attribute("gen_ai.usage.input_tokens", count(usage.input_tokens));
    span.set_attribute("gen_ai.usage.output_tokens", count(usage.output_tokens));
    span.set_attribute(
        "gen_ai.usage.cache_read.input_tokens",
        count(usage.cache_read_tokens),
    );
    span.set_attribute(
        "gen_ai.usage.cache_creation.input_tokens",
        count(usage.cache_write_tokens),
    );
}

/// Records how a run ended on its `invoke_agent` span: its tokens, the finish reason and, when
/// it failed, `error.type` and the span's error status.
pub fn record_end(span: &tracing::Span, outcome: &crate::RunOutcome) {
    if span.is_disabled() {
        return;
    }
    record_usage(span, &outcome.usage);
    record_finish(
        span,
        outcome.finish_reason,
        outcome.error.as_ref().map(|e| e.code.as_str()),
    );
}

/// Records the finish reason on an `invoke_agent` span and, when it failed, `error.type` and the
/// span's error status.
pub fn record_finish(span: &tracing::Span, finish: crate::FinishReason, error: Option<&str>) {
    if span.is_disabled() {
        return;
    }
    span.set_attribute("elfgate.finish_reason", finish.as_str());
    span.set_attribute(
        "gen_ai.response.finish_reasons",
        opentelemetry::Value::Array(vec![opentelemetry::StringValue::from(finish.as_str())].into()),
    );
    if let Some(code) = error {
        span.set_attribute("error.type", code.to_string());
        span.set_status(opentelemetry::trace::Status::error(code.to_string()));
    }
}

#[cfg(test)]
mod tests;
