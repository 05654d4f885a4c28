//! Webhooks when runs end: each run's end is written to the store's outbox in the transaction
//! that ends it (whatever ends it: the run itself, a fleet node's drain, a restart's recovery,
//! another node's adoption), and a worker on every node turns it into a delivery to every
//! matching target of `[webhooks]` and sends the due ones: a signed POST, retried with
//! exponential backoff and jitter until the target answers 2xx or the attempts are spent
//! (docs/workflows.md, "Webhooks when runs end"). Each target has a queue bound and attempts of
//! its own, so that one that does not answer holds up no other.

pub mod inbound;
mod send;
pub mod signature;
mod worker;

pub use worker::deliver;

use crate::state::AppState;
use chrono::Utc;
use elfgate_core::EngineConfig;
use elfgate_store::{DeliveryStatus, RunEndNotice, StoreError, WebhookDelivery};
use serde_json::json;

/// The target name of the deliveries to a session's own `notifyUrl`.
pub const NOTIFY_TARGET: &str = "notifyUrl";

/// Run ends one look at the outbox takes on.
const RUN_ENDS_BATCH: u32 = 64;

/// Turns the run ends waiting in the store's outbox into deliveries. The outbox is shared by
/// every node of a fleet: a run ended by a node that stopped, or ended for a node that died, is
/// queued by whichever node looks first, once.
pub(crate) async fn queue_run_ends(state: &AppState) {
    let notices = match state.store.pending_run_ends(RUN_ENDS_BATCH).await {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(error = %e.report(), "cannot read the run ends waiting for their webhooks");
            return;
        }
    };
    for notice in notices {
        queue_run_end(state, &notice).await;
    }
}

/// Queues the deliveries of one run's end and takes it out of the outbox, in one transaction.
async fn queue_run_end(state: &AppState, notice: &RunEndNotice) {
    let config = &state.config.webhooks;
    let deliveries = match deliveries_of(state, notice).await {
        Ok(d) => d,
        Err(e) => {
            // Left in the outbox: the next look tries again.
            tracing::warn!(run_id = %notice.run_id, error = %e.report(), "cannot read an ended run for its webhooks");
            return;
        }
    };
    match state
        .store
        .queue_run_end(notice.run_id, &deliveries, config.max_pending)
        .await
    {
        // None: another node's worker queued it first.
        Ok(None) => {}
        Ok(Some(full)) => {
            for target in full {
                tracing::warn!(
                    target = %target,
                    run_id = %notice.run_id,
                    max_pending = config.max_pending,
                    "a webhook delivery was dropped: the target's queue is full"
                );
            }
        }
        Err(e) => {
            tracing::warn!(run_id = %notice.run_id, error = %e.report(), "cannot queue a run's webhook deliveries");
        }
    }
}

/// The deliveries of a run's end: one per target whose filters the run passes and one to its
/// session's `notifyUrl`, each with the run's record. None for a run or session deleted since.
async fn deliveries_of(
    state: &AppState,
    notice: &RunEndNotice,
) -> Result<Vec<WebhookDelivery>, StoreError> {
    let config = &state.config.webhooks;
    let (run, session) = (
        state
            .store
            .get_run(notice.session_id, notice.run_id)
            .await?,
        state.store.get_session(notice.session_id).await?,
    );
    let (Some(run), Some(session)) = (run, session) else {
        return Ok(Vec::new());
    };
    let Some(finish_reason) = run.finish_reason else {
        return Ok(Vec::new());
    };
    // Checked when the session was stored; a config that no longer reads names no target.
    let notify = EngineConfig::from_json(&session.engine_config)
        .ok()
        .and_then(|c| c.notify_url)
        .map(|url| (NOTIFY_TARGET, url));
    let targets = config
        .targets
        .iter()
        .filter(|t| {
            t.engines
                .as_ref()
                .is_none_or(|e| e.contains(&session.engine))
                && t.finish_reasons
                    .as_ref()
                    .is_none_or(|r| r.contains(&finish_reason))
        })
        .map(|t| (t.name.as_str(), t.url.clone()))
        .chain(notify);
    let record = serde_json::to_value(&run).unwrap_or_default();
    let now = Utc::now();
    Ok(targets
        .map(|(target, url)| {
            let id = format!("whd_{}", uuid::Uuid::now_v7().simple());
            let body = json!({
                "id": id,
                "type": "run.ended",
                "createdAt": elfgate_core::timefmt::rfc3339_millis(&now),
                "sessionId": notice.session_id,
                "engine": session.engine,
                "run": record,
            });
            pending(id, target, url, body, now)
        })
        .collect())
}

/// A delivery of `body` to `target` at `url`, due at once.
pub(crate) fn pending(
    id: String,
    target: &str,
    url: String,
    body: serde_json::Value,
    now: chrono::DateTime<Utc>,
) -> WebhookDelivery {
    WebhookDelivery {
        id,
        target: target.to_string(),
        url,
        body,
        status: DeliveryStatus::Pending,
        attempts: 0,
        next_attempt_at: now,
        last_status: None,
        last_error: None,
        created_at: now,
        updated_at: now,
    }
}
