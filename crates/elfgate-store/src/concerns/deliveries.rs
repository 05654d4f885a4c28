//! Webhook deliveries: the outbox of run ends, the queue of signed POSTs made of them, and the
//! delivery ids of inbound hooks (each taken once).

use crate::StoreResult;
use async_trait::async_trait;
use elfgate_core::{RunId, SessionId};

/// A run's end waiting in the store's outbox of run-end webhooks: written in the transaction that
/// ends the run, whatever ends it, and taken out when its deliveries are queued.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEndNotice {
    /// Its session.
    pub session_id: SessionId,
    /// The run.
    pub run_id: RunId,
    /// When it ended.
    pub ended_at: chrono::DateTime<chrono::Utc>,
}

/// One signed POST to a webhook target (when a run ended), with its attempts.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookDelivery {
    /// Its id, sent with it (a receiver may drop one it saw).
    pub id: String,
    /// The configured target's name.
    pub target: String,
    /// Where it goes.
    pub url: String,
    /// What is sent.
    pub body: serde_json::Value,
    /// Where it stands.
    pub status: DeliveryStatus,
    /// Attempts made.
    pub attempts: u32,
    /// When the next attempt is due (pending ones).
    pub next_attempt_at: chrono::DateTime<chrono::Utc>,
    /// The HTTP status of the last attempt, when it got one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_status: Option<u16>,
    /// Why the last attempt failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When it was queued.
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// When it last changed.
    pub updated_at: chrono::DateTime<chrono::Utc>,
}

/// Where a webhook delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum DeliveryStatus {
    /// Waiting for its next attempt.
    Pending,
    /// The target answered 2xx.
    Delivered,
    /// Every attempt failed.
    Failed,
}

impl DeliveryStatus {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Failed => "failed",
        }
    }
}

/// The outbox of run ends and the queue of webhook deliveries made of them.
#[async_trait]
pub trait DeliveryStore: Send + Sync {
    /// Run ends not yet made into webhook deliveries, oldest first, at most `limit`. Each run's
    /// end is written here in the transaction that ends the run: by the run itself, a drain, a
    /// restart's recovery or another node's adoption.
    async fn pending_run_ends(&self, limit: u32) -> StoreResult<Vec<RunEndNotice>>;
    /// Takes run `run_id`'s end out of the outbox and queues `deliveries` (each unless
    /// `max_pending` deliveries to its target already wait), in one transaction. None when the
    /// end was no longer there (another worker queued it); else the targets whose delivery was
    /// dropped because their queue was full.
    async fn queue_run_end(
        &self,
        run_id: RunId,
        deliveries: &[WebhookDelivery],
        max_pending: u32,
    ) -> StoreResult<Option<Vec<String>>>;
    /// Queues a webhook delivery, unless `max_pending` deliveries to its target (its name and
    /// URL) already wait (then false): a target that does not answer fills its own queue only.
    async fn enqueue_delivery(&self, d: &WebhookDelivery, max_pending: u32) -> StoreResult<bool>;
    /// Pending deliveries due at `now`, oldest first, at most `per_target` of each target (name
    /// and URL) and `limit` in all, so that one target's backlog cannot crowd out the others.
    async fn due_deliveries(
        &self,
        now: chrono::DateTime<chrono::Utc>,
        per_target: u32,
        limit: u32,
    ) -> StoreResult<Vec<WebhookDelivery>>;
    /// Claims the attempt of delivery `id` that was due at `due` (true for one caller of every
    /// node): its next attempt moves to `until`, so that no other worker takes it meanwhile.
    async fn claim_delivery(
        &self,
        id: &str,
        due: chrono::DateTime<chrono::Utc>,
        until: chrono::DateTime<chrono::Utc>,
    ) -> StoreResult<bool>;
    /// Records an attempt's result: the delivery's status, attempts, next attempt and last answer.
    async fn record_delivery(&self, d: &WebhookDelivery) -> StoreResult<()>;
    /// The latest deliveries, newest first, at most `limit`.
    async fn list_deliveries(&self, limit: u32) -> StoreResult<Vec<WebhookDelivery>>;
}

/// The delivery ids inbound hooks received: a signed delivery is taken once.
#[async_trait]
pub trait InboundHookStore: Send + Sync {
    /// Records delivery `id` of inbound hook `hook` as received, to be remembered until `until`
    /// (past it the delivery's own timestamp refuses a replay): true when it was not received
    /// before, false when it was. Shared by every node on one database; forgets what is past
    /// its time.
    async fn claim_hook_delivery(
        &self,
        hook: &str,
        id: &str,
        now: chrono::DateTime<chrono::Utc>,
        until: chrono::DateTime<chrono::Utc>,
    ) -> StoreResult<bool>;
    /// Forgets delivery `id` of hook `hook` (its run could not start: the sender may try again).
    async fn release_hook_delivery(&self, hook: &str, id: &str) -> StoreResult<()>;
}
