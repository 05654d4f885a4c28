//! Sessions and their messages on PostgreSQL.

use super::PgStore;
use super::statements::{self, SessionColumn};
use crate::codec::ts;
use crate::rows::message_from_row;
use crate::shared::{SqlBackend, delete_session_rows, session_page};
use crate::{SessionPage, StoreResult};
use crate::{SessionReads, SessionStore, SessionsSeen};
use async_trait::async_trait;
use chrono::Utc;
use elfgate_core::{Message, MessageId, Run, Session, SessionId};

#[async_trait]
impl SessionReads for PgStore {
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
        // Ids are UUIDv7 text collated bytewise: their order is creation order. With each
        // session the blocks of its first user message, for a list to show a session without a
        // title. Only the sessions the reader sees ($3, $4: its user and team, or none for all).
        let rows = sqlx::query(
            "SELECT *, (SELECT m.blocks FROM messages m \
             WHERE m.session_id = sessions.id AND m.role = 'user' \
             ORDER BY m.rid LIMIT 1) AS first_user_blocks FROM sessions \
             WHERE ($1::text IS NULL OR id < $1) \
             AND ($3::text IS NULL OR owner = $3 OR (visibility = 'team' AND team = $4)) \
             ORDER BY id DESC LIMIT $2",
        )
        .bind(cursor.map(|c| c.to_string()))
        .bind(limit as i64 + 1)
        .bind(user)
        .bind(team)
        .fetch_all(&self.pool)
        .await?;
        session_page(&rows, limit)
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
}

#[async_trait]
impl SessionStore for PgStore {
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

    async fn delete_session(&self, id: SessionId) -> StoreResult<bool> {
        let mut tx = self.pool.begin().await?;
        self.refuse_if_run_elsewhere(&mut tx, id).await?;
        let gone = delete_session_rows::<sqlx::Postgres>(&mut tx, id).await?;
        tx.commit().await?;
        Ok(gone)
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
}
