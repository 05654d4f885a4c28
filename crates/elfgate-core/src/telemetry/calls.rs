//! The spans under a run's `invoke_agent`: `chat {model}` per model call, `execute_tool {tool}`
//! per tool call (with the permission wait beneath it), the context's compaction, and a
//! workflow's steps. Each is a disabled span (a branch) when nothing is traced.

use super::{TARGET, content, enabled, record_usage};
use crate::{ProviderKind, TokenUsage};
use opentelemetry::KeyValue;
use opentelemetry::trace::Status;
use std::time::Duration;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// `gen_ai.provider.name` of a provider kind, as the conventions spell it.
pub fn provider_name(kind: ProviderKind) -> &'static str {
    match kind {
        ProviderKind::Openai | ProviderKind::OpenaiResponses => "openai",
        ProviderKind::Anthropic => "anthropic",
        ProviderKind::Gemini => "gcp.gemini",
    }
}

/// A `chat {model}` span (a client span) under the current one.
pub fn chat_span(kind: ProviderKind, model: &str) -> tracing::Span {
    if !enabled() {
        return tracing::Span::none();
    }
    let span = tracing::info_span!(
        target: TARGET,
        "chat",
        otel.name = format!("chat {model}"),
        otel.kind = "client",
    );
    span.set_attribute("gen_ai.operation.name", "chat");
    span.set_attribute("gen_ai.provider.name", provider_name(kind));
    span.set_attribute("elfgate.provider.kind", kind.as_str());
    span.set_attribute("gen_ai.request.model", model.to_string());
    span
}

/// What a model call came to, for its span.
#[derive(Debug)]
pub struct ChatEnd<'a> {
    /// The provider kind and the model asked for (for the metrics).
    pub kind: ProviderKind,
    /// The model asked for.
    pub model: &'a str,
    /// Its tokens.
    pub usage: &'a TokenUsage,
    /// The provider's finish reason, when it gave one.
    pub finish: Option<&'a str>,
    /// From the call's start to its first streamed piece.
    pub first_chunk: Option<Duration>,
    /// From the call's start to its end.
    pub elapsed: Duration,
    /// Retries made before the first event.
    pub retries: u32,
    /// The error code that ended it.
    pub error: Option<&'a str>,
    /// The answer's text (kept only when content is captured).
    pub output: &'a str,
    /// What the call cost, when its model is priced.
    pub cost_usd: Option<f64>,
}

/// Records a model call's end on its span, and its metrics.
pub fn record_chat(span: &tracing::Span, end: &ChatEnd<'_>) {
    if span.is_disabled() {
        return;
    }
    record_usage(span, end.usage);
    span.set_attribute("gen_ai.response.model", end.model.to_string());
    if let Some(finish) = end.finish {
        span.set_attribute(
            "gen_ai.response.finish_reasons",
            opentelemetry::Value::Array(
                vec![opentelemetry::StringValue::from(finish.to_string())].into(),
            ),
        );
    }
    if let Some(ttfc) = end.first_chunk {
        span.set_attribute("elfgate.time_to_first_chunk", ttfc.as_secs_f64());
    }
    if let Some(cost) = end.cost_usd {
        span.set_attribute("elfgate.cost.usd", cost);
    }
    if end.retries > 0 {
        span.set_attribute("elfgate.retries", i64::from(end.retries));
    }
    if let Some(code) = end.error {
        span.set_attribute("error.type", code.to_string());
        span.set_status(Status::error(code.to_string()));
    }
    if let Some(text) = content(end.output) {
        span.set_attribute(
            "gen_ai.output.messages",
            super::messages("assistant", &text),
        );
    }
    super::record_model_call(
        provider_name(end.kind),
        end.model,
        end.elapsed,
        end.usage,
        end.error,
    );
}

/// A retry of a model call, as an event on its span (the current one).
pub fn retry_event(attempt: u32, max_attempts: u32, delay: Duration, reason: &str) {
    if !enabled() {
        return;
    }
    tracing::Span::current().add_event(
        "gen_ai.retry",
        vec![
            KeyValue::new("elfgate.retry.attempt", i64::from(attempt)),
            KeyValue::new("elfgate.retry.max_attempts", i64::from(max_attempts)),
            KeyValue::new(
                "elfgate.retry.delay_ms",
                i64::try_from(delay.as_millis()).unwrap_or(i64::MAX),
            ),
            KeyValue::new("elfgate.retry.reason", reason.to_string()),
        ],
    );
}

