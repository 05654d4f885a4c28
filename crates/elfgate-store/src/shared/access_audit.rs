//! The access audit (see [`AccessAudit`]): appended in batches, read newest first.

use super::SqlBackend;
use crate::codec::{parse_ts, ts};
use crate::rows::RowRead;
use crate::{AccessAudit, AccessEvent, StoreError, StoreResult, StoredAccessEvent};
use async_trait::async_trait;
use sqlx::{Database, Encode, Executor, Type};

#[async_trait]
impl<S> AccessAudit for S
where
    S: SqlBackend,
    for<'c> &'c mut <S::Db as Database>::Connection: Executor<'c, Database = S::Db>,
    for<'q> String: Encode<'q, S::Db> + Type<S::Db>,
    for<'q> Option<String>: Encode<'q, S::Db> + Type<S::Db>,
    for<'q> i64: Encode<'q, S::Db> + Type<S::Db>,
    for<'q> Option<i64>: Encode<'q, S::Db> + Type<S::Db>,
{
    async fn append_access_events(&self, events: &[AccessEvent]) -> StoreResult<()> {
        let mut tx = self.shared().write.begin().await?;
        for e in events {
            sqlx::query(
                "INSERT INTO access_audit (at, kind, actor, key_id, route, status, reason, \
                 detail) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )
            .bind(ts(&e.at))
            .bind(e.kind.clone())
            .bind(e.actor.clone())
            .bind(e.key_id.clone())
            .bind(e.route.clone())
            .bind(e.status.map(i64::from))
            .bind(e.reason.clone())
            .bind(e.detail.as_ref().map(serde_json::Value::to_string))
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn access_events(
        &self,
        before: Option<i64>,
        limit: u32,
    ) -> StoreResult<Vec<StoredAccessEvent>> {
        let rows =
            sqlx::query("SELECT * FROM access_audit WHERE id < $1 ORDER BY id DESC LIMIT $2")
                .bind(before.unwrap_or(i64::MAX))
                .bind(i64::from(limit))
                .fetch_all(self.shared().read)
                .await?;
        rows.iter().map(access_event_from_row).collect()
    }
}

fn access_event_from_row(r: &impl RowRead) -> StoreResult<StoredAccessEvent> {
    let status = r
        .opt_int("status")?
        .map(|s| u16::try_from(s).map_err(|_| StoreError::Corrupt(format!("audit status {s}"))))
        .transpose()?;
    let detail = r
        .opt_text("detail")?
        .map(|d| {
            serde_json::from_str(&d).map_err(|e| StoreError::Corrupt(format!("audit detail: {e}")))
        })
        .transpose()?;
    Ok(StoredAccessEvent {
        id: r.int("id")?,
        event: AccessEvent {
            at: parse_ts(&r.text("at")?)?,
            kind: r.text("kind")?,
            actor: r.opt_text("actor")?,
            key_id: r.opt_text("key_id")?,
            route: r.opt_text("route")?,
            status,
            reason: r.opt_text("reason")?,
            detail,
        },
    })
}
