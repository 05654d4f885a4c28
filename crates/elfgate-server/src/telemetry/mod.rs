//! `[telemetry]`: the OpenTelemetry pipeline (docs/observability.md). Runs become traces in the
//! GenAI semantic conventions (the spans are made where the work is: see
//! [`elfgate_core::telemetry`]), exported over OTLP/HTTP with protobuf bodies by a batch
//! processor on a thread of its own; the GenAI metrics go the same way. Absent: none of this
//! exists, not even the subscriber's layer.

mod export;
pub mod requests;

use crate::config::TelemetryConfig;
use export::{Bounded, Counted, ExportStats};
use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider,
};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

/// Why the pipeline could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// An exporter refused its settings (an endpoint it cannot use, say).
    #[error("telemetry: {0}")]
    Exporter(String),
    /// A header's variable is missing (checked at load; read again at start).
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
}

/// The pipeline's counts, for the Prometheus endpoint (set once the pipeline is built).
static STATS: OnceLock<Arc<ExportStats>> = OnceLock::new();

/// The running pipeline; [`Telemetry::shutdown`] sends what is left.
pub struct Telemetry {
    tracer_provider: SdkTracerProvider,
    meter_provider: SdkMeterProvider,
    shutdown_timeout: Duration,
}

/// The collector's URL for one signal: the configured base URL with the signal's path, else
/// None (the exporter then reads the standard `OTEL_EXPORTER_OTLP_*` variables).
fn signal_url(config: &TelemetryConfig, path: &str) -> Option<String> {
    config
        .otlp_endpoint
        .as_deref()
        .map(|base| format!("{}/{path}", base.trim_end_matches('/')))
}

impl Telemetry {
    /// Builds the pipeline and turns the spans on. `node`: the fleet node's id.
    pub fn start(
        config: &TelemetryConfig,
        node: Option<&str>,
    ) -> Result<Telemetry, TelemetryError> {
        let headers: std::collections::HashMap<String, String> =
            config.headers()?.into_iter().collect();
        let timeout = Duration::from_millis(config.export_timeout_ms);
        let resource = resource(config, node);

        let mut spans = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_timeout(timeout)
            .with_headers(headers.clone());
        if let Some(url) = signal_url(config, "v1/traces") {
            spans = spans.with_endpoint(url);
        }
        let spans = spans
            .build()
            .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        let stats = Arc::new(ExportStats::default());
        let batch = BatchSpanProcessor::builder(Counted {
            inner: spans,
            stats: stats.clone(),
        })
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_max_queue_size(config.max_queue_size)
                .with_max_export_batch_size(config.max_queue_size.min(512))
                .with_scheduled_delay(Duration::from_secs(1))
                .build(),
        )
        .build();
        let tracer_provider = SdkTracerProvider::builder()
            .with_span_processor(Bounded {
                inner: batch,
                stats: stats.clone(),
                capacity: config.max_queue_size,
            })
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                config.sampling_ratio,
            ))))
            .with_resource(resource.clone())
            .build();

        let mut metrics = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_timeout(timeout)
            .with_headers(headers);
        if let Some(url) = signal_url(config, "v1/metrics") {
            metrics = metrics.with_endpoint(url);
        }
        let metrics = metrics
            .build()
            .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        let meter_provider = SdkMeterProvider::builder()
            .with_reader(
                PeriodicReader::builder(metrics)
                    .with_interval(Duration::from_millis(config.metrics_interval_ms))
                    .build(),
            )
            .with_resource(resource)
            .build();

        let _ = STATS.set(stats);
        elfgate_core::telemetry::enable(
            config.capture_content.then_some(config.max_content_bytes),
            &opentelemetry::metrics::MeterProvider::meter(&meter_provider, "elfgate"),
        );
        Ok(Telemetry {
            tracer_provider,
            meter_provider,
            shutdown_timeout: Duration::from_millis(config.shutdown_timeout_ms),
        })
    }

    /// The subscriber's layer that turns the daemon's trace spans (target
    /// [`elfgate_core::telemetry::TARGET`], and only those) into OpenTelemetry spans.
    pub fn layer<S>(&self) -> Box<dyn Layer<S> + Send + Sync>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.tracer_provider.tracer("elfgate"))
            // Only what the conventions name: no source locations, threads or busy/idle times.
            .with_location(false)
            .with_threads(false)
            .with_level(false)
            .with_target(false)
            .with_tracked_inactivity(false)
            // The trace spans, and a run's `run` span (which names its `otel.name`).
            .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
                meta.target() == elfgate_core::telemetry::TARGET
                    || meta.fields().field("otel.name").is_some()
            }))
            .boxed()
    }

    /// Sends the spans and metrics still queued, waiting at most `shutdown_timeout_ms` for
    /// each (the collector may be gone), off the runtime's threads.
    pub async fn shutdown(self) {
        let Telemetry {
            tracer_provider,
            meter_provider,
            shutdown_timeout,
        } = self;
        let done = tokio::task::spawn_blocking(move || {
            if let Err(e) = tracer_provider.shutdown_with_timeout(shutdown_timeout) {
                tracing::warn!(error = %e, "telemetry: the last spans were not all sent");
            }
            if let Err(e) = meter_provider.shutdown_with_timeout(shutdown_timeout) {
                tracing::debug!(error = %e, "telemetry: the last metrics were not all sent");
            }
        });
        // The providers' own bounds hold; this one is for a thread that would not come back.
        let _ = tokio::time::timeout(shutdown_timeout * 3, done).await;
    }
}

/// The resource: `service.name`, the configured attributes and, on a fleet node, its id.
fn resource(config: &TelemetryConfig, node: Option<&str>) -> Resource {
    let mut builder = Resource::builder();
    if let Some(name) = &config.service_name {
        builder = builder.with_service_name(name.clone());
    } else if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        builder = builder.with_service_name("elfgate");
    }
    builder = builder
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .with_attributes(
            config
                .resource_attributes
                .iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
        );
    if let Some(node) = node {
        builder = builder
            .with_attribute(KeyValue::new("service.instance.id", node.to_string()))
            .with_attribute(KeyValue::new("elfgate.node.id", node.to_string()));
    }
    builder.build()
}

/// The pipeline's counters in Prometheus' text format; empty when nothing is traced.
pub fn render_prometheus() -> String {
    let Some(stats) = STATS.get() else {
        return String::new();
    };
    format!(
        "# HELP elfgate_telemetry_spans_dropped_total Trace spans that did not reach the collector \
         (queue full, or an export that failed).\n\
         # TYPE elfgate_telemetry_spans_dropped_total counter\n\
         elfgate_telemetry_spans_dropped_total {}\n",
        stats.dropped()
    )
}
