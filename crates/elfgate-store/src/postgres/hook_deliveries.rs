//! Inbound hooks' delivery ids on PostgreSQL: a signed delivery is taken once (see the Store
//! trait's `claim_hook_delivery`). Text timestamps of one fixed width in UTC compare as the
//! times do.

use super::PgStore;
use crate::StoreResult;
use crate::codec::ts;
use chrono::{DateTime, Utc};

impl PgStore {
    pub(super) async fn claim_hook_delivery_row(
        &self,
        hook: &str,
        id: &str,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> StoreResult<bool> {
        sqlx::query("DELETE FROM hook_deliveries_seen WHERE expires_at < $1")
            .bind(ts(&now))
            .execute(&self.pool)
            .await?;
        let done = sqlx::query(
            "INSERT INTO hook_deliveries_seen (hook, id, expires_at) VALUES ($1, $2, $3) \
             ON CONFLICT (hook, id) DO NOTHING",
        )
        .bind(hook)
        .bind(id)
        .bind(ts(&until))
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    pub(super) async fn release_hook_delivery_row(&self, hook: &str, id: &str) -> StoreResult<()> {
        sqlx::query("DELETE FROM hook_deliveries_seen WHERE hook = $1 AND id = $2")
            .bind(hook)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}
