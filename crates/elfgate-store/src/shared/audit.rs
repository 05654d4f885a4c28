//! The audit of refused tool calls (see [`AuditLog`]).

use super::SqlBackend;
use crate::codec::ts;
use crate::rows::audit_from_row;
use crate::{AuditLog, StoreResult};
use async_trait::async_trait;
use elfgate_core::{AuditRecord, SessionId};
use sqlx::{Database, Encode, Executor, Type};

#[async_trait]
impl<S> AuditLog for S
where
    S: SqlBackend,
    for<'c> &'c mut <S::Db as Database>::Connection: Executor<'c, Database = S::Db>,
    for<'q> String: Encode<'q, S::Db> + Type<S::Db>,
    for<'q> i64: Encode<'q, S::Db> + Type<S::Db>,
{
    async fn record_blocked(&self, a: &AuditRecord) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO audit (session_id, run_id, tool_use_id, tool_name, gate, reason, input, \
             created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(a.session_id.to_string())
        .bind(a.run_id.to_string())
        .bind(a.call.tool_use_id.clone())
        .bind(a.call.tool_name.clone())
        .bind(a.call.gate.as_str().to_owned())
        .bind(a.call.reason.clone())
        .bind(a.input.to_string())
        .bind(ts(&a.created_at))
        .execute(self.shared().write)
        .await?;
        Ok(())
    }

    async fn list_audit(&self, session_id: SessionId, limit: u32) -> StoreResult<Vec<AuditRecord>> {
        let rows = sqlx::query(
            "SELECT * FROM (SELECT * FROM audit WHERE session_id = $1 ORDER BY id DESC LIMIT $2) \
             AS latest ORDER BY id ASC",
        )
        .bind(session_id.to_string())
        .bind(limit.max(1) as i64)
        .fetch_all(self.shared().read)
        .await?;
        rows.iter().map(audit_from_row).collect()
    }
}
