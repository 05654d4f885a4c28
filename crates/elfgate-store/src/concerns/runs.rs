//! Runs, and the audit of the tool calls a gate refused during them.

use crate::StoreResult;
use async_trait::async_trait;
use elfgate_core::{AuditRecord, Run, RunId, SessionId, TokenUsage};

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

/// Storing and reading runs (their progress is written through the
/// [`RunLedger`](elfgate_core::RunLedger)).
#[async_trait]
pub trait RunStore: Send + Sync {
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
    /// The tokens of a session's ended runs, summed (a session's token budget counts them).
    async fn session_usage(&self, session_id: SessionId) -> StoreResult<TokenUsage>;
    /// Ends runs a crash left running or queued (`interrupted`, finish reason `daemon_restart`).
    async fn recover_unfinished_runs(&self) -> StoreResult<Vec<RecoveredRun>>;
}

/// The record of the tool calls a gate refused.
#[async_trait]
pub trait AuditLog: Send + Sync {
    /// Keeps the record of a tool call a gate blocked.
    async fn record_blocked(&self, record: &AuditRecord) -> StoreResult<()>;
    /// A session's blocked calls, the latest `limit` of them, oldest first.
    async fn list_audit(&self, session_id: SessionId, limit: u32) -> StoreResult<Vec<AuditRecord>>;
}
