//! Runs and the audit of refused tool calls on SQLite.

use super::SqliteStore;
use crate::rows::run_from_row;
use crate::writer::StoreOp;
use crate::{AuditLog, RunStore};
use crate::{RecoveredRun, StoreResult};
use async_trait::async_trait;
use elfgate_core::{AuditRecord, Run, RunId, SessionId, TokenUsage};

#[async_trait]
impl RunStore for SqliteStore {
    async fn create_run(&self, run: &Run) -> StoreResult<()> {
        self.writer
            .run(StoreOp::CreateRun(Box::new(run.clone())))
            .await
    }

    async fn run_by_client_msg_id(
        &self,
        session_id: Option<SessionId>,
        client_msg_id: &str,
    ) -> StoreResult<Option<Run>> {
        let row = match session_id {
            Some(s) => {
                sqlx::query("SELECT * FROM runs WHERE session_id = ? AND client_msg_id = ?")
                    .bind(s.to_string())
                    .bind(client_msg_id)
                    .fetch_optional(&self.read)
                    .await?
            }
            // A session's first run: its key identifies the session too.
            None => {
                sqlx::query(
                    "SELECT runs.* FROM runs JOIN sessions ON sessions.id = runs.session_id \
                     WHERE runs.client_msg_id = ? AND runs.id = ( \
                       SELECT r2.id FROM runs r2 WHERE r2.session_id = runs.session_id \
                       ORDER BY r2.rowid LIMIT 1) \
                     ORDER BY runs.rowid DESC LIMIT 1",
                )
                .bind(client_msg_id)
                .fetch_optional(&self.read)
                .await?
            }
        };
        row.as_ref().map(run_from_row).transpose()
    }

    async fn delete_run(&self, run_id: RunId) -> StoreResult<()> {
        self.writer.run(StoreOp::DeleteRun(run_id)).await
    }

    async fn get_run(&self, session_id: SessionId, run_id: RunId) -> StoreResult<Option<Run>> {
        let row = sqlx::query("SELECT * FROM runs WHERE id = ? AND session_id = ?")
            .bind(run_id.to_string())
            .bind(session_id.to_string())
            .fetch_optional(&self.read)
            .await?;
        row.as_ref().map(run_from_row).transpose()
    }

    async fn find_run(&self, run_id: RunId) -> StoreResult<Option<Run>> {
        let row = sqlx::query("SELECT * FROM runs WHERE id = ?")
            .bind(run_id.to_string())
            .fetch_optional(&self.read)
            .await?;
        row.as_ref().map(run_from_row).transpose()
    }

    async fn session_usage(&self, session_id: SessionId) -> StoreResult<TokenUsage> {
        let (input, output): (i64, i64) = sqlx::query_as(
            "SELECT COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0) FROM runs \
             WHERE session_id = ? AND ended_at IS NOT NULL",
        )
        .bind(session_id.to_string())
        .fetch_one(&self.read)
        .await?;
        Ok(TokenUsage {
            input_tokens: input.max(0) as u64,
            output_tokens: output.max(0) as u64,
            ..TokenUsage::default()
        })
    }

    async fn recover_unfinished_runs(&self) -> StoreResult<Vec<RecoveredRun>> {
        let runs = sqlx::query(
            "SELECT * FROM runs WHERE status IN ('running', 'queued') ORDER BY started_at",
        )
        .fetch_all(&self.write)
        .await?
        .iter()
        .map(run_from_row)
        .collect::<StoreResult<Vec<_>>>()?;
        // First the runs that did end: their `complete` must come before anything logged now.
        self.log_missing_ends().await?;
        let mut recovered = Vec::with_capacity(runs.len());
        for run in runs {
            recovered.push(self.recover_run(&run).await?);
        }
        Ok(recovered)
    }
}

#[async_trait]
impl AuditLog for SqliteStore {
    async fn record_blocked(&self, a: &AuditRecord) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO audit (session_id, run_id, tool_use_id, tool_name, gate, reason, input, \
             created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(a.session_id.to_string())
        .bind(a.run_id.to_string())
        .bind(&a.call.tool_use_id)
        .bind(&a.call.tool_name)
        .bind(a.call.gate.as_str())
        .bind(&a.call.reason)
        .bind(a.input.to_string())
        .bind(crate::codec::ts(&a.created_at))
        .execute(&self.write)
        .await?;
        Ok(())
    }

    async fn list_audit(&self, session_id: SessionId, limit: u32) -> StoreResult<Vec<AuditRecord>> {
        let rows = sqlx::query(
            "SELECT * FROM (SELECT * FROM audit WHERE session_id = ? ORDER BY id DESC LIMIT ?) \
             AS latest ORDER BY id ASC",
        )
        .bind(session_id.to_string())
        .bind(limit.max(1) as i64)
        .fetch_all(&self.read)
        .await?;
        rows.iter().map(crate::rows::audit_from_row).collect()
    }
}
