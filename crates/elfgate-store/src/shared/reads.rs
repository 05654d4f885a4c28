//! Reads of sessions, messages and runs whose SQL is the same on both backends, the deletion of a
//! session's rows, and the page of sessions made of a backend's rows. What differs stays with
//! each backend: the order of insertion (SQLite's `rowid`, PostgreSQL's `rid` column), the casts
//! PostgreSQL needs, and the writes on a run's path (SQLite's group-commit writer, PostgreSQL's
//! lease checks).

use super::{SharedDb, SharedSql};
use crate::rows::{RowRead, first_text, message_from_row, run_from_row, session_from_row};
use crate::{SessionPage, StoreResult};
use elfgate_core::{Message, MessageId, Run, RunId, Session, SessionId};
use sqlx::{Encode, Executor, Type};

impl<DB: SharedDb> SharedSql<'_, DB>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
{
    /// One session.
    pub(crate) async fn session(&self, id: SessionId) -> StoreResult<Option<Session>> {
        let row = sqlx::query("SELECT * FROM sessions WHERE id = $1")
            .bind(id.to_string())
            .fetch_optional(self.read)
            .await?;
        row.as_ref().map(session_from_row).transpose()
    }

    /// One message of a session.
    pub(crate) async fn message(
        &self,
        session_id: SessionId,
        id: MessageId,
    ) -> StoreResult<Option<Message>> {
        let row = sqlx::query("SELECT * FROM messages WHERE id = $1 AND session_id = $2")
            .bind(id.to_string())
            .bind(session_id.to_string())
            .fetch_optional(self.read)
            .await?;
        row.as_ref().map(message_from_row).transpose()
    }

    /// One run of a session.
    pub(crate) async fn run(
        &self,
        session_id: SessionId,
        run_id: RunId,
    ) -> StoreResult<Option<Run>> {
        let row = sqlx::query("SELECT * FROM runs WHERE id = $1 AND session_id = $2")
            .bind(run_id.to_string())
            .bind(session_id.to_string())
            .fetch_optional(self.read)
            .await?;
        row.as_ref().map(run_from_row).transpose()
    }

    /// A run by its id alone.
    pub(crate) async fn run_by_id(&self, run_id: RunId) -> StoreResult<Option<Run>> {
        let row = sqlx::query("SELECT * FROM runs WHERE id = $1")
            .bind(run_id.to_string())
            .fetch_optional(self.read)
            .await?;
        row.as_ref().map(run_from_row).transpose()
    }

    /// The run of a session started by the prompt with this idempotency key.
    pub(crate) async fn session_run_by_client_msg_id(
        &self,
        session_id: SessionId,
        client_msg_id: &str,
    ) -> StoreResult<Option<Run>> {
        let row = sqlx::query("SELECT * FROM runs WHERE session_id = $1 AND client_msg_id = $2")
            .bind(session_id.to_string())
            .bind(client_msg_id.to_owned())
            .fetch_optional(self.read)
            .await?;
        row.as_ref().map(run_from_row).transpose()
    }
}

/// Deletes a session's rows in the caller's transaction, what refers to the session first: true
/// when the session was there.
pub(crate) async fn delete_session_rows<DB: SharedDb>(
    tx: &mut DB::Connection,
    id: SessionId,
) -> StoreResult<bool>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
{
    let sid = id.to_string();
    for sql in [
        "DELETE FROM events WHERE session_id = $1",
        "DELETE FROM audit WHERE session_id = $1",
        "DELETE FROM messages WHERE session_id = $1",
        "DELETE FROM runs WHERE session_id = $1",
    ] {
        sqlx::query(sql).bind(sid.clone()).execute(&mut *tx).await?;
    }
    let gone = sqlx::query("DELETE FROM sessions WHERE id = $1")
        .bind(sid)
        .execute(&mut *tx)
        .await?;
    Ok(super::RowsAffected::rows_changed(&gone) > 0)
}

/// A page of at most `limit` sessions from `rows`: sessions newest first, one more than `limit`
/// when there is a next page, each with its first user message's blocks in column
/// `first_user_blocks`.
pub(crate) fn session_page(rows: &[impl RowRead], limit: u32) -> StoreResult<SessionPage> {
    let mut sessions = rows
        .iter()
        .map(session_from_row)
        .collect::<StoreResult<Vec<_>>>()?;
    let mut first_prompts = std::collections::HashMap::new();
    for (row, session) in rows.iter().zip(&sessions) {
        let blocks = row.opt_text("first_user_blocks")?;
        if let Some(text) = blocks.as_deref().and_then(first_text) {
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
