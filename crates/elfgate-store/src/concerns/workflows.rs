//! Workflow definitions, one row per version, and their schedules' fire times.

use crate::StoreResult;
use async_trait::async_trait;

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
    /// Whom it belongs to: its creator and the creator's team (visibility `team`: a workflow
    /// is its team's), the same on every version.
    pub ownership: elfgate_core::Ownership,
}

/// What storing a workflow version requires of what is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkflowWrite {
    /// No live workflow of that name: version 1, or one past a deleted one's versions.
    Create,
    /// A live workflow of that name: one past its latest version.
    Replace,
}

/// Storing and reading workflows.
#[async_trait]
pub trait WorkflowStore: Send + Sync {
    /// Stores a new version of workflow `name` as `write` requires; None when what is stored
    /// does not allow it (a live workflow of that name for `Create`, none for `Replace`). Two
    /// writers racing for one version: one of them gets [`StoreError::Constraint`](crate::StoreError::Constraint).
    /// A created workflow belongs to `creator`'s user and team; a replaced one keeps its own.
    async fn put_workflow(
        &self,
        name: &str,
        definition: &serde_json::Value,
        write: WorkflowWrite,
        creator: &elfgate_core::Ownership,
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
}
