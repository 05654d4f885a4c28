//! Sessions and their messages: the reads (what a tool that looks at other sessions, or an engine
//! that builds a history, needs) apart from the writes.

use crate::StoreResult;
use async_trait::async_trait;
use elfgate_core::{Message, MessageId, Run, Session, SessionId};

/// A page of sessions, newest first.
#[derive(Debug, Clone)]
pub struct SessionPage {
    /// The sessions.
    pub sessions: Vec<Session>,
    /// The text of each session's first user message (its first text block, at most
    /// [`FIRST_PROMPT_CHARS`] characters), for the sessions that have one: what a list shows
    /// for a session without a title.
    pub first_prompts: std::collections::HashMap<SessionId, String>,
    /// Pass as `cursor` to get the next page; None at the end.
    pub next_cursor: Option<SessionId>,
}

/// The most characters of a first prompt a [`SessionPage`] carries.
pub const FIRST_PROMPT_CHARS: usize = 200;

/// Whose sessions a list holds: the filter is part of the query, so that a page is full and the
/// cursor goes on from the last session the reader may see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionsSeen<'a> {
    /// Every session (an admin's list).
    All,
    /// What `user` of `team` sees: the sessions it owns and its team's shared (`team`) ones.
    By {
        /// The user's name.
        user: &'a str,
        /// The user's team.
        team: &'a str,
    },
}

impl<'a> SessionsSeen<'a> {
    /// The user and team to filter by, None for every session.
    pub(crate) fn user_and_team(self) -> (Option<&'a str>, Option<&'a str>) {
        match self {
            SessionsSeen::All => (None, None),
            SessionsSeen::By { user, team } => (Some(user), Some(team)),
        }
    }
}

/// Reading stored sessions and their messages.
#[async_trait]
pub trait SessionReads: Send + Sync {
    /// One session.
    async fn get_session(&self, id: SessionId) -> StoreResult<Option<Session>>;
    /// The sessions `seen` names, newest first; `cursor` is the last id of the previous page.
    async fn list_sessions(
        &self,
        seen: SessionsSeen<'_>,
        limit: u32,
        cursor: Option<SessionId>,
    ) -> StoreResult<SessionPage>;
    /// Every message of a session, oldest first, at most `limit`.
    async fn list_messages(&self, session_id: SessionId, limit: u32) -> StoreResult<Vec<Message>>;
    /// The latest message of a session.
    async fn latest_message(&self, session_id: SessionId) -> StoreResult<Option<Message>>;
    /// One message of a session.
    async fn get_message(
        &self,
        session_id: SessionId,
        id: MessageId,
    ) -> StoreResult<Option<Message>>;
    /// The branch ending at `leaf`, following parent ids: at most `limit` messages, oldest first.
    async fn branch(
        &self,
        session_id: SessionId,
        leaf: MessageId,
        limit: u32,
    ) -> StoreResult<Vec<Message>>;
}

/// Storing sessions and their messages.
#[async_trait]
pub trait SessionStore: SessionReads {
    /// Stores a new session together with its first run and, when given, its first prompt, in one
    /// transaction.
    async fn create_session(
        &self,
        session: &Session,
        first_run: &Run,
        first_message: Option<&Message>,
    ) -> StoreResult<()>;
    /// Replaces a session's stored engineConfig (a JSON object).
    async fn set_session_engine_config(
        &self,
        id: SessionId,
        engine_config: &serde_json::Value,
    ) -> StoreResult<()>;
    /// Deletes a session with its runs, messages and events. false when it did not exist.
    async fn delete_session(&self, id: SessionId) -> StoreResult<bool>;
    /// Stores a message.
    async fn insert_message(&self, message: &Message) -> StoreResult<()>;
}
