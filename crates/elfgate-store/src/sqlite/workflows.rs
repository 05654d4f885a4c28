//! Workflow definitions on SQLite: one row per version (see the Store trait's workflow methods).

use super::SqliteStore;
use crate::codec::ts;
use crate::rows::workflow_from_row;
use crate::{StoreResult, StoredWorkflow, WorkflowWrite};
use chrono::Utc;

impl SqliteStore {
    pub(super) async fn put_workflow_row(
        &self,
        name: &str,
        definition: &serde_json::Value,
        write: WorkflowWrite,
    ) -> StoreResult<Option<StoredWorkflow>> {
        let mut tx = self.write.begin().await?;
        let latest: Option<(i64, Option<String>)> = sqlx::query_as(
            "SELECT version, deleted_at FROM workflows WHERE name = ? ORDER BY version DESC LIMIT 1",
        )
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?;
        let live = latest
            .as_ref()
            .is_some_and(|(_, deleted)| deleted.is_none());
        if live != (write == WorkflowWrite::Replace) {
            return Ok(None);
        }
        let version = latest.map_or(1, |(v, _)| v + 1);
        let now = Utc::now();
        sqlx::query(
            "INSERT INTO workflows (name, version, definition, created_at) VALUES (?, ?, ?, ?)",
        )
        .bind(name)
        .bind(version)
        .bind(definition.to_string())
        .bind(ts(&now))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        self.get_workflow_row(name, u32::try_from(version).ok())
            .await
    }

    pub(super) async fn get_workflow_row(
        &self,
        name: &str,
        version: Option<u32>,
    ) -> StoreResult<Option<StoredWorkflow>> {
        let row = match version {
            Some(v) => {
                sqlx::query("SELECT * FROM workflows WHERE name = ? AND version = ?")
                    .bind(name)
                    .bind(i64::from(v))
                    .fetch_optional(&self.read)
                    .await?
            }
            None => {
                sqlx::query("SELECT * FROM workflows WHERE name = ? ORDER BY version DESC LIMIT 1")
                    .bind(name)
                    .fetch_optional(&self.read)
                    .await?
            }
        };
        row.as_ref().map(workflow_from_row).transpose()
    }

    pub(super) async fn list_workflow_rows(&self) -> StoreResult<Vec<StoredWorkflow>> {
        let rows = sqlx::query(
            "SELECT * FROM workflows w WHERE w.deleted_at IS NULL AND w.version = \
             (SELECT MAX(version) FROM workflows x WHERE x.name = w.name) ORDER BY w.name",
        )
        .fetch_all(&self.read)
        .await?;
        rows.iter().map(workflow_from_row).collect()
    }

    pub(super) async fn workflows_revision_row(&self) -> StoreResult<(i64, i64)> {
        Ok(
            sqlx::query_as("SELECT COUNT(*), COUNT(deleted_at) FROM workflows")
                .fetch_one(&self.read)
                .await?,
        )
    }

    pub(super) async fn delete_workflow_rows(&self, name: &str) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE workflows SET deleted_at = ? WHERE name = ? AND deleted_at IS NULL",
        )
        .bind(ts(&Utc::now()))
        .bind(name)
        .execute(&self.write)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    /// One statement: an insert, or an update only past the stored fire time (the text
    /// timestamps are of one fixed width in UTC, so they compare as the times do).
    pub(super) async fn claim_fire_row(
        &self,
        name: &str,
        at: chrono::DateTime<Utc>,
    ) -> StoreResult<bool> {
        let done = sqlx::query(
            "INSERT INTO workflow_fires (name, last_fire) VALUES (?, ?) ON CONFLICT (name) DO \
             UPDATE SET last_fire = excluded.last_fire WHERE workflow_fires.last_fire < \
             excluded.last_fire",
        )
        .bind(name)
        .bind(ts(&at))
        .execute(&self.write)
        .await?;
        Ok(done.rows_affected() > 0)
    }
}
