//! [`Store`] and [`RunLedger`] for [`PgStore`]: each write a transaction on the pool, reads on
//! the pool, the event log through the log writer.

use super::PgStore;
use super::statements::{self, SessionColumn};
use crate::codec::ts;
use crate::rows::{message_from_row, push_row_events, run_from_row, session_from_row};
use crate::{RecoveredRun, SessionPage, Store, StoreError, StoreResult, StoredEvent};
use async_trait::async_trait;
use chrono::Utc;
use elfgate_core::{
    AuditRecord, LedgerError, Message, MessageId, Run, RunId, RunLedger, RunOutcome,
    SEQ_RESERVE_BLOCK, Session, SessionId, TokenUsage,
};
use sqlx::{PgConnection, Row};

/// The highest seq logged for a session ($1: the session). A merged row covers `seq..=last_seq`
/// and rows never overlap, so the row with the highest first seq holds it.
pub(super) const LAST_LOGGED_SEQ: &str =
    "SELECT COALESCE(last_seq, seq) FROM events WHERE session_id = $1 ORDER BY seq DESC LIMIT 1";

fn ledger(e: StoreError) -> LedgerError {
    LedgerError(e.report(), e.is_transient())
}

/// A fleet node's lease checks around the writes below; nothing on a single node.
impl PgStore {
    /// Claims the session's lease in `tx` (a fleet node): the epoch to record once committed,
    /// and when the claim was sent (the lease lasts from no later than that).
    async fn claim(
        &self,
        tx: &mut PgConnection,
        session: SessionId,
    ) -> StoreResult<Option<(i64, tokio::time::Instant)>> {
        match &self.fleet {
            Some(m) => {
                let sent = tokio::time::Instant::now();
                Ok(Some((m.claim(tx, session).await?, sent)))
            }
            None => Ok(None),
        }
    }

    fn claimed(&self, session: SessionId, lease: Option<(i64, tokio::time::Instant)>) {
        if let (Some(m), Some((epoch, sent))) = (&self.fleet, lease) {
            m.claimed(session, epoch, sent);
        }
    }

    /// Refuses a write for a session whose lease this node lost.
    async fn fence_check(&self, tx: &mut PgConnection, session: SessionId) -> StoreResult<()> {
        match &self.fleet {
            Some(m) => m.check(tx, session).await,
            None => Ok(()),
        }
    }

    /// Refuses to delete a session another live node is running.
    async fn refuse_if_run_elsewhere(
        &self,
        tx: &mut PgConnection,
        session: SessionId,
    ) -> StoreResult<()> {
        let Some(m) = &self.fleet else {
            return Ok(());
        };
        let owner: Option<String> = sqlx::query_scalar(
            "SELECT node_id FROM session_leases WHERE session_id = $1 AND expires_at > now() \
             FOR UPDATE",
        )
        .bind(session.to_string())
        .fetch_optional(&mut *tx)
        .await?;
        match owner {
            Some(node) if node != m.me.node_id => Err(StoreError::OwnedElsewhere {
                session: session.to_string(),
                node,
            }),
            _ => Ok(()),
        }
    }
}

#[async_trait]
impl RunLedger for PgStore {
    async fn run_started(&self, session_id: SessionId, run_id: RunId) -> Result<(), LedgerError> {
        let at = ts(&Utc::now());
        let run = async {
            let mut tx = self.pool.begin().await?;
            self.fence_check(&mut tx, session_id).await?;
            statements::run_started(&mut tx, session_id, run_id, &at).await?;
            tx.commit().await?;
            Ok::<(), StoreError>(())
        };
        run.await.map_err(ledger)
    }

    async fn run_finished(
        &self,
        session_id: SessionId,
        run_id: RunId,
        outcome: &RunOutcome,
        answer: Option<&Message>,
    ) -> Result<(), LedgerError> {
        let at = ts(&Utc::now());
        let run = async {
            let mut tx = self.pool.begin().await?;
            self.fence_check(&mut tx, session_id).await?;
            if let Some(m) = answer {
                statements::insert_message(&mut tx, m).await?;
            }
            statements::run_finished(
                &mut tx,
                session_id,
                run_id,
                outcome,
                self.record_run_ends,
                &at,
            )
            .await?;
            tx.commit().await?;
            Ok::<(), StoreError>(())
        };
        run.await.map_err(ledger)
    }

