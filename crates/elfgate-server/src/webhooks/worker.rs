//! The worker that sends due run-end deliveries: each target (its name and URL) is a lane of its
//! own with a few attempts at once, so that a target that never answers only ties up its own
//! lane while the others' deliveries go out as they fall due.

use super::{NOTIFY_TARGET, send};
use crate::config::WebhooksConfig;
use crate::state::AppState;
use chrono::Utc;
use elfgate_core::sync::lock;
use elfgate_store::{DeliveryStatus, WebhookDelivery};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the worker looks for due deliveries.
const TICK: Duration = Duration::from_millis(100);

/// Attempts under way at once to one target, on one node.
pub const PER_TARGET_IN_FLIGHT: usize = 4;

/// Attempts under way at once on one node, over all targets.
pub const MAX_IN_FLIGHT: usize = 64;

/// Due deliveries one look at the store takes on: each target's oldest few, so that one
/// target's backlog cannot fill the batch.
const BATCH: u32 = 64;

/// A delivery's lane: its target's name and URL (every session's `notifyUrl` shares the name).
type Lane = (String, String);

/// The attempts under way, per lane.
#[derive(Default, Clone)]
struct InFlight(Arc<Mutex<HashMap<Lane, usize>>>);

impl InFlight {
    /// A place in `lane` when it has one free: held until the guard is dropped.
    fn enter(&self, lane: Lane) -> Option<LaneGuard> {
        let mut lanes = lock(&self.0);
        let busy = lanes.entry(lane.clone()).or_default();
        if *busy >= PER_TARGET_IN_FLIGHT {
            return None;
        }
        *busy += 1;
        Some(LaneGuard {
            lanes: self.clone(),
            lane,
        })
    }

    fn total(&self) -> usize {
        lock(&self.0).values().sum()
    }
}

/// A place taken in a lane; given back when dropped (whatever ended the attempt).
struct LaneGuard {
    lanes: InFlight,
    lane: Lane,
}

impl Drop for LaneGuard {
    fn drop(&mut self) {
        let mut lanes = lock(&self.lanes.0);
        if let Some(busy) = lanes.get_mut(&self.lane) {
            *busy = busy.saturating_sub(1);
            if *busy == 0 {
                lanes.remove(&self.lane);
            }
        }
    }
}

/// Queues the deliveries of ended runs and sends the due ones until the daemon stops. A daemon
/// with no target still empties the outbox of run ends (into no delivery), so that it does not
/// grow.
pub async fn deliver(state: AppState) {
    let config = &state.config.webhooks;
    let sends = config.delivers_run_ends();
    let in_flight = InFlight::default();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        // A stopping node leaves what it has not queued or sent to the other nodes of its fleet,
        // or to its own next start: both are in the store.
        if state.is_shutting_down() {
            return;
        }
        super::queue_run_ends(&state).await;
        if !sends {
            continue;
        }
        let now = Utc::now();
        let due = match state
            .store
            .due_deliveries(now, PER_TARGET_IN_FLIGHT as u32, BATCH)
            .await
        {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(error = %e.report(), "cannot read the due webhook deliveries");
                continue;
            }
        };
        for d in due {
            if in_flight.total() >= MAX_IN_FLIGHT {
                break;
            }
            let Some(place) = in_flight.enter((d.target.clone(), d.url.clone())) else {
                continue;
            };
            // Held past the attempt's timeout: no other worker takes it meanwhile, and a node
            // that dies during it leaves it due again after.
            let lease = now + Duration::from_secs(config.timeout_secs + 5);
            match state
                .store
                .claim_delivery(&d.id, d.next_attempt_at, lease)
                .await
            {
                Ok(true) => {
                    let state = state.clone();
                    tokio::spawn(async move {
                        attempt(&state, d).await;
                        drop(place);
                    });
                }
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
        Some(secret_env) => send::post(config, secret_env, &d).await,
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
