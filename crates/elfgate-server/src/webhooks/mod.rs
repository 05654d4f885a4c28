//! Webhooks when runs end: each run's end is queued as a delivery to every matching target of
//! `[webhooks]` (in the store, so that the queue survives a restart), and a worker on every node
//! sends the due ones: a signed POST, retried with exponential backoff and jitter until the
//! target answers 2xx or the attempts are spent (docs/workflows.md, "Webhooks when runs end").
//! Each target has a queue bound and attempts of its own, so that one that does not answer
//! holds up no other.

pub mod inbound;
mod send;
pub mod signature;
mod worker;

pub use worker::deliver;

use crate::state::AppState;
use chrono::Utc;
use elfgate_core::RunEnded;
use elfgate_store::{DeliveryStatus, WebhookDelivery};
use serde_json::json;

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
                "a webhook delivery was dropped: the target's queue is full"
            ),
            Err(e) => {
                tracing::warn!(target = %target, error = %e.report(), "cannot queue a webhook delivery");
            }
        }
    }
}
