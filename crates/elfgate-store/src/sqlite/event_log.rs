//! The event log read back, and its seqs reserved, on SQLite.

use super::SqliteStore;
use crate::EventLog;
use crate::rows::push_row_events;
use crate::shared::LAST_LOGGED_SEQ;
use crate::{StoreResult, StoredEvent};
use async_trait::async_trait;
use elfgate_core::{SEQ_RESERVE_BLOCK, SessionId};

#[async_trait]
impl EventLog for SqliteStore {
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
}
