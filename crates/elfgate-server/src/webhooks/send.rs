//! One POST of a run-end delivery: to a checked, public address (unless allowed), signed with
//! Standard Webhooks' headers and with Elfgate's own.

use super::signature;
use crate::config::WebhooksConfig;
use chrono::Utc;
use elfgate_store::WebhookDelivery;
use std::net::SocketAddr;
use std::time::Duration;

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
    let url = reqwest::Url::parse(&d.url).map_err(|e| fail(format!("bad URL: {e}")))?;
    let host = url.host_str().unwrap_or_default().to_string();
    let addrs = resolve(&url, config.allow_private_addresses)
        .await
        .map_err(fail)?;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(config.timeout_secs))
        // The checked addresses: a second lookup cannot lead elsewhere.
        .resolve_to_addrs(&host, &addrs)
        .build()
        .map_err(|e| fail(e.to_string()))?;
    let body = d.body.to_string();
    let timestamp = Utc::now().timestamp();
    let resp = client
        .post(url)
        .header("content-type", "application/json")
        .header("user-agent", "elfgate-webhook")
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
        .send()
        .await
        .map_err(|e| fail(format!("the POST failed: {e}")))?;
    let status = resp.status();
    if status.is_success() {
        Ok(status.as_u16())
    } else {
        Err((
            Some(status.as_u16()),
            format!("the target answered {status}"),
        ))
    }
}

/// The target's addresses, refused when one is not public (unless allowed).
async fn resolve(url: &reqwest::Url, allow_private: bool) -> Result<Vec<SocketAddr>, String> {
    let host = url.host_str().ok_or("the URL has no host")?;
    let port = url.port_or_known_default().unwrap_or(443);
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((bare, port))
        .await
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .collect();
    if addrs.is_empty() {
        return Err(format!("{host} has no address"));
    }
    if !allow_private
        && let Some(a) = addrs
            .iter()
            .find(|a| elfgate_tools::address_class::is_non_public(a.ip()))
    {
        return Err(format!(
            "refusing to send to {host}: it resolves to the non-public address {} (allow it \
             with webhooks.allow_private_addresses)",
            a.ip()
        ));
    }
    Ok(addrs)
}
