//! The span pipeline's bounds: a queue of at most `max_queue_size` finished spans (past it a span
//! is dropped and counted), and an exporter that counts the spans of a batch it could not
//! deliver and says so in the log at most once a minute. A run never waits for either.

use opentelemetry::Context;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{BatchSpanProcessor, Span, SpanData, SpanExporter, SpanProcessor};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often an unreachable collector is logged at most.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// What the pipeline counts, shared by its two ends.
#[derive(Debug, Default)]
pub struct ExportStats {
    /// Spans handed to the queue and not yet through an export.
    in_flight: AtomicUsize,
    /// Spans that will never reach the collector.
    dropped: AtomicU64,
    /// When an undelivered batch was last logged.
    last_warned: Mutex<Option<Instant>>,
}

impl ExportStats {
    /// Spans dropped since the start.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    fn drop_spans(&self, n: usize) {
        self.dropped.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Logs an undelivered batch, unless one was logged less than a minute ago.
    fn warn(&self, spans: usize, error: &dyn std::fmt::Display) {
        let Ok(mut last) = self.last_warned.lock() else {
            return;
        };
        if last.is_some_and(|t| t.elapsed() < WARN_EVERY) {
            return;
        }
        *last = Some(Instant::now());
        tracing::warn!(
            spans,
            error = %error,
            "telemetry: the trace collector did not take a batch of spans; they are dropped \
             (counted in elfgate_telemetry_spans_dropped_total; logged at most once a minute)"
        );
    }
}

/// The batch processor behind a gate that keeps at most `capacity` spans queued or in an export.
#[derive(Debug)]
pub struct Bounded {
    pub inner: BatchSpanProcessor,
    pub stats: Arc<ExportStats>,
    pub capacity: usize,
}

impl SpanProcessor for Bounded {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.stats.in_flight.fetch_add(1, Ordering::AcqRel) >= self.capacity {
            self.stats.in_flight.fetch_sub(1, Ordering::AcqRel);
            self.stats.drop_spans(1);
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// An exporter that counts what it could not deliver.
#[derive(Debug)]
pub struct Counted<E> {
    pub inner: E,
    pub stats: Arc<ExportStats>,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len();
        let result = self.inner.export(batch).await;
        self.stats.in_flight.fetch_sub(n, Ordering::AcqRel);
        if let Err(e) = &result {
            self.stats.drop_spans(n);
            self.stats.warn(n, e);
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
