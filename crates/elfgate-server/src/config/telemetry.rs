//! `[telemetry]`: runs as OpenTelemetry traces and GenAI metrics over OTLP (docs/observability.md).
//! Absent: nothing is traced or exported.

use super::ConfigError;
use serde::Deserialize;
use std::collections::BTreeMap;

/// The most bytes of one message or tool argument kept on a span when content is captured.
pub const MAX_CONTENT_BYTES: usize = 1 << 20;

/// `[telemetry]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// The collector's base URL (as `OTEL_EXPORTER_OTLP_ENDPOINT`: traces go to `/v1/traces`
    /// under it, metrics to `/v1/metrics`); None: the standard variables, else
    /// `http://localhost:4318`.
    #[serde(default)]
    pub otlp_endpoint: Option<String>,
    /// Headers sent with every export, each naming the environment variable that holds its
    /// value (a vendor's key stays out of the file): `{ "x-honeycomb-team" = "HONEYCOMB_KEY" }`.
    #[serde(default)]
    pub headers_env: BTreeMap<String, String>,
    /// `service.name` of the resource (None: `OTEL_SERVICE_NAME`, else `elfgate`).
    #[serde(default)]
    pub service_name: Option<String>,
    /// The share of traces kept, 0.0 to 1.0 (a caller's sampled `traceparent` is followed).
    #[serde(default = "default_sampling_ratio")]
    pub sampling_ratio: f64,
    /// Prompts, answers and tool arguments on the spans; off by default.
    #[serde(default)]
    pub capture_content: bool,
    /// The bytes of each captured text kept (longer ones are cut).
    #[serde(default = "default_max_content_bytes")]
    pub max_content_bytes: usize,
    /// Attributes of the resource (the node id is added on a fleet node).
    #[serde(default)]
    pub resource_attributes: BTreeMap<String, String>,
    /// Finished spans waiting for export; past it new ones are dropped and counted
    /// (`elfgate_telemetry_spans_dropped_total`).
    #[serde(default = "default_max_queue_size")]
    pub max_queue_size: usize,
    /// How long one export may take, retries included.
    #[serde(default = "default_export_timeout_ms")]
    pub export_timeout_ms: u64,
    /// How long the daemon's stop waits for the last spans to go out.
    #[serde(default = "default_shutdown_timeout_ms")]
    pub shutdown_timeout_ms: u64,
    /// How often the GenAI metrics are exported.
    #[serde(default = "default_metrics_interval_ms")]
    pub metrics_interval_ms: u64,
}

fn default_sampling_ratio() -> f64 {
    1.0
}
fn default_max_content_bytes() -> usize {
    4096
}
fn default_max_queue_size() -> usize {
    2048
}
fn default_export_timeout_ms() -> u64 {
    10_000
}
fn default_shutdown_timeout_ms() -> u64 {
    5_000
}
fn default_metrics_interval_ms() -> u64 {
    60_000
}

impl TelemetryConfig {
    /// Refuses values that could only fail or surprise later, naming the key.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        let bad =
            |key: &str, why: String| Err(ConfigError::Invalid(format!("telemetry.{key}: {why}")));
        if let Some(url) = &self.otlp_endpoint {
            match url.split_once("://") {
                Some(("http" | "https", rest)) if !rest.is_empty() => {}
                _ => {
                    return bad(
                        "otlp_endpoint",
                        format!("'{url}' is not an http:// or https:// URL"),
                    );
                }
            }
        }
        if !(0.0..=1.0).contains(&self.sampling_ratio) {
            return bad(
                "sampling_ratio",
                format!("{} is not between 0.0 and 1.0", self.sampling_ratio),
            );
        }
        if self.max_content_bytes == 0 || self.max_content_bytes > MAX_CONTENT_BYTES {
            return bad(
                "max_content_bytes",
                format!("must be 1 to {MAX_CONTENT_BYTES}"),
            );
        }
        if self.max_queue_size == 0 {
            return bad("max_queue_size", "must be at least 1".into());
        }
        for (key, value) in [
            ("export_timeout_ms", self.export_timeout_ms),
            ("shutdown_timeout_ms", self.shutdown_timeout_ms),
            ("metrics_interval_ms", self.metrics_interval_ms),
        ] {
            if value == 0 {
                return bad(key, "must be at least 1".into());
            }
        }
        if self
            .service_name
            .as_deref()
            .is_some_and(|s| s.trim().is_empty())
        {
            return bad("service_name", "is blank".into());
        }
        for name in self.resource_attributes.keys() {
            if name.trim().is_empty() {
                return bad(
                    "resource_attributes",
                    "an attribute has a blank name".into(),
                );
            }
        }
        self.headers().map(|_| ())
    }

    /// The export headers with their values read from the environment; an unset or blank
    /// variable, or a name or value HTTP does not allow, is refused (no export without its key).
    pub fn headers(&self) -> Result<Vec<(String, String)>, ConfigError> {
        let mut out = Vec::with_capacity(self.headers_env.len());
        for (name, var) in &self.headers_env {
            let bad = |why: String| {
                Err(ConfigError::Invalid(format!(
                    "telemetry.headers_env.{name}: {why}"
                )))
            };
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b))
            {
                return bad("is not a valid HTTP header name".into());
            }
            let value = match std::env::var(var) {
                Ok(v) if !v.trim().is_empty() => v,
                Ok(_) => return bad(format!("the variable {var} is blank")),
                Err(_) => return bad(format!("the variable {var} is not set")),
            };
            if value.bytes().any(|b| b.is_ascii_control()) {
                return bad(format!("the variable {var} holds a control character"));
            }
            out.push((name.clone(), value));
        }
        Ok(out)
    }
}
