//! Sessions and their messages on SQLite.

use super::SqliteStore;
use crate::codec::ts;
use crate::rows::message_from_row;
use crate::shared::{SqlBackend, delete_session_rows, session_page};
use crate::writer::StoreOp;
use crate::{SessionPage, StoreResult};
use crate::{SessionReads, SessionStore, SessionsSeen};
use async_trait::async_trait;
use chrono::Utc;
use elfgate_core::{Message, MessageId, Run, Session, SessionId};

#[async_trait]
impl SessionReads for SqliteStore {
    async fn get_session(&self, id: SessionId) -> StoreResult<Option<Session>> {
        self.shared().session(id).await
    }

    async fn list_sessions(
        &self,
        seen: SessionsSeen<'_>,
        limit: u32,
        cursor: Option<SessionId>,
    ) -> StoreResult<SessionPage> {
        let limit = limit.clamp(1, 500);
        let (user, team) = seen.user_and_team();
        // Ids are UUIDv7: their text order is creation order.
        // With each session the blocks of its first user message (through the messages'
        // session index), for a list to show a session without a title. Only the sessions the
        // reader sees ($1, $2: its user and team, or none for all).
        macro_rules! with_first_user_blocks {
            ($rest:literal) => {
                concat!(
                    "SELECT *, (SELECT m.blocks FROM messages m \
                     WHERE m.session_id = sessions.id AND m.role = 'user' \
                     ORDER BY m.created_at, m.id LIMIT 1) AS first_user_blocks FROM sessions \
                     WHERE ($1 IS NULL OR owner = $1 OR (visibility = 'team' AND team = $2)) ",
                    $rest
                )
            };
        }
        let rows = match cursor {
            Some(c) => {
                sqlx::query(with_first_user_blocks!(
                    "AND id < $3 ORDER BY id DESC LIMIT $4"
                ))
                .bind(user)
                .bind(team)
                .bind(c.to_string())
                .bind(limit as i64 + 1)
                .fetch_all(&self.read)
                .await?
            }
            None => {
                sqlx::query(with_first_user_blocks!("ORDER BY id DESC LIMIT $3"))
                    .bind(user)
                    .bind(team)
                    .bind(limit as i64 + 1)
                    .fetch_all(&self.read)
                    .await?
            }
        };
        session_page(&rows, limit)
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
        self.shared().message(session_id, id).await
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
}

#[async_trait]
impl SessionStore for SqliteStore {
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

    async fn delete_session(&self, id: SessionId) -> StoreResult<bool> {
        let mut tx = self.write.begin().await?;
        let gone = delete_session_rows::<sqlx::Sqlite>(&mut tx, id).await?;
        tx.commit().await?;
        Ok(gone)
    }

    async fn insert_message(&self, m: &Message) -> StoreResult<()> {
        // Group commit: messages stored at the same moment by many runs share one transaction.
        self.writer.run(StoreOp::InsertMessage(m.clone())).await
    }
}
