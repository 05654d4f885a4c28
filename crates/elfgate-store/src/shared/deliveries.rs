//! The outbox of run ends and the queue of webhook deliveries made of them (see
//! [`DeliveryStore`]). Each run's end is written to the outbox in the transaction that ends the
//! run (the backends' run-ending statements and recovery); a worker turns it into deliveries
//! here. Text timestamps of one fixed width in UTC compare as the times do.

use super::{RowsAffected, SharedDb, SqlBackend};
use crate::codec::ts;
use crate::rows::{delivery_from_row, run_end_notice_from_row};
use crate::{DeliveryStore, RunEndNotice, StoreResult, WebhookDelivery};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use elfgate_core::RunId;
use sqlx::{Database, Encode, Executor, Type};

#[async_trait]
impl<S> DeliveryStore for S
where
    S: SqlBackend,
    for<'c> &'c mut <S::Db as Database>::Connection: Executor<'c, Database = S::Db>,
    for<'q> String: Encode<'q, S::Db> + Type<S::Db>,
    for<'q> Option<String>: Encode<'q, S::Db> + Type<S::Db>,
    for<'q> i64: Encode<'q, S::Db> + Type<S::Db>,
    for<'q> Option<i64>: Encode<'q, S::Db> + Type<S::Db>,
{
    async fn pending_run_ends(&self, limit: u32) -> StoreResult<Vec<RunEndNotice>> {
        let rows = sqlx::query(
            "SELECT run_id, session_id, ended_at FROM run_end_outbox ORDER BY ended_at LIMIT $1",
        )
        .bind(i64::from(limit.max(1)))
        .fetch_all(self.shared().read)
        .await?;
        rows.iter().map(run_end_notice_from_row).collect()
    }

    async fn queue_run_end(
        &self,
        run_id: RunId,
        deliveries: &[WebhookDelivery],
        max_pending: u32,
    ) -> StoreResult<Option<Vec<String>>> {
        let mut tx = self.shared().write.begin().await?;
        let taken = sqlx::query("DELETE FROM run_end_outbox WHERE run_id = $1")
            .bind(run_id.to_string())
            .execute(&mut *tx)
            .await?;
        if taken.rows_changed() == 0 {
            return Ok(None);
        }
        let mut full = Vec::new();
        for d in deliveries {
            if !insert_delivery(&mut *tx, d, max_pending).await? {
                full.push(d.target.clone());
            }
        }
        tx.commit().await?;
        Ok(Some(full))
    }

    async fn enqueue_delivery(&self, d: &WebhookDelivery, max_pending: u32) -> StoreResult<bool> {
        insert_delivery(self.shared().write, d, max_pending).await
    }

    async fn due_deliveries(
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
        .fetch_all(self.shared().read)
        .await?;
        rows.iter().map(delivery_from_row).collect()
    }

    async fn claim_delivery(
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
        .bind(id.to_owned())
        .bind(ts(&due))
        .execute(self.shared().write)
        .await?;
        Ok(done.rows_changed() > 0)
    }

    async fn record_delivery(&self, d: &WebhookDelivery) -> StoreResult<()> {
        sqlx::query(
            "UPDATE webhook_deliveries SET status = $1, attempts = $2, next_attempt_at = $3, \
             last_status = $4, last_error = $5, updated_at = $6 WHERE id = $7",
        )
        .bind(d.status.as_str().to_owned())
        .bind(i64::from(d.attempts))
        .bind(ts(&d.next_attempt_at))
        .bind(d.last_status.map(i64::from))
        .bind(d.last_error.clone())
        .bind(ts(&d.updated_at))
        .bind(d.id.clone())
        .execute(self.shared().write)
        .await?;
        Ok(())
    }

    async fn list_deliveries(&self, limit: u32) -> StoreResult<Vec<WebhookDelivery>> {
        let rows = sqlx::query(
            "SELECT * FROM webhook_deliveries ORDER BY created_at DESC, id DESC LIMIT $1",
        )
        .bind(i64::from(limit.max(1)))
        .fetch_all(self.shared().read)
        .await?;
        rows.iter().map(delivery_from_row).collect()
    }
}

/// Stores delivery `d` unless `max_pending` deliveries to its target (its name and URL) already
/// wait: false then. On the pool or in a transaction of the caller's.
async fn insert_delivery<'c, DB: SharedDb>(
    conn: impl Executor<'c, Database = DB>,
    d: &WebhookDelivery,
    max_pending: u32,
) -> StoreResult<bool>
where
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
{
    let done = sqlx::query(
        "INSERT INTO webhook_deliveries (id, target, url, body, status, attempts, \
         next_attempt_at, created_at, updated_at) SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9 WHERE \
         (SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'pending' AND target = $2 \
         AND url = $3) < $10",
    )
    .bind(d.id.clone())
    .bind(d.target.clone())
    .bind(d.url.clone())
    .bind(d.body.to_string())
    .bind(d.status.as_str().to_owned())
    .bind(i64::from(d.attempts))
    .bind(ts(&d.next_attempt_at))
    .bind(ts(&d.created_at))
    .bind(ts(&d.updated_at))
    .bind(i64::from(max_pending))
    .execute(conn)
    .await?;
    Ok(done.rows_changed() > 0)
}
