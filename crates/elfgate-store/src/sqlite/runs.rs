//! Runs and the audit of refused tool calls on SQLite.

use super::SqliteStore;
use crate::RunStore;
use crate::rows::run_from_row;
use crate::shared::SqlBackend;
use crate::writer::StoreOp;
use crate::{RecoveredRun, StoreResult};
use async_trait::async_trait;
use elfgate_core::{Run, RunId, SessionId, TokenUsage};

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
        if let Some(s) = session_id {
            return self
                .shared()
                .session_run_by_client_msg_id(s, client_msg_id)
                .await;
        }
        // A session's first run: its key identifies the session too.
        let row = sqlx::query(
            "SELECT runs.* FROM runs JOIN sessions ON sessions.id = runs.session_id \
             WHERE runs.client_msg_id = ? AND runs.id = ( \
               SELECT r2.id FROM runs r2 WHERE r2.session_id = runs.session_id \
               ORDER BY r2.rowid LIMIT 1) \
             ORDER BY runs.rowid DESC LIMIT 1",
        )
        .bind(client_msg_id)
        .fetch_optional(&self.read)
        .await?;
        row.as_ref().map(run_from_row).transpose()
    }

    async fn delete_run(&self, run_id: RunId) -> StoreResult<()> {
        self.writer.run(StoreOp::DeleteRun(run_id)).await
    }

    async fn get_run(&self, session_id: SessionId, run_id: RunId) -> StoreResult<Option<Run>> {
        self.shared().run(session_id, run_id).await
    }

    async fn find_run(&self, run_id: RunId) -> StoreResult<Option<Run>> {
        self.shared().run_by_id(run_id).await
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
