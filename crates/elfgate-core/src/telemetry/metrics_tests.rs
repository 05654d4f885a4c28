//! The GenAI metrics of model calls, read from the SDK's in-memory metric exporter: the token
//! histogram by token type, the duration histogram, their attributes, and a failed call's
//! `error.type` with no tokens.

use super::Instruments;
use crate::TokenUsage;
use opentelemetry::KeyValue;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::metrics::data::{
    AggregatedMetrics, MetricData, ResourceMetrics, ScopeMetrics,
};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use std::time::Duration;

/// One histogram data point: its attributes (sorted by key), count and sum.
type Point = (Vec<(String, String)>, u64, f64);

fn attributes<'a>(kv: impl Iterator<Item = &'a KeyValue>) -> Vec<(String, String)> {
    let mut all: Vec<(String, String)> = kv
        .map(|kv| (kv.key.to_string(), kv.value.to_string()))
        .collect();
    all.sort();
    all
}

/// The data points of the histogram `name`, with its unit.
fn histogram(metrics: &[ResourceMetrics], name: &str) -> (String, Vec<Point>) {
    let metric = metrics
        .iter()
        .flat_map(ResourceMetrics::scope_metrics)
        .flat_map(ScopeMetrics::metrics)
        .filter(|m| m.name() == name)
        .last()
        .unwrap_or_else(|| panic!("no metric {name}"));
    let mut points: Vec<Point> = match metric.data() {
        AggregatedMetrics::U64(MetricData::Histogram(h)) => h
            .data_points()
            .map(|p| (attributes(p.attributes()), p.count(), p.sum() as f64))
            .collect(),
        AggregatedMetrics::F64(MetricData::Histogram(h)) => h
            .data_points()
            .map(|p| (attributes(p.attributes()), p.count(), p.sum()))
            .collect(),
        other => panic!("{name} is not a histogram: {other:?}"),
    };
    points.sort_by(|a, b| a.0.cmp(&b.0));
    (metric.unit().to_string(), points)
}

fn attrs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut all: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect();
    all.sort();
    all
}

#[test]
fn model_calls_record_the_genai_token_and_duration_histograms() {
    let exporter = InMemoryMetricExporter::default();
    let provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();
    let instruments = Instruments::new(&provider.meter("test"));
    let usage = |input, output| TokenUsage {
        input_tokens: input,
        output_tokens: output,
        ..Default::default()
    };
    instruments.record(
        "openai",
        "gpt-test",
        Duration::from_millis(250),
        &usage(100, 7),
        None,
    );
    instruments.record(
        "openai",
        "gpt-test",
        Duration::from_millis(750),
        &usage(20, 3),
        None,
    );
    instruments.record(
        "anthropic",
        "claude-test",
        Duration::from_millis(500),
        &usage(0, 0),
        Some("upstream_error"),
    );
    provider.force_flush().unwrap();
    let metrics = exporter.get_finished_metrics().unwrap();

    let call = |provider: &'static str, model: &'static str| {
        vec![
            ("gen_ai.operation.name", "chat"),
            ("gen_ai.provider.name", provider),
            ("gen_ai.request.model", model),
        ]
    };
    let with = |mut base: Vec<(&'static str, &'static str)>,
                extra: (&'static str, &'static str)| {
        base.push(extra);
        attrs(&base)
    };

    // Tokens: one point per token type of the calls that answered, none for the failed call.
    let (unit, tokens) = histogram(&metrics, "gen_ai.client.token.usage");
    assert_eq!(unit, "{token}");
    let openai = call("openai", "gpt-test");
    let mut want = vec![
        (
            with(openai.clone(), ("gen_ai.token.type", "input")),
            2,
            120.0,
        ),
        (
            with(openai.clone(), ("gen_ai.token.type", "output")),
            2,
            10.0,
        ),
    ];
    want.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(tokens, want);

    // Duration: in seconds, each call counted, the failed one under its error.type.
    let (unit, durations) = histogram(&metrics, "gen_ai.client.operation.duration");
    assert_eq!(unit, "s");
    let mut want = vec![
        (attrs(&openai), 2, 1.0),
        (
            with(
                call("anthropic", "claude-test"),
                ("error.type", "upstream_error"),
            ),
            1,
            0.5,
        ),
    ];
    want.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(durations.len(), want.len(), "{durations:?}");
    for ((got_attrs, got_count, got_sum), (want_attrs, want_count, want_sum)) in
        durations.iter().zip(&want)
    {
        assert_eq!(got_attrs, want_attrs);
        assert_eq!(got_count, want_count);
        assert!((got_sum - want_sum).abs() < 1e-9, "{got_sum} != {want_sum}");
    }
}
