//! Runs and the audit of refused tool calls on PostgreSQL.

use super::PgStore;
use super::statements::{self};
use crate::rows::run_from_row;
use crate::{AuditLog, RunStore};
use crate::{RecoveredRun, StoreResult};
use async_trait::async_trait;
use elfgate_core::{AuditRecord, Run, RunId, SessionId, TokenUsage};

#[async_trait]
impl RunStore for PgStore {
    async fn create_run(&self, run: &Run) -> StoreResult<()> {
        let _claiming = self.fleet.as_ref().map(|m| m.claiming(run.session_id));
        let mut tx = self.pool.begin().await?;
        let lease = self.claim(&mut tx, run.session_id).await?;
        statements::insert_run(&mut tx, run).await?;
        tx.commit().await?;
        self.claimed(run.session_id, lease);
        Ok(())
    }

    async fn run_by_client_msg_id(
        &self,
        session_id: Option<SessionId>,
        client_msg_id: &str,
    ) -> StoreResult<Option<Run>> {
        let row = match session_id {
            Some(s) => {
                sqlx::query("SELECT * FROM runs WHERE session_id = $1 AND client_msg_id = $2")
                    .bind(s.to_string())
                    .bind(client_msg_id)
                    .fetch_optional(&self.pool)
                    .await?
            }
            // A session's first run: its key identifies the session too.
            None => {
                sqlx::query(
                    "SELECT runs.* FROM runs WHERE runs.client_msg_id = $1 AND runs.rid = ( \
                       SELECT MIN(r2.rid) FROM runs r2 WHERE r2.session_id = runs.session_id) \
                     ORDER BY runs.rid DESC LIMIT 1",
                )
                .bind(client_msg_id)
                .fetch_optional(&self.pool)
                .await?
            }
        };
        row.as_ref().map(run_from_row).transpose()
    }

    async fn delete_run(&self, run_id: RunId) -> StoreResult<()> {
        sqlx::query("DELETE FROM runs WHERE id = $1")
            .bind(run_id.to_string())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn get_run(&self, session_id: SessionId, run_id: RunId) -> StoreResult<Option<Run>> {
        let row = sqlx::query("SELECT * FROM runs WHERE id = $1 AND session_id = $2")
            .bind(run_id.to_string())
            .bind(session_id.to_string())
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(run_from_row).transpose()
    }

    async fn find_run(&self, run_id: RunId) -> StoreResult<Option<Run>> {
        let row = sqlx::query("SELECT * FROM runs WHERE id = $1")
            .bind(run_id.to_string())
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(run_from_row).transpose()
    }

    async fn session_usage(&self, session_id: SessionId) -> StoreResult<TokenUsage> {
        let (input, output): (i64, i64) = sqlx::query_as(
            "SELECT COALESCE(SUM(input_tokens), 0)::BIGINT, COALESCE(SUM(output_tokens), 0)::BIGINT \
             FROM runs WHERE session_id = $1 AND ended_at IS NOT NULL",
        )
        .bind(session_id.to_string())
        .fetch_one(&self.pool)
        .await?;
        Ok(TokenUsage {
            input_tokens: input.max(0) as u64,
            output_tokens: output.max(0) as u64,
            ..TokenUsage::default()
        })
    }

    async fn recover_unfinished_runs(&self) -> StoreResult<Vec<RecoveredRun>> {
        self.recover_unfinished_runs_now().await
    }
}

#[async_trait]
impl AuditLog for PgStore {
    async fn record_blocked(&self, a: &AuditRecord) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO audit (session_id, run_id, tool_use_id, tool_name, gate, reason, input, \
             created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(a.session_id.to_string())
        .bind(a.run_id.to_string())
        .bind(&a.call.tool_use_id)
        .bind(&a.call.tool_name)
        .bind(a.call.gate.as_str())
        .bind(&a.call.reason)
        .bind(a.input.to_string())
        .bind(crate::codec::ts(&a.created_at))
        .execute(&self.pool)
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
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(crate::rows::audit_from_row).collect()
    }
}
