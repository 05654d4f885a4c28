//! Elfgate's persistence: sessions, runs, chat messages and the event log, behind the [`Store`] trait.
//!
//! The SQLite implementation ([`SqliteStore`]) is the embedded default; [`PgStore`] keeps the
//! same data in a PostgreSQL server that several daemons can share. Both pass one conformance
//! suite (tests/conformance.rs).

mod codec;
mod deltas;
mod error;
mod lock;
mod log_batch;
mod logrows;
mod postgres;
mod recovery_plan;
mod rows;
mod schema;
mod script;
mod sqlite;
mod statements;
mod writer;

pub use error::StoreError;
pub use postgres::{FleetCounts, FleetMember, NodeInfo, NodeMode, PgStore, is_postgres_url};
pub use sqlite::{SqliteStore, StoreOptions};

use async_trait::async_trait;
use elfgate_core::{
    AuditRecord, EventType, Message, MessageId, Run, RunId, RunLedger, Session, SessionId,
    TokenUsage,
};

/// Shorthand for store results.
pub type StoreResult<T> = Result<T, StoreError>;

/// One logged event, as read back for replay.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    /// Its seq.
    pub seq: u64,
    /// Its type.
    pub event_type: EventType,
    /// The whole envelope as JSON.
    pub json: String,
}

/// A run that a restart found unfinished and ended.
#[derive(Debug, Clone, PartialEq)]
pub struct RecoveredRun {
    /// Its session.
    pub session_id: SessionId,
    /// The run.
    pub run_id: RunId,
    /// Partial answer text recovered from the event log, if any.
    pub partial_text_chars: usize,
    /// Synthetic tool results added for tool calls left without one.
    pub synthetic_tool_results: usize,
    /// How it was ended: `daemon_restart`, or `node_lost` when a fleet node adopted it.
    pub finish_reason: elfgate_core::FinishReason,
}

/// A run's end waiting in the store's outbox of run-end webhooks: written in the transaction that
/// ends the run, whatever ends it, and taken out when its deliveries are queued.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEndNotice {
    /// Its session.
    pub session_id: SessionId,
    /// The run.
    pub run_id: RunId,
    /// When it ended.
    pub ended_at: chrono::DateTime<chrono::Utc>,
}

/// One stored version of a workflow.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredWorkflow {
    /// Its name.
    pub name: String,
    /// Its version: 1, then one more for each change.
    pub version: u32,
    /// The definition, as JSON.
    pub definition: serde_json::Value,
    /// When this version was stored.
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// When the workflow was deleted (its versions are kept for the runs that name them).
    pub deleted_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// One signed POST to a webhook target (when a run ended), with its attempts.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookDelivery {
    /// Its id, sent with it (a receiver may drop one it saw).
    pub id: String,
    /// The configured target's name.
    pub target: String,
    /// Where it goes.
    pub url: String,
    /// What is sent.
    pub body: serde_json::Value,
    /// Where it stands.
    pub status: DeliveryStatus,
    /// Attempts made.
    pub attempts: u32,
    /// When the next attempt is due (pending ones).
    pub next_attempt_at: chrono::DateTime<chrono::Utc>,
    /// The HTTP status of the last attempt, when it got one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_status: Option<u16>,
    /// Why the last attempt failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When it was queued.
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// When it last changed.
    pub updated_at: chrono::DateTime<chrono::Utc>,
}

/// Where a webhook delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum DeliveryStatus {
    /// Waiting for its next attempt.
    Pending,
    /// The target answered 2xx.
    Delivered,
    /// Every attempt failed.
    Failed,
}

impl DeliveryStatus {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Failed => "failed",
        }
    }
}

/// What storing a workflow version requires of what is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkflowWrite {
    /// No live workflow of that name: version 1, or one past a deleted one's versions.
    Create,
    /// A live workflow of that name: one past its latest version.
    Replace,
}

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

