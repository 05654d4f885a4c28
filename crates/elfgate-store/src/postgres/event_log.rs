//! The event log read back, and its seqs reserved, on PostgreSQL.

use super::PgStore;
use crate::EventLog;
use crate::rows::push_row_events;
use crate::shared::LAST_LOGGED_SEQ;
use crate::{StoreResult, StoredEvent};
use async_trait::async_trait;
use elfgate_core::{SEQ_RESERVE_BLOCK, SessionId};

#[async_trait]
impl EventLog for PgStore {
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
}
