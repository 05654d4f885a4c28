//! Webhooks when runs end: each run's end is queued as a delivery to every matching target of
//! `[webhooks]` (in the store, so that the queue survives a restart), and a worker on every node
//! sends the due ones: a signed POST, retried with exponential backoff and jitter until the
//! target answers 2xx or the attempts are spent (docs/workflows.md, "Webhooks when runs end").

use crate::config::WebhooksConfig;
use crate::state::AppState;
use chrono::Utc;
use elfgate_core::RunEnded;
use elfgate_store::{DeliveryStatus, WebhookDelivery};
use hmac::{Hmac, KeyInit, Mac};
use serde_json::json;
use sha2::Sha256;
use std::net::SocketAddr;
use std::time::Duration;

/// How often the worker looks for due deliveries.
const TICK: Duration = Duration::from_millis(100);

/// Deliveries one tick takes on.
const BATCH: u32 = 16;

/// The target name of the deliveries to a session's own `notifyUrl`.
pub const NOTIFY_TARGET: &str = "notifyUrl";

/// Queues the deliveries of a run's end: one per matching target and one to the session's
/// `notifyUrl`, with the run's record.
pub async fn enqueue(state: &AppState, ended: &RunEnded) {
    let config = &state.config.webhooks;
    let mut targets: Vec<(&str, &str)> = config
        .targets
        .iter()
        .filter(|t| {
            t.engines.as_ref().is_none_or(|e| e.contains(&ended.engine))
                && t.finish_reasons
                    .as_ref()
                    .is_none_or(|r| r.contains(&ended.finish_reason))
        })
        .map(|t| (t.name.as_str(), t.url.as_str()))
        .collect();
    if let Some(url) = &ended.notify_url {
        targets.push((NOTIFY_TARGET, url.as_str()));
    }
    if targets.is_empty() {
        return;
    }
    let run = match state.store.get_run(ended.session_id, ended.run_id).await {
        Ok(Some(run)) => serde_json::to_value(run).unwrap_or_default(),
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(run_id = %ended.run_id, error = %e.report(), "cannot read an ended run for its webhooks");
            return;
        }
    };
    let now = Utc::now();
    for (target, url) in targets {
        let id = format!("whd_{}", uuid::Uuid::now_v7().simple());
        let body = json!({
            "id": id,
            "type": "run.ended",
            "createdAt": elfgate_core::timefmt::rfc3339_millis(&now),
            "sessionId": ended.session_id,
            "engine": ended.engine,
            "run": run,
        });
        let delivery = WebhookDelivery {
            id,
            target: target.to_string(),
            url: url.to_string(),
            body,
            status: DeliveryStatus::Pending,
            attempts: 0,
            next_attempt_at: now,
            last_status: None,
            last_error: None,
            created_at: now,
            updated_at: now,
        };
        match state
            .store
            .enqueue_delivery(&delivery, config.max_pending)
            .await
        {
            Ok(true) => {}
            Ok(false) => tracing::warn!(
                target = %target,
                run_id = %ended.run_id,
                max_pending = config.max_pending,
                "a webhook delivery was dropped: the queue is full"
            ),
            Err(e) => {
                tracing::warn!(target = %target, error = %e.report(), "cannot queue a webhook delivery");
            }
        }
    }
}

/// Sends due deliveries until the daemon stops.
pub async fn deliver(state: AppState) {
    let config = &state.config.webhooks;
    if config.targets.is_empty() && config.notify_secret_env.is_none() {
        return;
    }
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if state.is_shutting_down() {
            return;
        }
        let now = Utc::now();
        let due = match state.store.due_deliveries(now, BATCH).await {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(error = %e.report(), "cannot read the due webhook deliveries");
                continue;
            }
        };
        for d in due {
            // Held past the attempt's timeout: no other worker takes it meanwhile, and a node
            // that dies during it leaves it due again after.
            let lease = now + Duration::from_secs(state.config.webhooks.timeout_secs + 5);
            match state
                .store
                .claim_delivery(&d.id, d.next_attempt_at, lease)
                .await
            {
                Ok(true) => attempt(&state, d).await,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(delivery = %d.id, error = %e.report(), "cannot claim a webhook delivery");
                }
            }
        }
    }
}

/// One attempt of `d`, recorded.
async fn attempt(state: &AppState, mut d: WebhookDelivery) {
    let config = &state.config.webhooks;
    let secret_env = if d.target == NOTIFY_TARGET {
        config.notify_secret_env.as_deref()
    } else {
        config
            .targets
            .iter()
            .find(|t| t.name == d.target)
            .map(|t| t.secret_env.as_str())
    };
    let result = match secret_env {
        Some(secret_env) => post(config, secret_env, &d).await,
        None => Err((
            None,
            format!("target '{}' is no longer configured", d.target),
        )),
    };
    let now = Utc::now();
    d.attempts += 1;
    d.updated_at = now;
    match result {
        Ok(status) => {
            d.status = DeliveryStatus::Delivered;
            d.last_status = Some(status);
            d.last_error = None;
        }
        Err((status, why)) => {
            d.last_status = status;
            d.last_error = Some(why);
            if d.attempts >= config.max_attempts {
                d.status = DeliveryStatus::Failed;
            } else {
                d.next_attempt_at = now + backoff(config, d.attempts);
            }
        }
    }
    if let Err(e) = state.store.record_delivery(&d).await {
        tracing::warn!(delivery = %d.id, error = %e.report(), "cannot record a webhook attempt");
    }
}

/// The wait after `attempts` failed ones: the base doubled for each, capped, plus up to a
/// quarter more at random so that deliveries failing together spread out.
fn backoff(config: &WebhooksConfig, attempts: u32) -> Duration {
    let exp = config
        .backoff_ms
        .saturating_mul(1u64 << attempts.saturating_sub(1).min(30));
    let ms = exp.min(config.max_backoff_ms);
    let jitter = (uuid::Uuid::new_v4().as_u128() % 1000) as u64;
    Duration::from_millis(ms + ms / 4 * jitter / 1000)
}

/// The POST of `d`, signed with the secret in `secret_env`: Ok(status) on 2xx; Err((status if
/// any, why)) otherwise.
async fn post(
    config: &WebhooksConfig,
    secret_env: &str,
    d: &WebhookDelivery,
) -> Result<u16, (Option<u16>, String)> {
    let fail = |why: String| (None, why);
    let secret = std::env::var(secret_env)
        .map_err(|_| fail(format!("the secret variable {secret_env} is not set")))?;
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
    let timestamp = Utc::now().timestamp().to_string();
    let signature = sign(&secret, &timestamp, &body);
    let resp = client
        .post(url)
        .header("content-type", "application/json")
        .header("user-agent", "elfgate-webhook")
        .header("x-elfgate-webhook-id", &d.id)
        .header("x-elfgate-webhook-timestamp", &timestamp)
        .header("x-elfgate-signature-256", signature)
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

/// `sha256=HEX` of HMAC-SHA256 over `TIMESTAMP.BODY` under `secret`.
pub fn sign(secret: &str, timestamp: &str, body: &str) -> String {
    // HMAC takes a key of any length: this never returns early.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.as_bytes()) else {
        return String::new();
    };
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body.as_bytes());
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
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
