//! [`Store`] and [`RunLedger`] for [`SqliteStore`]: writes on a run's path go through the
//! group-commit writer, reads go to the reader pool.

use super::SqliteStore;
use super::rows::LAST_LOGGED_SEQ;
use crate::codec::ts;
use crate::rows::{message_from_row, push_row_events, run_from_row, session_from_row};
use crate::writer::StoreOp;
use crate::{RecoveredRun, SessionPage, Store, StoreResult, StoredEvent};
use async_trait::async_trait;
use chrono::Utc;
use elfgate_core::{
    AuditRecord, LedgerError, Message, MessageId, Run, RunId, RunLedger, RunOutcome,
    SEQ_RESERVE_BLOCK, Session, SessionId, TokenUsage,
};
use sqlx::Row;

#[async_trait]
impl RunLedger for SqliteStore {
    async fn run_started(&self, session_id: SessionId, run_id: RunId) -> Result<(), LedgerError> {
        self.writer
            .run(StoreOp::RunStarted {
                session_id,
                run_id,
                at: ts(&Utc::now()),
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

    async fn create_session(
        &self,
        s: &Session,
        first_run: &Run,
        first_message: Option<&Message>,
    ) -> StoreResult<()> {
        // Group commit: sessions created at the same moment share one transaction.
        self.writer
            .run(StoreOp::CreateSession(
                Box::new(s.clone()),
                Box::new(first_run.clone()),
                first_message.map(|m| Box::new(m.clone())),
            ))
            .await
    }

    async fn get_session(&self, id: SessionId) -> StoreResult<Option<Session>> {
        let row = sqlx::query("SELECT * FROM sessions WHERE id = ?")
            .bind(id.to_string())
            .fetch_optional(&self.read)
            .await?;
        row.as_ref().map(session_from_row).transpose()
    }

    async fn list_sessions(
        &self,
        limit: u32,
        cursor: Option<SessionId>,
    ) -> StoreResult<SessionPage> {
        let limit = limit.clamp(1, 500);
        // Ids are UUIDv7: their text order is creation order.
        // With each session the blocks of its first user message (through the messages'
        // session index), for a list to show a session without a title.
        macro_rules! with_first_user_blocks {
            ($rest:literal) => {
                concat!(
                    "SELECT *, (SELECT m.blocks FROM messages m \
                     WHERE m.session_id = sessions.id AND m.role = 'user' \
                     ORDER BY m.created_at, m.id LIMIT 1) AS first_user_blocks FROM sessions ",
                    $rest
                )
            };
        }
        let rows = match cursor {
            Some(c) => {
                sqlx::query(with_first_user_blocks!(
                    "WHERE id < ? ORDER BY id DESC LIMIT ?"
                ))
                .bind(c.to_string())
                .bind(limit as i64 + 1)
                .fetch_all(&self.read)
                .await?
            }
            None => {
                sqlx::query(with_first_user_blocks!("ORDER BY id DESC LIMIT ?"))
                    .bind(limit as i64 + 1)
                    .fetch_all(&self.read)
                    .await?
            }
        };
        let mut sessions = rows
            .iter()
            .map(session_from_row)
            .collect::<StoreResult<Vec<_>>>()?;
        let mut first_prompts = std::collections::HashMap::new();
        for (row, session) in rows.iter().zip(&sessions) {
            let blocks: Option<String> = row.try_get("first_user_blocks")?;
            if let Some(text) = blocks.as_deref().and_then(crate::rows::first_text) {
                first_prompts.insert(session.id, text);
            }
        }
        let next_cursor = if sessions.len() > limit as usize {
            sessions.truncate(limit as usize);
            sessions.last().map(|s| s.id)
        } else {
            None
        };
        first_prompts.retain(|id, _| sessions.iter().any(|s| s.id == *id));
        Ok(SessionPage {
            sessions,
            first_prompts,
            next_cursor,
        })
    }

    async fn delete_session(&self, id: SessionId) -> StoreResult<bool> {
        let mut tx = self.write.begin().await?;
        let sid = id.to_string();
        sqlx::query("DELETE FROM events WHERE session_id = ?")
            .bind(&sid)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM audit WHERE session_id = ?")
            .bind(&sid)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM messages WHERE session_id = ?")
            .bind(&sid)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM runs WHERE session_id = ?")
            .bind(&sid)
            .execute(&mut *tx)
            .await?;
        let gone = sqlx::query("DELETE FROM sessions WHERE id = ?")
            .bind(&sid)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(gone > 0)
    }

    async fn set_session_engine_config(
        &self,
        id: SessionId,
        engine_config: &serde_json::Value,
    ) -> StoreResult<()> {
        self.writer
            .run(StoreOp::SessionEngineConfig {
                session_id: id,
                engine_config: engine_config.to_string(),
                at: ts(&Utc::now()),
            })
            .await
    }

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

    async fn find_run(&self, run_id: RunId) -> StoreResult<Option<Run>> {
        let row = sqlx::query("SELECT * FROM runs WHERE id = ?")
            .bind(run_id.to_string())
            .fetch_optional(&self.read)
            .await?;
        row.as_ref().map(run_from_row).transpose()
    }

    async fn get_run(&self, session_id: SessionId, run_id: RunId) -> StoreResult<Option<Run>> {
        let row = sqlx::query("SELECT * FROM runs WHERE id = ? AND session_id = ?")
            .bind(run_id.to_string())
            .bind(session_id.to_string())
            .fetch_optional(&self.read)
            .await?;
        row.as_ref().map(run_from_row).transpose()
    }

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

    async fn insert_message(&self, m: &Message) -> StoreResult<()> {
        // Group commit: messages stored at the same moment by many runs share one transaction.
        self.writer.run(StoreOp::InsertMessage(m.clone())).await
    }

    async fn list_messages(&self, session_id: SessionId, limit: u32) -> StoreResult<Vec<Message>> {
        let rows = sqlx::query(
            "SELECT * FROM (SELECT rowid AS rid, * FROM messages WHERE session_id = ? \
             ORDER BY rowid DESC LIMIT ?) ORDER BY rid ASC",
        )
        .bind(session_id.to_string())
        .bind(limit.max(1) as i64)
        .fetch_all(&self.read)
        .await?;
        rows.iter().map(message_from_row).collect()
    }

    async fn latest_message(&self, session_id: SessionId) -> StoreResult<Option<Message>> {
        let row =
            sqlx::query("SELECT * FROM messages WHERE session_id = ? ORDER BY rowid DESC LIMIT 1")
                .bind(session_id.to_string())
                .fetch_optional(&self.read)
                .await?;
        row.as_ref().map(message_from_row).transpose()
    }

    async fn get_message(
        &self,
        session_id: SessionId,
        id: MessageId,
    ) -> StoreResult<Option<Message>> {
        let row = sqlx::query("SELECT * FROM messages WHERE id = ? AND session_id = ?")
            .bind(id.to_string())
            .bind(session_id.to_string())
            .fetch_optional(&self.read)
            .await?;
        row.as_ref().map(message_from_row).transpose()
    }

    async fn branch(
        &self,
        session_id: SessionId,
        leaf: MessageId,
        limit: u32,
    ) -> StoreResult<Vec<Message>> {
        let rows = sqlx::query(
            "WITH RECURSIVE chain(id, parent_id, depth) AS ( \
               SELECT id, parent_id, 0 FROM messages WHERE id = ? AND session_id = ? \
               UNION ALL \
               SELECT m.id, m.parent_id, c.depth + 1 FROM messages m JOIN chain c ON m.id = c.parent_id \
               WHERE c.depth + 1 < ? AND m.session_id = ? \
             ) \
             SELECT messages.* FROM chain JOIN messages ON messages.id = chain.id ORDER BY chain.depth DESC",
        )
        .bind(leaf.to_string())
        .bind(session_id.to_string())
        .bind(limit as i64)
        .bind(session_id.to_string())
        .fetch_all(&self.read)
        .await?;
        rows.iter().map(message_from_row).collect()
    }

    async fn last_seq(&self, session_id: SessionId) -> StoreResult<u64> {
        let seq: Option<i64> = sqlx::query_scalar(LAST_LOGGED_SEQ)
            .bind(session_id.to_string())
            .fetch_optional(&self.read)
            .await?;
        Ok(seq.unwrap_or(0).max(0) as u64)
    }

    async fn open_seq_range(&self, session_id: SessionId) -> StoreResult<(u64, u64)> {
        let sid = session_id.to_string();
        let mut tx = self.write.begin().await?;
        let logged: Option<i64> = sqlx::query_scalar(LAST_LOGGED_SEQ)
            .bind(&sid)
            .fetch_optional(&mut *tx)
            .await?;
        let reserved: Option<i64> =
            sqlx::query_scalar("SELECT event_seq_reserved FROM sessions WHERE id = ?")
                .bind(&sid)
                .fetch_optional(&mut *tx)
                .await?;
        let last = logged.unwrap_or(0).max(reserved.unwrap_or(0)).max(0) as u64;
        let upto = last + SEQ_RESERVE_BLOCK;
        sqlx::query("UPDATE sessions SET event_seq_reserved = ? WHERE id = ?")
            .bind(upto as i64)
            .bind(&sid)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok((last, upto))
    }

    async fn events_after(
        &self,
        session_id: SessionId,
        after: u64,
        limit: u32,
    ) -> StoreResult<Vec<StoredEvent>> {
        use futures_util::TryStreamExt;
        let sid = session_id.to_string();
        let after_i = after.min(i64::MAX as u64) as i64;
        // From the row holding seq `after` + 1: a merged row that starts at or before the cursor
        // may go on past it. Rows hold one event or more, so `limit` + 1 rows are enough.
        let mut rows = sqlx::query(
            "SELECT seq, last_seq, type, payload, run_id FROM events WHERE session_id = ? \
             AND seq >= COALESCE((SELECT seq FROM events WHERE session_id = ? AND seq <= ? \
             ORDER BY seq DESC LIMIT 1), 0) ORDER BY seq LIMIT ?",
        )
        .bind(&sid)
        .bind(&sid)
        .bind(after_i)
        .bind(limit as i64 + 1)
        .fetch(&self.read);
        let limit = limit as usize;
        let mut out = Vec::new();
        while out.len() < limit {
            let Some(r) = rows.try_next().await? else {
                break;
            };
            push_row_events(&mut out, &sid, &r, after)?;
        }
        out.truncate(limit);
        Ok(out)
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

    async fn put_workflow(
        &self,
        name: &str,
        definition: &serde_json::Value,
        write: crate::WorkflowWrite,
    ) -> StoreResult<Option<crate::StoredWorkflow>> {
        self.put_workflow_row(name, definition, write).await
    }

    async fn get_workflow(
        &self,
        name: &str,
        version: Option<u32>,
    ) -> StoreResult<Option<crate::StoredWorkflow>> {
        self.get_workflow_row(name, version).await
    }

    async fn list_workflows(&self) -> StoreResult<Vec<crate::StoredWorkflow>> {
        self.list_workflow_rows().await
    }

    async fn workflows_revision(&self) -> StoreResult<(i64, i64)> {
        self.workflows_revision_row().await
    }

    async fn delete_workflow(&self, name: &str) -> StoreResult<bool> {
        self.delete_workflow_rows(name).await
    }

    async fn claim_workflow_fire(
        &self,
        name: &str,
        at: chrono::DateTime<chrono::Utc>,
    ) -> StoreResult<bool> {
        self.claim_fire_row(name, at).await
    }

    async fn pending_run_ends(&self, limit: u32) -> StoreResult<Vec<crate::RunEndNotice>> {
        self.pending_run_end_rows(limit).await
    }

    async fn queue_run_end(
        &self,
        run_id: RunId,
        deliveries: &[crate::WebhookDelivery],
        max_pending: u32,
    ) -> StoreResult<Option<Vec<String>>> {
        self.queue_run_end_rows(run_id, deliveries, max_pending)
            .await
    }

    async fn enqueue_delivery(
        &self,
        d: &crate::WebhookDelivery,
        max_pending: u32,
    ) -> StoreResult<bool> {
        self.enqueue_delivery_row(d, max_pending).await
    }

    async fn due_deliveries(
        &self,
        now: chrono::DateTime<chrono::Utc>,
        per_target: u32,
        limit: u32,
    ) -> StoreResult<Vec<crate::WebhookDelivery>> {
        self.due_delivery_rows(now, per_target, limit).await
    }

    async fn claim_delivery(
        &self,
        id: &str,
        due: chrono::DateTime<chrono::Utc>,
        until: chrono::DateTime<chrono::Utc>,
    ) -> StoreResult<bool> {
        self.claim_delivery_row(id, due, until).await
    }

    async fn record_delivery(&self, d: &crate::WebhookDelivery) -> StoreResult<()> {
        self.record_delivery_row(d).await
    }

    async fn list_deliveries(&self, limit: u32) -> StoreResult<Vec<crate::WebhookDelivery>> {
        self.list_delivery_rows(limit).await
    }

    async fn claim_hook_delivery(
        &self,
        hook: &str,
        id: &str,
        now: chrono::DateTime<chrono::Utc>,
        until: chrono::DateTime<chrono::Utc>,
    ) -> StoreResult<bool> {
        self.claim_hook_delivery_row(hook, id, now, until).await
    }

    async fn release_hook_delivery(&self, hook: &str, id: &str) -> StoreResult<()> {
        self.release_hook_delivery_row(hook, id).await
    }
}
