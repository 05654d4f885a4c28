//! Workflow definitions on PostgreSQL: one row per version (see the Store trait's workflow
//! methods). Two nodes storing a version of one workflow at once: the primary key refuses the
//! second (a constraint error), never two definitions under one version.

use super::PgStore;
use crate::codec::ts;
use crate::rows::workflow_from_row;
use crate::{StoreResult, StoredWorkflow, WorkflowWrite};
use chrono::Utc;

impl PgStore {
    pub(super) async fn put_workflow_row(
        &self,
        name: &str,
        definition: &serde_json::Value,
        write: WorkflowWrite,
    ) -> StoreResult<Option<StoredWorkflow>> {
        let mut tx = self.pool.begin().await?;
        let latest: Option<(i64, Option<String>)> = sqlx::query_as(
            "SELECT version, deleted_at FROM workflows WHERE name = $1 ORDER BY version DESC \
             LIMIT 1",
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
        let row = sqlx::query(
            "INSERT INTO workflows (name, version, definition, created_at) VALUES ($1, $2, $3, \
             $4) RETURNING *",
        )
        .bind(name)
        .bind(version)
        .bind(definition.to_string())
        .bind(ts(&Utc::now()))
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        workflow_from_row(&row).map(Some)
    }

    pub(super) async fn get_workflow_row(
        &self,
        name: &str,
        version: Option<u32>,
    ) -> StoreResult<Option<StoredWorkflow>> {
        let row = match version {
            Some(v) => {
                sqlx::query("SELECT * FROM workflows WHERE name = $1 AND version = $2")
                    .bind(name)
                    .bind(i64::from(v))
                    .fetch_optional(&self.pool)
                    .await?
            }
            None => {
                sqlx::query("SELECT * FROM workflows WHERE name = $1 ORDER BY version DESC LIMIT 1")
                    .bind(name)
                    .fetch_optional(&self.pool)
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
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(workflow_from_row).collect()
    }

    pub(super) async fn workflows_revision_row(&self) -> StoreResult<(i64, i64)> {
        Ok(
            sqlx::query_as("SELECT COUNT(*), COUNT(deleted_at) FROM workflows")
                .fetch_one(&self.pool)
                .await?,
        )
    }

    pub(super) async fn delete_workflow_rows(&self, name: &str) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE workflows SET deleted_at = $1 WHERE name = $2 AND deleted_at IS NULL",
        )
        .bind(ts(&Utc::now()))
        .bind(name)
        .execute(&self.pool)
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
            "INSERT INTO workflow_fires (name, last_fire) VALUES ($1, $2) ON CONFLICT (name) DO \
             UPDATE SET last_fire = excluded.last_fire WHERE workflow_fires.last_fire < \
             excluded.last_fire",
        )
        .bind(name)
        .bind(ts(&at))
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() > 0)
    }
}
