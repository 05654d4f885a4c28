//! Inbound hooks' delivery ids (see [`InboundHookStore`]). Text timestamps of one fixed width in
//! UTC compare as the times do.

use super::{RowsAffected, SqlBackend};
use crate::codec::ts;
use crate::{InboundHookStore, StoreResult};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{Database, Encode, Executor, Type};

#[async_trait]
impl<S> InboundHookStore for S
where
    S: SqlBackend,
    for<'c> &'c mut <S::Db as Database>::Connection: Executor<'c, Database = S::Db>,
    for<'q> String: Encode<'q, S::Db> + Type<S::Db>,
{
    async fn claim_hook_delivery(
        &self,
        hook: &str,
        id: &str,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let db = self.shared();
        sqlx::query("DELETE FROM hook_deliveries_seen WHERE expires_at < $1")
            .bind(ts(&now))
            .execute(db.write)
            .await?;
        let done = sqlx::query(
            "INSERT INTO hook_deliveries_seen (hook, id, expires_at) VALUES ($1, $2, $3) \
             ON CONFLICT (hook, id) DO NOTHING",
        )
        .bind(hook.to_owned())
        .bind(id.to_owned())
        .bind(ts(&until))
        .execute(db.write)
        .await?;
        Ok(done.rows_changed() > 0)
    }

    async fn release_hook_delivery(&self, hook: &str, id: &str) -> StoreResult<()> {
        sqlx::query("DELETE FROM hook_deliveries_seen WHERE hook = $1 AND id = $2")
            .bind(hook.to_owned())
            .bind(id.to_owned())
            .execute(self.shared().write)
            .await?;
        Ok(())
    }
}