    async fn message_added(&self, message: &Message) -> Result<(), LedgerError> {
        self.insert_message(message).await.map_err(ledger)
    }

    async fn cli_session_id_set(
        &self,
        session_id: SessionId,
        cli_session_id: &str,
    ) -> Result<(), LedgerError> {
        let at = ts(&Utc::now());
        let run = async {
            let mut tx = self.pool.begin().await?;
            self.fence_check(&mut tx, session_id).await?;
            statements::set_session_column(
                &mut tx,
                session_id,
                SessionColumn::CliSessionId,
                cli_session_id,
                &at,
            )
            .await?;
            tx.commit().await?;
            Ok::<(), StoreError>(())
        };
        run.await.map_err(ledger)
    }
}

#[async_trait]
impl Store for PgStore {
    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn create_session(
        &self,
        s: &Session,
        first_run: &Run,
        first_message: Option<&Message>,
    ) -> StoreResult<()> {
        let _claiming = self.fleet.as_ref().map(|m| m.claiming(s.id));
        let mut tx = self.pool.begin().await?;
        statements::insert_session(&mut tx, s).await?;
        let lease = self.claim(&mut tx, s.id).await?;
        statements::insert_run(&mut tx, first_run).await?;
        if let Some(m) = first_message {
            statements::insert_message(&mut tx, m).await?;
        }
        tx.commit().await?;
        self.claimed(s.id, lease);
        Ok(())
    }

    async fn get_session(&self, id: SessionId) -> StoreResult<Option<Session>> {
        let row = sqlx::query("SELECT * FROM sessions WHERE id = $1")
            .bind(id.to_string())
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(session_from_row).transpose()
    }

    async fn list_sessions(
        &self,
        limit: u32,
        cursor: Option<SessionId>,
    ) -> StoreResult<SessionPage> {
        let limit = limit.clamp(1, 500);
        // Ids are UUIDv7 text collated bytewise: their order is creation order. With each
        // session the blocks of its first user message, for a list to show a session without a
        // title.
        let rows = sqlx::query(
            "SELECT *, (SELECT m.blocks FROM messages m \
             WHERE m.session_id = sessions.id AND m.role = 'user' \
             ORDER BY m.rid LIMIT 1) AS first_user_blocks FROM sessions \
             WHERE $1::text IS NULL OR id < $1 ORDER BY id DESC LIMIT $2",
        )
        .bind(cursor.map(|c| c.to_string()))
        .bind(limit as i64 + 1)
        .fetch_all(&self.pool)
        .await?;
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
        let mut tx = self.pool.begin().await?;
        let sid = id.to_string();
        self.refuse_if_run_elsewhere(&mut tx, id).await?;
        for sql in [
            "DELETE FROM events WHERE session_id = $1",
            "DELETE FROM audit WHERE session_id = $1",
            "DELETE FROM messages WHERE session_id = $1",
            "DELETE FROM runs WHERE session_id = $1",
        ] {
            sqlx::query(sql).bind(&sid).execute(&mut *tx).await?;
        }
        let gone = sqlx::query("DELETE FROM sessions WHERE id = $1")
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
        let mut conn = self.pool.acquire().await?;
        statements::set_session_column(
            &mut conn,
            id,
            SessionColumn::EngineConfig,
            &engine_config.to_string(),
            &ts(&Utc::now()),
        )
        .await
    }

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

    async fn find_run(&self, run_id: RunId) -> StoreResult<Option<Run>> {
        let row = sqlx::query("SELECT * FROM runs WHERE id = $1")
            .bind(run_id.to_string())
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(run_from_row).transpose()
    }

    async fn get_run(&self, session_id: SessionId, run_id: RunId) -> StoreResult<Option<Run>> {
        let row = sqlx::query("SELECT * FROM runs WHERE id = $1 AND session_id = $2")
            .bind(run_id.to_string())
            .bind(session_id.to_string())
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(run_from_row).transpose()
    }

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