/// An `execute_tool {tool}` span under the current one.
pub fn tool_span(name: &str, call_id: &str, arguments: &str) -> tracing::Span {
    if !enabled() {
        return tracing::Span::none();
    }
    let span = tracing::info_span!(
        target: TARGET,
        "execute_tool",
        otel.name = format!("execute_tool {name}"),
        otel.kind = "internal",
    );
    span.set_attribute("gen_ai.operation.name", "execute_tool");
    span.set_attribute("gen_ai.tool.name", name.to_string());
    span.set_attribute("gen_ai.tool.call.id", call_id.to_string());
    if let Some(args) = content(arguments) {
        span.set_attribute("gen_ai.tool.call.arguments", args);
    }
    span
}

/// Records how a tool call ended: its status (`success`, `error`, `denied`, ...) and, for a
/// refusal, the gate that decided it (`elfgate.tool.gate`, set by [`record_refusal`]).
pub fn record_tool(span: &tracing::Span, status: &str, result: &str) {
    if span.is_disabled() {
        return;
    }
    span.set_attribute("elfgate.tool.status", status.to_string());
    if status != "denied" {
        span.set_attribute("elfgate.tool.decision", "allowed");
    }
    if status != "success" {
        span.set_attribute("error.type", status.to_string());
        span.set_status(Status::error(status.to_string()));
    }
    if let Some(text) = content(result) {
        span.set_attribute("gen_ai.tool.call.result", text);
    }
}

/// The gate that decided the current tool call: refused by `gate`, or allowed by all.
pub fn record_refusal(gate: &str) {
    if !enabled() {
        return;
    }
    let span = tracing::Span::current();
    span.set_attribute("elfgate.tool.decision", "denied");
    span.set_attribute("elfgate.tool.gate", gate.to_string());
}

/// A span for the wait for a client's answer to a permission request, under the tool call's.
pub fn permission_span(tool: &str) -> tracing::Span {
    if !enabled() {
        return tracing::Span::none();
    }
    let span = tracing::info_span!(
        target: TARGET,
        "permission_wait",
        otel.name = format!("permission_wait {tool}"),
        otel.kind = "internal",
    );
    span.set_attribute("gen_ai.tool.name", tool.to_string());
    span
}

/// Records the answer a permission wait got (`granted`, `denied`, `timeout`, ...).
pub fn record_permission(span: &tracing::Span, answer: &str) {
    if span.is_disabled() {
        return;
    }
    span.set_attribute("elfgate.permission.answer", answer.to_string());
}

/// A span for one compaction of the context (its summary call beneath it).
pub fn compaction_span(messages_dropped: usize) -> tracing::Span {
    if !enabled() {
        return tracing::Span::none();
    }
    let span = tracing::info_span!(
        target: TARGET,
        "compaction",
        otel.name = "compact_context",
        otel.kind = "internal",
    );
    span.set_attribute(
        "elfgate.compaction.messages_dropped",
        i64::try_from(messages_dropped).unwrap_or(i64::MAX),
    );
    span
}

/// A span for one workflow step (`step {id}`), its model or tool calls beneath it.
pub fn step_span(step_id: &str, kind: &str) -> tracing::Span {
    if !enabled() {
        return tracing::Span::none();
    }
    let span = tracing::info_span!(
        target: TARGET,
        "workflow_step",
        otel.name = format!("step {step_id}"),
        otel.kind = "internal",
    );
    span.set_attribute("elfgate.workflow.step.id", step_id.to_string());
    span.set_attribute("elfgate.workflow.step.kind", kind.to_string());
    span
}

/// Records how a workflow step ended.
pub fn record_step(span: &tracing::Span, status: &str, usage: Option<&TokenUsage>) {
    if span.is_disabled() {
        return;
    }
    span.set_attribute("elfgate.workflow.step.status", status.to_string());
    if let Some(usage) = usage {
        record_usage(span, usage);
    }
    if status == "failed" {
        span.set_status(Status::error(status.to_string()));
    }
}

/// Marks a tool call span as one a CLI ran and reported (its own gates decided it).
pub fn mark_reported(span: &tracing::Span) {
    if span.is_disabled() {
        return;
    }
    span.set_attribute("elfgate.tool.reported_by", "cli");
}
