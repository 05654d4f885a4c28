//! Runs and the audit of refused tool calls on PostgreSQL.

use super::PgStore;
use super::statements::{self};
use crate::RunStore;
use crate::rows::run_from_row;
use crate::shared::SqlBackend;
use crate::{RecoveredRun, StoreResult};
use async_trait::async_trait;
use elfgate_core::{Run, RunId, SessionId, TokenUsage};

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
        if let Some(s) = session_id {
            return self
                .shared()
                .session_run_by_client_msg_id(s, client_msg_id)
                .await;
        }
        // A session's first run: its key identifies the session too.
        let row = sqlx::query(
            "SELECT runs.* FROM runs WHERE runs.client_msg_id = $1 AND runs.rid = ( \
               SELECT MIN(r2.rid) FROM runs r2 WHERE r2.session_id = runs.session_id) \
             ORDER BY runs.rid DESC LIMIT 1",
        )
        .bind(client_msg_id)
        .fetch_optional(&self.pool)
        .await?;
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
        self.shared().run(session_id, run_id).await
    }

    async fn find_run(&self, run_id: RunId) -> StoreResult<Option<Run>> {
        self.shared().run_by_id(run_id).await
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