    async fn insert_message(&self, m: &Message) -> StoreResult<()> {
        if self.fleet.is_none() {
            let mut conn = self.pool.acquire().await?;
            return statements::insert_message(&mut conn, m).await;
        }
        let mut tx = self.pool.begin().await?;
        self.fence_check(&mut tx, m.session_id).await?;
        statements::insert_message(&mut tx, m).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn list_messages(&self, session_id: SessionId, limit: u32) -> StoreResult<Vec<Message>> {
        let rows = sqlx::query(
            "SELECT * FROM (SELECT * FROM messages WHERE session_id = $1 \
             ORDER BY rid DESC LIMIT $2) last ORDER BY rid ASC",
        )
        .bind(session_id.to_string())
        .bind(limit.max(1) as i64)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(message_from_row).collect()
    }

    async fn latest_message(&self, session_id: SessionId) -> StoreResult<Option<Message>> {
        let row =
            sqlx::query("SELECT * FROM messages WHERE session_id = $1 ORDER BY rid DESC LIMIT 1")
                .bind(session_id.to_string())
                .fetch_optional(&self.pool)
                .await?;
        row.as_ref().map(message_from_row).transpose()
    }

    async fn get_message(
        &self,
        session_id: SessionId,
        id: MessageId,
    ) -> StoreResult<Option<Message>> {
        let row = sqlx::query("SELECT * FROM messages WHERE id = $1 AND session_id = $2")
            .bind(id.to_string())
            .bind(session_id.to_string())
            .fetch_optional(&self.pool)
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
               SELECT id, parent_id, 0::BIGINT FROM messages WHERE id = $1 AND session_id = $2 \
               UNION ALL \
               SELECT m.id, m.parent_id, c.depth + 1 FROM messages m JOIN chain c ON m.id = c.parent_id \
               WHERE c.depth + 1 < $3 AND m.session_id = $2 \
             ) \
             SELECT messages.* FROM chain JOIN messages ON messages.id = chain.id ORDER BY chain.depth DESC",
        )
        .bind(leaf.to_string())
        .bind(session_id.to_string())
        .bind(limit as i64)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(message_from_row).collect()
    }

    async fn last_seq(&self, session_id: SessionId) -> StoreResult<u64> {
        let seq: Option<i64> = sqlx::query_scalar(LAST_LOGGED_SEQ)
            .bind(session_id.to_string())
            .fetch_optional(&self.pool)
            .await?;
        Ok(seq.unwrap_or(0).max(0) as u64)
    }

    async fn open_seq_range(&self, session_id: SessionId) -> StoreResult<(u64, u64)> {
        let sid = session_id.to_string();
        let mut tx = self.pool.begin().await?;
        self.fence_check(&mut tx, session_id).await?;
        // The session's row locked first: two openers of one session take turns.
        let reserved: Option<i64> =
            sqlx::query_scalar("SELECT event_seq_reserved FROM sessions WHERE id = $1 FOR UPDATE")
                .bind(&sid)
                .fetch_optional(&mut *tx)
                .await?;
        let logged: Option<i64> = sqlx::query_scalar(LAST_LOGGED_SEQ)
            .bind(&sid)
            .fetch_optional(&mut *tx)
            .await?;
        let last = logged.unwrap_or(0).max(reserved.unwrap_or(0)).max(0) as u64;
        let upto = last + SEQ_RESERVE_BLOCK;
        sqlx::query("UPDATE sessions SET event_seq_reserved = $1 WHERE id = $2")
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
        let sid = session_id.to_string();
        let after_i = after.min(i64::MAX as u64) as i64;
        // From the row holding seq `after` + 1: a merged row that starts at or before the cursor
        // may go on past it. Rows hold one event or more, so `limit` + 1 rows are enough.
        let rows = sqlx::query(
            "SELECT seq, last_seq, type, payload, run_id FROM events WHERE session_id = $1 \
             AND seq >= COALESCE((SELECT seq FROM events WHERE session_id = $1 AND seq <= $2 \
             ORDER BY seq DESC LIMIT 1), 0) ORDER BY seq LIMIT $3",
        )
        .bind(&sid)
        .bind(after_i)
        .bind(limit as i64 + 1)
        .fetch_all(&self.pool)
        .await?;
        let limit = limit as usize;
        let mut out = Vec::new();
        for r in &rows {
            if out.len() >= limit {
                break;
            }
            push_row_events(&mut out, &sid, r, after)?;
        }
        out.truncate(limit);
        Ok(out)
    }

    async fn recover_unfinished_runs(&self) -> StoreResult<Vec<RecoveredRun>> {
        self.recover_unfinished_runs_now().await
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