/// Everything the daemon stores. Implementations must be safe to share between tasks.
#[async_trait]
pub trait Store: RunLedger + Send + Sync {
    /// Checks that the database answers.
    async fn ping(&self) -> StoreResult<()>;

    /// Stores a new session together with its first run and, when given, its first prompt, in one
    /// transaction.
    async fn create_session(
        &self,
        session: &Session,
        first_run: &Run,
        first_message: Option<&Message>,
    ) -> StoreResult<()>;
    /// One session.
    async fn get_session(&self, id: SessionId) -> StoreResult<Option<Session>>;
    /// Sessions newest first; `cursor` is the last id of the previous page.
    async fn list_sessions(
        &self,
        limit: u32,
        cursor: Option<SessionId>,
    ) -> StoreResult<SessionPage>;
    /// Replaces a session's stored engineConfig (a JSON object).
    async fn set_session_engine_config(
        &self,
        id: SessionId,
        engine_config: &serde_json::Value,
    ) -> StoreResult<()>;
    /// Deletes a session with its runs, messages and events. false when it did not exist.
    async fn delete_session(&self, id: SessionId) -> StoreResult<bool>;

    /// Stores a new run (status queued or running).
    async fn create_run(&self, run: &Run) -> StoreResult<()>;
    /// The run started by the prompt with this idempotency key: in a session, or (None) the first
    /// run of any session (a retried session creation).
    async fn run_by_client_msg_id(
        &self,
        session_id: Option<SessionId>,
        client_msg_id: &str,
    ) -> StoreResult<Option<Run>>;
    /// Deletes a run that never started (a prompt refused after its run was stored).
    async fn delete_run(&self, run_id: RunId) -> StoreResult<()>;
    /// One run of a session.
    async fn get_run(&self, session_id: SessionId, run_id: RunId) -> StoreResult<Option<Run>>;
    /// A run by its id alone.
    async fn find_run(&self, run_id: RunId) -> StoreResult<Option<Run>>;
    /// Keeps the record of a tool call a gate blocked.
    async fn record_blocked(&self, record: &AuditRecord) -> StoreResult<()>;
    /// A session's blocked calls, the latest `limit` of them, oldest first.
    async fn list_audit(&self, session_id: SessionId, limit: u32) -> StoreResult<Vec<AuditRecord>>;
    /// The tokens of a session's ended runs, summed (a session's token budget counts them).
    async fn session_usage(&self, session_id: SessionId) -> StoreResult<TokenUsage>;

    /// Stores a message.
    async fn insert_message(&self, message: &Message) -> StoreResult<()>;
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

    /// The highest seq logged for a session (0 when none).
    async fn last_seq(&self, session_id: SessionId) -> StoreResult<u64>;
    /// Opens a seq range for a session's bus: returns `(last, reserved)` where `last` is the larger of
    /// the highest logged seq and the stored reservation (a crash may have handed out seqs that never
    /// reached the log), and `reserved` = `last` + a block, stored before this returns.
    async fn open_seq_range(&self, session_id: SessionId) -> StoreResult<(u64, u64)>;
    /// Logged events with seq > `after`, in order, at most `limit`.
    async fn events_after(
        &self,
        session_id: SessionId,
        after: u64,
        limit: u32,
    ) -> StoreResult<Vec<StoredEvent>>;

    /// Ends runs a crash left running or queued (`interrupted`, finish reason `daemon_restart`).
    async fn recover_unfinished_runs(&self) -> StoreResult<Vec<RecoveredRun>>;

