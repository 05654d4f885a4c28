//! One POST of a run-end delivery: through the guarded outbound client (a checked, public
//! address unless allowed; redirects not followed), signed with Standard Webhooks' headers and
//! with Elfgate's own.

use super::signature;
use crate::config::WebhooksConfig;
use chrono::Utc;
use elfgate_store::WebhookDelivery;
use elfgate_tools::outbound::{AddressPolicy, GuardedClient, OutboundError};
use std::time::Duration;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The POST of `d`, signed with the secret in `secret_env`: Ok(status) on 2xx; Err((status if
/// any, why)) otherwise.
pub(super) async fn post(
    config: &WebhooksConfig,
    secret_env: &str,
    d: &WebhookDelivery,
) -> Result<u16, (Option<u16>, String)> {
    let fail = |why: String| (None, why);
    let key = signature::key_in(secret_env)
        .map_err(|e| fail(e.to_string()))?
        .ok_or_else(|| fail(format!("the secret variable {secret_env} is not set")))?;
    let client = GuardedClient::new(
        AddressPolicy {
            allow_private: config.allow_private_addresses,
            allow_setting: "webhooks.allow_private_addresses",
            verb: "send to",
        },
        Duration::from_secs(config.timeout_secs),
        "elfgate-webhook",
    );
    let body = d.body.to_string();
    let timestamp = Utc::now().timestamp();
    // In the run's trace when runs are traced (its record names the trace): the POST carries
    // the delivery span's `traceparent`. A disabled span (a branch) otherwise.
    let span = elfgate_core::telemetry::delivery_span(
        d.body["run"]["traceId"].as_str(),
        &d.target,
        d.attempts + 1,
    );
    let resp = client
        .post(&d.url, |request| {
            request
                .header("content-type", "application/json")
                .header("webhook-id", &d.id)
                .header("webhook-timestamp", timestamp)
                .header(
                    "webhook-signature",
                    signature::standard(&key, &d.id, timestamp, body.as_bytes()),
                )
                .header("x-elfgate-webhook-id", &d.id)
                .header("x-elfgate-webhook-timestamp", timestamp)
                .header(
                    "x-elfgate-signature-256",
                    signature::elfgate_timestamped(&key, timestamp, body.as_bytes()),
                )
                .body(body)
        })
        .instrument(span.clone())
        .await
        .map_err(|e| match e {
            OutboundError::Send(e) => fail(format!("the POST failed: {e}")),
            other => fail(other.to_string()),
        })?;
    let status = resp.status();
    if !span.is_disabled() {
        span.set_attribute("http.response.status_code", i64::from(status.as_u16()));
    }
    if status.is_success() {
        Ok(status.as_u16())
    } else {
        Err((
            Some(status.as_u16()),
            format!("the target answered {status}"),
        ))
    }
}
