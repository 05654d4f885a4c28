//! Inbound hooks' delivery ids on SQLite: a signed delivery is taken once (see the Store
//! trait's `claim_hook_delivery`). Text timestamps of one fixed width in UTC compare as the
//! times do.

use super::SqliteStore;
use crate::StoreResult;
use crate::codec::ts;
use chrono::{DateTime, Utc};

impl SqliteStore {
    pub(super) async fn claim_hook_delivery_row(
        &self,
        hook: &str,
        id: &str,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> StoreResult<bool> {
        sqlx::query("DELETE FROM hook_deliveries_seen WHERE expires_at < ?")
            .bind(ts(&now))
            .execute(&self.write)
            .await?;
        let done = sqlx::query(
            "INSERT INTO hook_deliveries_seen (hook, id, expires_at) VALUES (?, ?, ?) \
             ON CONFLICT (hook, id) DO NOTHING",
        )
        .bind(hook)
        .bind(id)
        .bind(ts(&until))
        .execute(&self.write)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    pub(super) async fn release_hook_delivery_row(&self, hook: &str, id: &str) -> StoreResult<()> {
        sqlx::query("DELETE FROM hook_deliveries_seen WHERE hook = ? AND id = ?")
            .bind(hook)
            .bind(id)
            .execute(&self.write)
            .await?;
        Ok(())
    }
}
