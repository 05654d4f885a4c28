//! The span mapping, exported to the SDK's in-memory exporter: a tinyelf-like run with two tool
//! calls (one refused by the firewall) and a sub-agent gives the tree of the conventions, and
//! with content capture off no prompt text is on any span.

use super::*;
use crate::dispatcher::tests::Ledger;
use crate::{EngineType, EventHub, FinishReason, Metrics, RunOutcome, TokenUsage};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use std::sync::Arc;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;

const PROMPT: &str = "the user's private prompt";

/// A tinyelf run's context with a prompt and a model.
fn context() -> EngineSessionContext {
    let (log, _rx) = crate::log_queue::log_channel(crate::log_queue::LOG_QUEUE_EVENTS);
    let hub = EventHub::new(log, Arc::new(Metrics::default()));
    let mut ctx = crate::dispatcher::tests::context(&hub, Arc::new(Ledger::default()));
    ctx.session.engine = EngineType::TinyElf;
    ctx.prompt = PROMPT.into();
    ctx.model = Some("gpt-test".into());
    ctx
}

fn model_call(model: &str, input: u64, output: u64) {
    let span = chat_span(crate::ProviderKind::Openai, model);
    let usage = TokenUsage {
        input_tokens: input,
        output_tokens: output,
        ..Default::default()
    };
    record_chat(
        &span,
        &ChatEnd {
            kind: crate::ProviderKind::Openai,
            model,
            usage: &usage,
            finish: Some("stop"),
            first_chunk: None,
            elapsed: std::time::Duration::from_millis(5),
            retries: 0,
            error: None,
            output: "an answer",
            cost_usd: None,
        },
    );
}

/// The spans a scripted run leaves, as the daemon's layer exports them.
fn run_spans() -> (EngineSessionContext, Vec<SpanData>) {
    let meter = opentelemetry::global::meter("test");
    enable(None, &meter);
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("test"))
        .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
            meta.target() == TARGET || meta.fields().field("otel.name").is_some()
        }));
    let ctx = context();
    tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
        let run = tracing::info_span!(
            "run",
            trace_id = tracing::field::Empty,
            span_id = tracing::field::Empty,
            otel.name = tracing::field::Empty,
            otel.kind = tracing::field::Empty,
        );
        start_run(&run, &ctx);
        run.in_scope(|| {
            model_call("gpt-test", 10, 2);
            tool_span("read_file", "ok", "{\"path\":\"a.txt\"}")
                .in_scope(|| record_tool(&tracing::Span::current(), "success", "hello"));
            let refused = tool_span("read_file", "fw", "{\"path\":\"/etc/hostname\"}");
            refused.in_scope(|| record_refusal("firewall"));
            record_tool(&refused, "denied", "Tool call denied");
            drop(refused);
            model_call("gpt-test", 20, 3);
            let spawn = tool_span("spawn", "sp", "{\"task\":\"say hi\"}");
            spawn.in_scope(|| {
                let helper = agent_span("helper");
                helper.in_scope(|| model_call("gpt-mini", 5, 1));
                record_finish(&helper, FinishReason::Stop, None);
            });
            record_tool(&spawn, "success", "hi");
        });
        let mut outcome = RunOutcome::new(FinishReason::Stop);
        outcome.usage.input_tokens = 35;
        outcome.usage.output_tokens = 6;
        record_end(&run, &outcome);
    });
    let spans = exporter.get_finished_spans().unwrap();
    (ctx, spans)
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

#[test]
fn a_run_maps_to_the_genai_span_tree_without_its_content() {
    let (ctx, spans) = run_spans();
    let root = named(&spans, "invoke_agent tinyelf");
    assert_eq!(
        root.len(),
        1,
        "{:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let root = root[0];
    let root_id = root.span_context.span_id();
    assert_eq!(
        attr(root, "gen_ai.operation.name").as_deref(),
        Some("invoke_agent")
    );
    assert_eq!(
        attr(root, "gen_ai.conversation.id"),
        Some(ctx.session_id().to_string())
    );
    assert_eq!(attr(root, "elfgate.run.id"), Some(ctx.run_id.to_string()));
    assert_eq!(
        attr(root, "gen_ai.usage.input_tokens").as_deref(),
        Some("35")
    );
    assert_eq!(attr(root, "elfgate.finish_reason").as_deref(), Some("stop"));

    let chats: Vec<_> = named(&spans, "chat gpt-test");
    assert_eq!(chats.len(), 2);
    assert!(chats.iter().all(|c| c.parent_span_id == root_id));
    assert_eq!(chats[0].span_kind, opentelemetry::trace::SpanKind::Client);
    assert_eq!(
        attr(chats[0], "gen_ai.provider.name").as_deref(),
        Some("openai")
    );

    let reads = named(&spans, "execute_tool read_file");
    assert_eq!(reads.len(), 2);
    let refused = reads
        .iter()
        .find(|s| attr(s, "gen_ai.tool.call.id").as_deref() == Some("fw"))
        .unwrap();
    assert_eq!(
        attr(refused, "elfgate.tool.gate").as_deref(),
        Some("firewall")
    );
    assert_eq!(
        attr(refused, "elfgate.tool.decision").as_deref(),
        Some("denied")
    );
    let allowed = reads
        .iter()
        .find(|s| attr(s, "gen_ai.tool.call.id").as_deref() == Some("ok"))
        .unwrap();
    assert_eq!(
        attr(allowed, "elfgate.tool.decision").as_deref(),
        Some("allowed")
    );
    assert!(reads.iter().all(|s| s.parent_span_id == root_id));

    let spawn = named(&spans, "execute_tool spawn")[0];
    let helper = named(&spans, "invoke_agent helper")[0];
    assert_eq!(helper.parent_span_id, spawn.span_context.span_id());
    let sub_chat = named(&spans, "chat gpt-mini")[0];
    assert_eq!(sub_chat.parent_span_id, helper.span_context.span_id());
    assert!(
        spans
            .iter()
            .all(|s| s.span_context.trace_id() == root.span_context.trace_id())
    );

    // Content capture is off: no prompt, argument, result or answer on any span.
    let everything = format!("{spans:?}");
    for text in [PROMPT, "/etc/hostname", "an answer", "hello"] {
        assert!(!everything.contains(text), "{text} was exported");
    }
}

#[test]
fn content_is_cut_at_a_character_boundary() {
    assert_eq!(cut("abc", 4), "abc");
    assert_eq!(cut("ab\u{e9}\u{e9}", 4), "ab\u{e9}…");
}

#[test]
fn without_trace_headers_there_is_no_parent() {
    assert!(extract_parent(|_| None).is_none());
    assert!(extract_parent(|k| (k == "traceparent").then(|| "garbage".to_string())).is_none());
    let cx = extract_parent(|k| {
        (k == "traceparent")
            .then(|| "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_string())
    });
    let cx = cx.expect("a valid traceparent");
    assert_eq!(
        cx.span().span_context().trace_id().to_string(),
        "4bf92f3577b34da6a3ce929d0e0e4736"
    );
}
