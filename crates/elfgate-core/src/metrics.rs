//! Daemon metrics kept in atomics, so that recording one never blocks the hot path.

use crate::model::FinishReason;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the time-to-first-token histogram buckets.
pub const TTFT_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

const REASONS: [FinishReason; 9] = [
    FinishReason::Stop,
    FinishReason::MaxIterations,
    FinishReason::Interrupted,
    FinishReason::Error,
    FinishReason::DaemonRestart,
    FinishReason::NodeLost,
    FinishReason::NodeShutdown,
    FinishReason::BudgetExhausted,
    FinishReason::BudgetPaused,
];

/// Counters and histograms of the daemon.
#[derive(Debug, Default)]
pub struct Metrics {
    events_published: AtomicU64,
    runs_started: AtomicU64,
    runs_finished: [AtomicU64; 9],
    ttft_buckets: [AtomicU64; 12],
    ttft_count: AtomicU64,
    ttft_sum_micros: AtomicU64,
    retries: AtomicU64,
    log_queue_waits: AtomicU64,
    log_queue_overflows: AtomicU64,
    /// Spend and tokens by team and model.
    pub spend: crate::spend::SpendCounters,
}

impl Metrics {
    /// Counts a published event.
    pub fn event_published(&self) {
        self.events_published.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a started run.
    pub fn run_started(&self) {
        self.runs_started.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a finished run by reason.
    pub fn run_finished(&self, reason: FinishReason) {
        if let Some(i) = REASONS.iter().position(|r| *r == reason) {
            self.runs_finished[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts an upstream retry.
    pub fn retry(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a publisher that waited for room in the event log queue.
    pub fn log_queue_wait(&self) {
        self.log_queue_waits.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an event published past the log queue's bound (by a caller that could not wait).
    pub fn log_queue_overflow(&self) {
        self.log_queue_overflows.fetch_add(1, Ordering::Relaxed);
    }

    /// Records the time from a run's start to its first streamed token.
    pub fn observe_ttft(&self, d: Duration) {
        let secs = d.as_secs_f64();
        for (i, bound) in TTFT_BUCKETS.iter().enumerate() {
            if secs <= *bound {
                self.ttft_buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.ttft_count.fetch_add(1, Ordering::Relaxed);
        self.ttft_sum_micros
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    /// Events published so far.
    pub fn events_published(&self) -> u64 {
        self.events_published.load(Ordering::Relaxed)
    }

    /// Renders the Prometheus text format; `active_runs` comes from the active map.
    pub fn render_prometheus(&self, active_runs: usize) -> String {
        let mut out = String::with_capacity(2048);
        let _ = writeln!(out, "# HELP elfgate_active_runs Runs going on now.");
        let _ = writeln!(out, "# TYPE elfgate_active_runs gauge");
        let _ = writeln!(out, "elfgate_active_runs {active_runs}");
        let _ = writeln!(out, "# HELP elfgate_runs_started_total Runs started.");
        let _ = writeln!(out, "# TYPE elfgate_runs_started_total counter");
        let _ = writeln!(
            out,
            "elfgate_runs_started_total {}",
            self.runs_started.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP elfgate_runs_total Runs ended, by finish reason."
        );
        let _ = writeln!(out, "# TYPE elfgate_runs_total counter");
        for (i, r) in REASONS.iter().enumerate() {
            let _ = writeln!(
                out,
                "elfgate_runs_total{{finish_reason=\"{}\"}} {}",
                r.as_str(),
                self.runs_finished[i].load(Ordering::Relaxed)
            );
        }
        let counters = [
            (
                "elfgate_events_published_total",
                "Events published.",
                self.events_published(),
            ),
            (
                "elfgate_llm_retries_total",
                "Upstream calls retried.",
                self.retries.load(Ordering::Relaxed),
            ),
            (
                "elfgate_log_queue_waits_total",
                "Events whose publisher waited for room in the event log queue.",
                self.log_queue_waits.load(Ordering::Relaxed),
            ),
            (
                "elfgate_log_queue_overflows_total",
                "Events queued past the event log queue's bound by a publisher that could not wait.",
                self.log_queue_overflows.load(Ordering::Relaxed),
            ),
        ];
        for (name, help, value) in counters {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            let _ = writeln!(out, "{name} {value}");
        }
        let _ = writeln!(
            out,
            "# HELP elfgate_time_to_first_token_seconds From run start to the first streamed token."
        );
        let _ = writeln!(out, "# TYPE elfgate_time_to_first_token_seconds histogram");
        for (i, bound) in TTFT_BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "elfgate_time_to_first_token_seconds_bucket{{le=\"{bound}\"}} {}",
                self.ttft_buckets[i].load(Ordering::Relaxed)
            );
        }
        let count = self.ttft_count.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "elfgate_time_to_first_token_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(
            out,
            "elfgate_time_to_first_token_seconds_sum {}",
            self.ttft_sum_micros.load(Ordering::Relaxed) as f64 / 1e6
        );
        let _ = writeln!(out, "elfgate_time_to_first_token_seconds_count {count}");
        self.spend.render(&mut out);
        out
    }
}
