//! The access audit's writer (`GET /v1/admin/audit`): key changes and refused requests go to the
//! store through a bounded queue, in batches, by one task. Refusals are cheap for anyone to cause,
//! so they are also bounded in rate: past [`REFUSALS_PER_SECOND`] in a second, or with the queue
//! full, a refusal is counted (`elfgate_audit_dropped_total`) instead of written, and a flood of
//! bad requests cannot flood the database. Key changes (admins' acts, few) wait for room instead.

use elfgate_core::Principal;
use elfgate_store::{AccessAudit, AccessEvent};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Entries waiting for the writer.
const QUEUE: usize = 1_024;
/// Entries written in one transaction at most.
const BATCH: usize = 256;
/// Refusals written per second at most.
pub const REFUSALS_PER_SECOND: u32 = 100;

/// A refused request, as the audit keeps it.
#[derive(Debug, Clone)]
pub struct Refusal<'a> {
    /// Who was refused, when auth found a principal (a 403).
    pub principal: Option<&'a Principal>,
    /// The key id the request came with, when auth found no principal (a 401 of a key).
    pub key_id: Option<&'a str>,
    /// The request's method.
    pub method: &'a str,
    /// The request's path (no query: a key may be in it).
    pub path: &'a str,
    /// The status it was answered with.
    pub status: u16,
    /// Why, in a word (`unknown_key`, `admin_only`, `scope:engines`, …).
    pub reason: &'a str,
}

/// The node's access audit writer.
pub struct AccessAuditor {
    queue: mpsc::Sender<AccessEvent>,
    /// Refusals written in the current second: (its start, how many).
    window: Mutex<(Instant, u32)>,
    dropped: AtomicU64,
}

impl AccessAuditor {
    /// A writer into `store`, its task started.
    pub fn start(store: Arc<dyn AccessAudit>) -> Self {
        let (queue, rx) = mpsc::channel(QUEUE);
        tokio::spawn(write(store, rx));
        AccessAuditor {
            queue,
            window: Mutex::new((Instant::now(), 0)),
            dropped: AtomicU64::new(0),
        }
    }

    /// Records a refused request, unless refusals come faster than the bound (then counts it).
    pub fn refused(&self, r: Refusal<'_>) {
        if !self.within_rate() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let event = AccessEvent {
            at: chrono::Utc::now(),
            kind: "refused".into(),
            actor: r.principal.map(|p| p.user.clone()),
            key_id: r
                .principal
                .and_then(|p| p.key_id.clone())
                .or_else(|| r.key_id.map(str::to_owned)),
            route: Some(format!("{} {}", r.method, r.path)),
            status: Some(r.status),
            reason: Some(r.reason.to_owned()),
            detail: None,
        };
        if self.queue.try_send(event).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records what `actor` did to key `key_id` (`kind`: `key_created`, `key_changed`,
    /// `key_revoked`), with what changed; waits for room in the queue.
    pub async fn key_event(
        &self,
        kind: &str,
        actor: Option<&Principal>,
        key_id: &str,
        detail: serde_json::Value,
    ) {
        let event = AccessEvent {
            at: chrono::Utc::now(),
            kind: kind.into(),
            actor: actor.map(|p| p.user.clone()),
            key_id: Some(key_id.to_owned()),
            route: None,
            status: None,
            reason: None,
            detail: Some(detail),
        };
        if self.queue.send(event).await.is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The audit's metrics in the Prometheus text format.
    pub fn render_prometheus(&self) -> String {
        format!(
            "# HELP elfgate_audit_dropped_total Access audit entries not written: refusals past \
             the rate bound or the queue's.\n# TYPE elfgate_audit_dropped_total counter\n\
             elfgate_audit_dropped_total {}\n",
            self.dropped.load(Ordering::Relaxed)
        )
    }

    fn within_rate(&self) -> bool {
        let Ok(mut window) = self.window.lock() else {
            return false;
        };
        if window.0.elapsed() >= Duration::from_secs(1) {
            *window = (Instant::now(), 0);
        }
        if window.1 >= REFUSALS_PER_SECOND {
            return false;
        }
        window.1 += 1;
        true
    }
}

/// Writes what comes in, a batch at a time, until every sender is gone.
async fn write(store: Arc<dyn AccessAudit>, mut rx: mpsc::Receiver<AccessEvent>) {
    let mut batch = Vec::with_capacity(BATCH);
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        if let Err(e) = store.append_access_events(&batch).await {
            tracing::error!(error = %e, entries = batch.len(), "cannot write the access audit: entries lost");
        }
        batch.clear();
    }
}
