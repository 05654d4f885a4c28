//! Webhook deliveries on SQLite: the queue of signed POSTs when runs end (see the Store trait's
//! delivery methods). Text timestamps of one fixed width in UTC compare as the times do.

use super::SqliteStore;
use crate::codec::ts;
use crate::rows::delivery_from_row;
use crate::{StoreResult, WebhookDelivery};
use chrono::{DateTime, Utc};

impl SqliteStore {
    pub(super) async fn enqueue_delivery_row(
        &self,
        d: &WebhookDelivery,
        max_pending: u32,
    ) -> StoreResult<bool> {
        insert_delivery(&self.write, d, max_pending).await
    }

    pub(super) async fn due_delivery_rows(
        &self,
        now: DateTime<Utc>,
        per_target: u32,
        limit: u32,
    ) -> StoreResult<Vec<WebhookDelivery>> {
        let rows = sqlx::query(
            "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY target, url ORDER BY \
             next_attempt_at) AS place FROM webhook_deliveries WHERE status = 'pending' AND \
             next_attempt_at <= ?) AS due WHERE place <= ? ORDER BY next_attempt_at LIMIT ?",
        )
        .bind(ts(&now))
        .bind(i64::from(per_target.max(1)))
        .bind(i64::from(limit.max(1)))
        .fetch_all(&self.read)
        .await?;
        rows.iter().map(delivery_from_row).collect()
    }

    pub(super) async fn claim_delivery_row(
        &self,
        id: &str,
        due: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE webhook_deliveries SET next_attempt_at = ? WHERE id = ? AND status = \
             'pending' AND next_attempt_at = ?",
        )
        .bind(ts(&until))
        .bind(id)
        .bind(ts(&due))
        .execute(&self.write)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    pub(super) async fn record_delivery_row(&self, d: &WebhookDelivery) -> StoreResult<()> {
        sqlx::query(
            "UPDATE webhook_deliveries SET status = ?, attempts = ?, next_attempt_at = ?, \
             last_status = ?, last_error = ?, updated_at = ? WHERE id = ?",
        )
        .bind(d.status.as_str())
        .bind(i64::from(d.attempts))
        .bind(ts(&d.next_attempt_at))
        .bind(d.last_status.map(i64::from))
        .bind(&d.last_error)
        .bind(ts(&d.updated_at))
        .bind(&d.id)
        .execute(&self.write)
        .await?;
        Ok(())
    }

    pub(super) async fn list_delivery_rows(&self, limit: u32) -> StoreResult<Vec<WebhookDelivery>> {
        let rows = sqlx::query(
            "SELECT * FROM webhook_deliveries ORDER BY created_at DESC, id DESC LIMIT ?",
        )
        .bind(i64::from(limit.max(1)))
        .fetch_all(&self.read)
        .await?;
        rows.iter().map(delivery_from_row).collect()
    }
}

/// Stores delivery `d` unless `max_pending` deliveries to its target (its name and URL) already
/// wait: false then. On the pool or in a transaction of the caller's.
pub(super) async fn insert_delivery<'c>(
    conn: impl sqlx::SqliteExecutor<'c>,
    d: &WebhookDelivery,
    max_pending: u32,
) -> StoreResult<bool> {
    let done = sqlx::query(
        "INSERT INTO webhook_deliveries (id, target, url, body, status, attempts, \
         next_attempt_at, created_at, updated_at) SELECT ?, ?, ?, ?, ?, ?, ?, ?, ? WHERE \
         (SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'pending' AND target = ? \
         AND url = ?) < ?",
    )
    .bind(&d.id)
    .bind(&d.target)
    .bind(&d.url)
    .bind(d.body.to_string())
    .bind(d.status.as_str())
    .bind(i64::from(d.attempts))
    .bind(ts(&d.next_attempt_at))
    .bind(ts(&d.created_at))
    .bind(ts(&d.updated_at))
    .bind(&d.target)
    .bind(&d.url)
    .bind(i64::from(max_pending))
    .execute(conn)
    .await?;
    Ok(done.rows_affected() > 0)
}
