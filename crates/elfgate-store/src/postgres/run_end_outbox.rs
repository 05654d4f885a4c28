//! The outbox of run-end webhooks on PostgreSQL: each run's end is written to it in the transaction
//! that ends the run (statements.rs, recovery.rs), and a worker turns it into deliveries here.

use super::PgStore;
use crate::rows::run_end_notice_from_row;
use crate::{RunEndNotice, StoreResult, WebhookDelivery};
use elfgate_core::RunId;

impl PgStore {
    pub(super) async fn pending_run_end_rows(&self, limit: u32) -> StoreResult<Vec<RunEndNotice>> {
        let rows = sqlx::query(
            "SELECT run_id, session_id, ended_at FROM run_end_outbox ORDER BY ended_at LIMIT $1",
        )
        .bind(i64::from(limit.max(1)))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(run_end_notice_from_row).collect()
    }

    pub(super) async fn queue_run_end_rows(
        &self,
        run_id: RunId,
        deliveries: &[WebhookDelivery],
        max_pending: u32,
    ) -> StoreResult<Option<Vec<String>>> {
        let mut tx = self.pool.begin().await?;
        let taken = sqlx::query("DELETE FROM run_end_outbox WHERE run_id = $1")
            .bind(run_id.to_string())
            .execute(&mut *tx)
            .await?;
        if taken.rows_affected() == 0 {
            return Ok(None);
        }
        let mut full = Vec::new();
        for d in deliveries {
            if !super::deliveries::insert_delivery(&mut *tx, d, max_pending).await? {
                full.push(d.target.clone());
            }
        }
        tx.commit().await?;
        Ok(Some(full))
    }
}
