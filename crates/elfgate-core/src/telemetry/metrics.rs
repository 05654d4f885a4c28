//! The conventions' GenAI client metrics: `gen_ai.client.token.usage` and
//! `gen_ai.client.operation.duration`, one record each per model call.

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Histogram, Meter};

/// The GenAI client metrics of the conventions.
pub(super) struct Instruments {
    /// `gen_ai.client.token.usage`, by `gen_ai.token.type` (input, output).
    tokens: Histogram<u64>,
    /// `gen_ai.client.operation.duration`, in seconds.
    duration: Histogram<f64>,
}

impl Instruments {
    /// The two histograms on `meter`, with the conventions' units and bucket boundaries.
    pub(super) fn new(meter: &Meter) -> Instruments {
        Instruments {
            tokens: meter
                .u64_histogram("gen_ai.client.token.usage")
                .with_unit("{token}")
                .with_description("Tokens used by a model call")
                .with_boundaries(vec![
                    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0,
                    1048576.0, 4194304.0, 16777216.0, 67108864.0,
                ])
                .build(),
            duration: meter
                .f64_histogram("gen_ai.client.operation.duration")
                .with_unit("s")
                .with_description("Duration of a model call")
                .with_boundaries(vec![
                    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48,
                    40.96, 81.92,
                ])
                .build(),
        }
    }

    /// One model call: its duration, and (when it did not fail) its input and output tokens.
    pub(super) fn record(
        &self,
        provider: &str,
        model: &str,
        elapsed: std::time::Duration,
        usage: &crate::TokenUsage,
        error: Option<&str>,
    ) {
        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", "chat"),
            KeyValue::new("gen_ai.provider.name", provider.to_string()),
            KeyValue::new("gen_ai.request.model", model.to_string()),
        ];
        if let Some(error) = error {
            attributes.push(KeyValue::new("error.type", error.to_string()));
        }
        self.duration.record(elapsed.as_secs_f64(), &attributes);
        if error.is_none() {
            for (kind, n) in [
                ("input", usage.input_tokens),
                ("output", usage.output_tokens),
            ] {
                attributes.push(KeyValue::new("gen_ai.token.type", kind));
                self.tokens.record(n, &attributes);
                attributes.pop();
            }
        }
    }
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
