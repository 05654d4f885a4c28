//! The concurrent runs of rate limits that a fleet's nodes share (docs/spend.md, "Rate limits"):
//! one row per admitted run and rule, counted under a lock per rule.

use super::PgStore;
use crate::StoreResult;
use std::time::Duration;

impl PgStore {
    /// Holds a slot of each `(bucket, most)` for `run_id` of `session_id` on node `node_id`, when
    /// every bucket has fewer than its most runs on nodes whose heartbeat is younger than
    /// `alive`; else holds none and returns the index of the first full one.
    pub async fn hold_rate_runs(
        &self,
        run_id: &str,
        session_id: &str,
        node_id: &str,
        limits: &[(String, u64)],
        alive: Duration,
    ) -> StoreResult<Option<usize>> {
        let mut tx = self.pool.begin().await?;
        // In one order on every node, so that two admissions never wait for each other's locks.
        let mut order: Vec<&str> = limits.iter().map(|(b, _)| b.as_str()).collect();
        order.sort_unstable();
        for bucket in order {
            sqlx::query("SELECT pg_advisory_xact_lock(hashtext('rate_runs:' || $1))")
                .bind(bucket)
                .execute(&mut *tx)
                .await?;
        }
        for (at, (bucket, most)) in limits.iter().enumerate() {
            let held: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM rate_runs r JOIN nodes n ON n.id = r.node_id \
                 WHERE r.bucket = $1 AND n.heartbeat_at > now() - make_interval(secs => $2)",
            )
            .bind(bucket)
            .bind(alive.as_secs_f64())
            .fetch_one(&mut *tx)
            .await?;
            if u64::try_from(held).unwrap_or(0) >= *most {
                tx.rollback().await?;
                return Ok(Some(at));
            }
        }
        for (bucket, _) in limits {
            sqlx::query(
                "INSERT INTO rate_runs (run_id, bucket, node_id, session_id) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
            )
            .bind(run_id)
            .bind(bucket)
            .bind(node_id)
            .bind(session_id)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(None)
    }

    /// Frees the slots `run_id` holds.
    pub async fn release_rate_runs(&self, run_id: &str) -> StoreResult<()> {
        sqlx::query("DELETE FROM rate_runs WHERE run_id = $1")
            .bind(run_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The runs of `node_id` holding slots, with their sessions.
    pub async fn rate_runs_of_node(&self, node_id: &str) -> StoreResult<Vec<(String, String)>> {
        Ok(
            sqlx::query_as("SELECT DISTINCT run_id, session_id FROM rate_runs WHERE node_id = $1")
                .bind(node_id)
                .fetch_all(&self.pool)
                .await?,
        )
    }
}
