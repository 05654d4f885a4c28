//! [`Store`] and [`RunLedger`] for [`SqliteStore`]: writes on a run's path go through the
//! group-commit writer, reads go to the reader pool.

use super::SqliteStore;
use crate::codec::ts;
use crate::writer::StoreOp;
use crate::{SessionStore, Store, StoreResult};
use async_trait::async_trait;
use chrono::Utc;
use elfgate_core::{LedgerError, Message, RunId, RunLedger, RunOutcome, SessionId};

#[async_trait]
impl RunLedger for SqliteStore {
    async fn run_started(
        &self,
        session_id: SessionId,
        run_id: RunId,
        trace_id: Option<String>,
    ) -> Result<(), LedgerError> {
        self.writer
            .run(StoreOp::RunStarted {
                session_id,
                run_id,
                trace_id,
                at: ts(&Utc::now()),
            })
            .await
            .map_err(|e| LedgerError(e.report(), e.is_transient()))
    }

    async fn run_traced(
        &self,
        _session_id: SessionId,
        run_id: RunId,
        trace_id: &str,
    ) -> Result<(), LedgerError> {
        self.writer
            .run(StoreOp::RunTraced {
                run_id,
                trace_id: trace_id.to_string(),
            })
            .await
            .map_err(|e| LedgerError(e.report(), e.is_transient()))
    }

    async fn run_finished(
        &self,
        session_id: SessionId,
        run_id: RunId,
        outcome: &RunOutcome,
        answer: Option<&Message>,
    ) -> Result<(), LedgerError> {
        self.writer
            .run(StoreOp::RunFinished {
                session_id,
                run_id,
                outcome: Box::new(outcome.clone()),
                answer: answer.cloned().map(Box::new),
                record_end: self.record_run_ends,
                at: ts(&Utc::now()),
            })
            .await
            .map_err(|e| LedgerError(e.report(), e.is_transient()))
    }

    async fn message_added(&self, message: &Message) -> Result<(), LedgerError> {
        self.insert_message(message)
            .await
            .map_err(|e| LedgerError(e.report(), e.is_transient()))
    }

    async fn cli_session_id_set(
        &self,
        session_id: SessionId,
        cli_session_id: &str,
    ) -> Result<(), LedgerError> {
        self.writer
            .run(StoreOp::CliSessionId {
                session_id,
                cli_session_id: cli_session_id.to_string(),
                at: ts(&Utc::now()),
            })
            .await
            .map_err(|e| LedgerError(e.report(), e.is_transient()))
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.read).await?;
        Ok(())
    }
}