    /// Stores a new version of workflow `name` as `write` requires; None when what is stored
    /// does not allow it (a live workflow of that name for `Create`, none for `Replace`). Two
    /// writers racing for one version: one of them gets [`StoreError::Constraint`].
    async fn put_workflow(
        &self,
        name: &str,
        definition: &serde_json::Value,
        write: WorkflowWrite,
    ) -> StoreResult<Option<StoredWorkflow>>;
    /// A version of workflow `name` (None: its latest), deleted or not.
    async fn get_workflow(
        &self,
        name: &str,
        version: Option<u32>,
    ) -> StoreResult<Option<StoredWorkflow>>;
    /// The latest version of every workflow that is not deleted, by name.
    async fn list_workflows(&self) -> StoreResult<Vec<StoredWorkflow>>;
    /// The workflows' revision: the versions stored and the versions marked deleted, two counts
    /// that grow with every change on any node sharing the store (nothing else writes the
    /// table), so that a reader of every definition reads them again only when they changed.
    async fn workflows_revision(&self) -> StoreResult<(i64, i64)>;
    /// Marks workflow `name` deleted; false when there was no live one.
    async fn delete_workflow(&self, name: &str) -> StoreResult<bool>;
    /// Claims fire time `at` of workflow `name`'s schedule: true for the one caller (of every
    /// node, across restarts) that claims it first, when no later or equal one was claimed.
    async fn claim_workflow_fire(
        &self,
        name: &str,
        at: chrono::DateTime<chrono::Utc>,
    ) -> StoreResult<bool>;

    /// Run ends not yet made into webhook deliveries, oldest first, at most `limit`. Each run's
    /// end is written here in the transaction that ends the run: by the run itself, a drain, a
    /// restart's recovery or another node's adoption.
    async fn pending_run_ends(&self, limit: u32) -> StoreResult<Vec<RunEndNotice>>;
    /// Takes run `run_id`'s end out of the outbox and queues `deliveries` (each unless
    /// `max_pending` deliveries to its target already wait), in one transaction. None when the
    /// end was no longer there (another worker queued it); else the targets whose delivery was
    /// dropped because their queue was full.
    async fn queue_run_end(
        &self,
        run_id: RunId,
        deliveries: &[WebhookDelivery],
        max_pending: u32,
    ) -> StoreResult<Option<Vec<String>>>;
    /// Queues a webhook delivery, unless `max_pending` deliveries to its target (its name and
    /// URL) already wait (then false): a target that does not answer fills its own queue only.
    async fn enqueue_delivery(&self, d: &WebhookDelivery, max_pending: u32) -> StoreResult<bool>;
    /// Pending deliveries due at `now`, oldest first, at most `per_target` of each target (name
    /// and URL) and `limit` in all, so that one target's backlog cannot crowd out the others.
    async fn due_deliveries(
        &self,
        now: chrono::DateTime<chrono::Utc>,
        per_target: u32,
        limit: u32,
    ) -> StoreResult<Vec<WebhookDelivery>>;
    /// Claims the attempt of delivery `id` that was due at `due` (true for one caller of every
    /// node): its next attempt moves to `until`, so that no other worker takes it meanwhile.
    async fn claim_delivery(
        &self,
        id: &str,
        due: chrono::DateTime<chrono::Utc>,
        until: chrono::DateTime<chrono::Utc>,
    ) -> StoreResult<bool>;
    /// Records an attempt's result: the delivery's status, attempts, next attempt and last answer.
    async fn record_delivery(&self, d: &WebhookDelivery) -> StoreResult<()>;
    /// The latest deliveries, newest first, at most `limit`.
    async fn list_deliveries(&self, limit: u32) -> StoreResult<Vec<WebhookDelivery>>;

    /// Records delivery `id` of inbound hook `hook` as received, to be remembered until `until`
    /// (past it the delivery's own timestamp refuses a replay): true when it was not received
    /// before, false when it was. Shared by every node on one database; forgets what is past
    /// its time.
    async fn claim_hook_delivery(
        &self,
        hook: &str,
        id: &str,
        now: chrono::DateTime<chrono::Utc>,
        until: chrono::DateTime<chrono::Utc>,
    ) -> StoreResult<bool>;
    /// Forgets delivery `id` of hook `hook` (its run could not start: the sender may try again).
    async fn release_hook_delivery(&self, hook: &str, id: &str) -> StoreResult<()>;
}
