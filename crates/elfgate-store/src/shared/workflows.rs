//! Workflow definitions: one row per version (see [`WorkflowStore`]). Two writers storing a
//! version of one workflow at once: the primary key refuses the second (a constraint error),
//! never two definitions under one version.

use super::{RowsAffected, SqlBackend};
use crate::codec::ts;
use crate::rows::{RowRead, workflow_from_row};
use crate::{StoreResult, StoredWorkflow, WorkflowStore, WorkflowWrite};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{Database, Encode, Executor, Type};

#[async_trait]
impl<S> WorkflowStore for S
where
    S: SqlBackend,
    for<'c> &'c mut <S::Db as Database>::Connection: Executor<'c, Database = S::Db>,
    for<'q> String: Encode<'q, S::Db> + Type<S::Db>,
    for<'q> i64: Encode<'q, S::Db> + Type<S::Db>,
{
    async fn put_workflow(
        &self,
        name: &str,
        definition: &serde_json::Value,
        write: WorkflowWrite,
        creator: &elfgate_core::Ownership,
    ) -> StoreResult<Option<StoredWorkflow>> {
        let mut tx = self.shared().write.begin().await?;
        let latest = sqlx::query(
            "SELECT version, deleted_at, owner, team FROM workflows WHERE name = $1 \
             ORDER BY version DESC LIMIT 1",
        )
        .bind(name.to_owned())
        .fetch_optional(&mut *tx)
        .await?;
        let latest = match latest {
            Some(row) => Some((
                row.int("version")?,
                row.opt_text("deleted_at")?,
                (row.text("owner")?, row.text("team")?),
            )),
            None => None,
        };
        let live = latest
            .as_ref()
            .is_some_and(|(_, deleted, _)| deleted.is_none());
        if live != (write == WorkflowWrite::Replace) {
            return Ok(None);
        }
        let version = latest.as_ref().map_or(1, |(v, _, _)| v + 1);
        // A new version keeps the workflow's owner and team; a new workflow is its creator's.
        let (owner, team) = match latest {
            Some((_, None, owned)) => owned,
            _ => (creator.owner.clone(), creator.team.clone()),
        };
        let row = sqlx::query(
            "INSERT INTO workflows (name, version, definition, created_at, owner, team) \
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING *",
        )
        .bind(name.to_owned())
        .bind(version)
        .bind(definition.to_string())
        .bind(ts(&Utc::now()))
        .bind(owner)
        .bind(team)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        workflow_from_row(&row).map(Some)
    }

    async fn get_workflow(
        &self,
        name: &str,
        version: Option<u32>,
    ) -> StoreResult<Option<StoredWorkflow>> {
        let read = self.shared().read;
        let row = match version {
            Some(v) => {
                sqlx::query("SELECT * FROM workflows WHERE name = $1 AND version = $2")
                    .bind(name.to_owned())
                    .bind(i64::from(v))
                    .fetch_optional(read)
                    .await?
            }
            None => {
                sqlx::query("SELECT * FROM workflows WHERE name = $1 ORDER BY version DESC LIMIT 1")
                    .bind(name.to_owned())
                    .fetch_optional(read)
                    .await?
            }
        };
        row.as_ref().map(workflow_from_row).transpose()
    }

    async fn list_workflows(&self) -> StoreResult<Vec<StoredWorkflow>> {
        let rows = sqlx::query(
            "SELECT * FROM workflows w WHERE w.deleted_at IS NULL AND w.version = \
             (SELECT MAX(version) FROM workflows x WHERE x.name = w.name) ORDER BY w.name",
        )
        .fetch_all(self.shared().read)
        .await?;
        rows.iter().map(workflow_from_row).collect()
    }

    async fn workflows_revision(&self) -> StoreResult<(i64, i64)> {
        let row =
            sqlx::query("SELECT COUNT(*) AS stored, COUNT(deleted_at) AS deleted FROM workflows")
                .fetch_one(self.shared().read)
                .await?;
        Ok((row.int("stored")?, row.int("deleted")?))
    }

    async fn delete_workflow(&self, name: &str) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE workflows SET deleted_at = $1 WHERE name = $2 AND deleted_at IS NULL",
        )
        .bind(ts(&Utc::now()))
        .bind(name.to_owned())
        .execute(self.shared().write)
        .await?;
        Ok(done.rows_changed() > 0)
    }

    /// One statement: an insert, or an update only past the stored fire time (the text
    /// timestamps are of one fixed width in UTC, so they compare as the times do).
    async fn claim_workflow_fire(&self, name: &str, at: DateTime<Utc>) -> StoreResult<bool> {
        let done = sqlx::query(
            "INSERT INTO workflow_fires (name, last_fire) VALUES ($1, $2) ON CONFLICT (name) DO \
             UPDATE SET last_fire = excluded.last_fire WHERE workflow_fires.last_fire < \
             excluded.last_fire",
        )
        .bind(name.to_owned())
        .bind(ts(&at))
        .execute(self.shared().write)
        .await?;
        Ok(done.rows_changed() > 0)
    }
}
