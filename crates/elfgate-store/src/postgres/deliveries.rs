//! Webhook deliveries on PostgreSQL: the queue of signed POSTs when runs end (see the Store trait's
//! delivery methods). Text timestamps of one fixed width in UTC compare as the times do.

use super::PgStore;
use crate::codec::ts;
use crate::rows::delivery_from_row;
use crate::{StoreResult, WebhookDelivery};
use chrono::{DateTime, Utc};

impl PgStore {
    pub(super) async fn enqueue_delivery_row(
        &self,
        d: &WebhookDelivery,
        max_pending: u32,
    ) -> StoreResult<bool> {
        insert_delivery(&self.pool, d, max_pending).await
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
             next_attempt_at <= $1) AS due WHERE place <= $2 ORDER BY next_attempt_at LIMIT $3",
        )
        .bind(ts(&now))
        .bind(i64::from(per_target.max(1)))
        .bind(i64::from(limit.max(1)))
        .fetch_all(&self.pool)
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
            "UPDATE webhook_deliveries SET next_attempt_at = $1 WHERE id = $2 AND status = \
             'pending' AND next_attempt_at = $3",
        )
        .bind(ts(&until))
        .bind(id)
        .bind(ts(&due))
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    pub(super) async fn record_delivery_row(&self, d: &WebhookDelivery) -> StoreResult<()> {
        sqlx::query(
            "UPDATE webhook_deliveries SET status = $1, attempts = $2, next_attempt_at = $3, \
             last_status = $4, last_error = $5, updated_at = $6 WHERE id = $7",
        )
        .bind(d.status.as_str())
        .bind(i64::from(d.attempts))
        .bind(ts(&d.next_attempt_at))
        .bind(d.last_status.map(i64::from))
        .bind(&d.last_error)
        .bind(ts(&d.updated_at))
        .bind(&d.id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub(super) async fn list_delivery_rows(&self, limit: u32) -> StoreResult<Vec<WebhookDelivery>> {
        let rows = sqlx::query(
            "SELECT * FROM webhook_deliveries ORDER BY created_at DESC, id DESC LIMIT $1",
        )
        .bind(i64::from(limit.max(1)))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(delivery_from_row).collect()
    }
}

/// Stores delivery `d` unless `max_pending` deliveries to its target (its name and URL) already
/// wait: false then. On the pool or in a transaction of the caller's.
pub(super) async fn insert_delivery<'c>(
    conn: impl sqlx::PgExecutor<'c>,
    d: &WebhookDelivery,
    max_pending: u32,
) -> StoreResult<bool> {
    let done = sqlx::query(
        "INSERT INTO webhook_deliveries (id, target, url, body, status, attempts, \
         next_attempt_at, created_at, updated_at) SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9 WHERE \
         (SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'pending' AND target = $2 \
         AND url = $3) < $10",
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
    .bind(i64::from(max_pending))
    .execute(conn)
    .await?;
    Ok(done.rows_affected() > 0)
}
