//! The fleet as the rest of the daemon sees it through [`PgStore`]: this node's identity, the
//! nodes and owners, the heartbeat, and the adoption of expired sessions.

use super::super::PgStore;
use super::{ADOPTION_LOCKS, FleetCounts, Membership, NodeInfo, secs};
use crate::recovery_plan::{DAEMON_RESTART, Ending, NODE_LOST};
use crate::rows::run_from_row;
use crate::{RecoveredRun, StoreError, StoreResult};
use elfgate_core::{LeaseGuard, SessionId};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::broadcast;
use tokio::time::Instant;

impl PgStore {
    /// This node's fleet membership; an error for a single node.
    fn membership(&self) -> StoreResult<&Membership> {
        self.fleet
            .as_deref()
            .ok_or_else(|| StoreError::Database("not a node of a fleet".into()))
    }

    /// Sessions whose lease this node lost to another node, as they are found (a fleet node;
    /// None for a single node). The runs of such a session must stop: their writes are refused.
    pub fn fenced_sessions(&self) -> Option<broadcast::Receiver<SessionId>> {
        self.fleet.as_ref().map(|m| m.subscribe_fenced())
    }

    /// What a run of `session` on this node consults before each side effect (see
    /// [`LeaseGuard`]): on a fleet node the lease it holds on the session, refusing when it holds
    /// none; on a single node a guard that always passes.
    pub fn lease_guard(&self, session: SessionId) -> LeaseGuard {
        match self.fleet.as_deref() {
            Some(m) => m.guard(session),
            None => LeaseGuard::unguarded(),
        }
    }

    /// What this node's share of the fleet has done so far (None for a single node).
    pub fn fleet_counts(&self) -> Option<FleetCounts> {
        self.fleet.as_deref().map(|m| FleetCounts {
            leases_held: m.held().values().filter(|h| !h.fenced).count() as u64,
            runs_adopted: m.runs_adopted.load(Ordering::Relaxed),
            sessions_fenced: m.sessions_fenced.load(Ordering::Relaxed),
        })
    }

    /// Whether this store is a fleet node's.
    pub fn is_fleet_node(&self) -> bool {
        self.fleet.is_some()
    }

    /// This node's id in the fleet (None for a single node).
    pub fn node_id(&self) -> Option<&str> {
        self.fleet.as_deref().map(|m| m.me.node_id.as_str())
    }

    /// The fleet's id: one per database, the same for every node sharing it.
    pub async fn fleet_id(&self) -> StoreResult<String> {
        Ok(sqlx::query_scalar("SELECT id FROM fleet LIMIT 1")
            .fetch_one(&self.pool)
            .await?)
    }

    /// The node holding a live lease on the session (the node running it), if any.
    pub async fn session_owner(&self, session: SessionId) -> StoreResult<Option<String>> {
        Ok(sqlx::query_scalar(
            "SELECT node_id FROM session_leases WHERE session_id = $1 AND expires_at > now()",
        )
        .bind(session.to_string())
        .fetch_optional(&self.pool)
        .await?)
    }

    /// The fleet's nodes, by id.
    pub async fn nodes(&self) -> StoreResult<Vec<NodeInfo>> {
        let rows: Vec<(String, String, String, f64, i64, bool)> = sqlx::query_as(
            "SELECT n.id, n.address, n.version, \
             EXTRACT(EPOCH FROM (now() - n.heartbeat_at))::float8 * 1000, \
             (SELECT COUNT(*) FROM session_leases l WHERE l.node_id = n.id \
             AND l.expires_at > now()), n.draining FROM nodes n ORDER BY n.id",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, address, version, age, active, draining)| NodeInfo {
                id,
                address,
                version,
                heartbeat_age_ms: age.max(0.0) as u64,
                active_sessions: active.max(0) as u64,
                draining,
            })
            .collect())
    }

    /// Marks this node draining (it takes no new runs) or not, for the fleet to see.
    pub async fn set_draining(&self, draining: bool) -> StoreResult<()> {
        let m = self.membership()?;
        sqlx::query("UPDATE nodes SET draining = $2 WHERE id = $1")
            .bind(&m.me.node_id)
            .bind(draining)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// One heartbeat: renews this node's row and leases, then adopts the sessions whose owner's
    /// lease expired with runs unfinished and ends those runs (`node_lost`, or `daemon_restart`
    /// for this node's own earlier life). Returns the runs it ended.
    pub async fn heartbeat(&self) -> StoreResult<Vec<RecoveredRun>> {
        self.renew_leases().await?;
        self.adopt_expired().await
    }

    /// Renews this node's row and the leases it holds; a lease found taken over is fenced.
    pub async fn renew_leases(&self) -> StoreResult<()> {
        let m = self.membership()?;
        let mut conn = m.beat.acquire().await?;
        m.renew(&mut conn).await
    }

    /// Adopts every session with unfinished runs whose lease expired (or that has none).
    pub async fn adopt_expired(&self) -> StoreResult<Vec<RecoveredRun>> {
        let m = self.membership()?;
        let orphans: Vec<String> = sqlx::query_scalar(
            "SELECT DISTINCT r.session_id FROM runs r \
             LEFT JOIN session_leases l ON l.session_id = r.session_id \
             WHERE r.status IN ('running', 'queued') \
             AND (l.session_id IS NULL OR l.expires_at < now())",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut ended = Vec::new();
        for sid in orphans {
            let Ok(session) = sid.parse::<SessionId>() else {
                continue;
            };
            if m.runs_or_claims(session) {
                // This node runs it (its heartbeat was late: the renewal keeps it) or is
                // claiming it right now.
                continue;
            }
            let runs = self.adopt(m, session).await?;
            m.runs_adopted
                .fetch_add(runs.len() as u64, Ordering::Relaxed);
            ended.extend(runs);
        }
        Ok(ended)
    }

    /// Takes over one session whose lease expired, ends its unfinished runs and logs the ends
    /// of runs that ended without them, then gives the lease up.
    async fn adopt(&self, m: &Membership, session: SessionId) -> StoreResult<Vec<RecoveredRun>> {
        let sid = session.to_string();
        let mut tx = self.pool.begin().await?;
        // One adopter at a time per session, for this transaction (a lease row may not exist to
        // lock): nodes that listed the same orphan take turns, and the later ones find the first
        // one's lease, or no run left to end once it has given the lease up.
        sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
            .bind(ADOPTION_LOCKS)
            .bind(&sid)
            .execute(&mut *tx)
            .await?;
        // FOR UPDATE: waits for the old owner's write in flight, which then commits first.
        let old: Option<(String, bool)> = sqlx::query_as(
            "SELECT node_id, expires_at < now() FROM session_leases WHERE session_id = $1 \
             FOR UPDATE",
        )
        .bind(&sid)
        .fetch_optional(&mut *tx)
        .await?;
        if old.as_ref().is_some_and(|(_, expired)| !expired) {
            // Renewed or taken by another adopter meanwhile.
            return Ok(Vec::new());
        }
        let unfinished: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM runs WHERE session_id = $1 \
             AND status IN ('running', 'queued'))",
        )
        .bind(&sid)
        .fetch_one(&mut *tx)
        .await?;
        if !unfinished {
            // Adopted by another node since this one listed it: its runs are ended already.
            return Ok(Vec::new());
        }
        let ending: Ending = match &old {
            Some((node, _)) if *node == m.me.node_id => DAEMON_RESTART,
            _ => NODE_LOST,
        };
        let epoch: i64 = sqlx::query_scalar(
            "INSERT INTO session_leases (session_id, node_id, epoch, expires_at) \
             VALUES ($1, $2, 1, clock_timestamp() + make_interval(secs => $3)) \
             ON CONFLICT (session_id) DO UPDATE SET node_id = EXCLUDED.node_id, \
             epoch = session_leases.epoch + 1, expires_at = EXCLUDED.expires_at \
             RETURNING epoch",
        )
        .bind(&sid)
        .bind(&m.me.node_id)
        .bind(secs(m.me.lease))
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        tracing::warn!(session = %sid, previous = ?old.map(|o| o.0),
            reason = ending.finish_reason.as_str(), "adopting a session whose owner's lease expired");

        self.log_missing_ends_of(Some(&sid)).await?;
        let runs = sqlx::query(
            "SELECT * FROM runs WHERE session_id = $1 AND status IN ('running', 'queued') \
             ORDER BY started_at, rid",
        )
        .bind(&sid)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(run_from_row)
        .collect::<StoreResult<Vec<_>>>()?;
        let mut ended = Vec::new();
        for run in &runs {
            if let Some(r) = self.end_unfinished_run(run, ending).await? {
                ended.push(r);
            }
        }
        sqlx::query(
            "DELETE FROM session_leases WHERE session_id = $1 AND node_id = $2 AND epoch = $3",
        )
        .bind(&sid)
        .bind(&m.me.node_id)
        .bind(epoch)
        .execute(&self.pool)
        .await?;
        Ok(ended)
    }
}

/// Runs a fleet node's heartbeat until the store closes.
///
/// A node adopts expired leases only once it has reached the store at every beat, each in time,
/// for a whole lease: after an outage of the database, which every node saw, each owner then
/// renews its own leases (which expired by the database's clock meanwhile) before another node
/// may count them as lost. A node that really died during the outage is adopted one lease later.
/// "In time" is within one beat: a longer stall, whatever its cause, may have hidden an outage
/// during which live owners' leases lapsed, and their renewals may land up to a beat after it.
pub(in crate::postgres) async fn heartbeat_loop(store: PgStore, every: Duration, lease: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is immediate: the node's start has just renewed, and its restart recovery
    // (`recover_unfinished_runs`) does the first adoption.
    tick.tick().await;
    let mut reachable_since = Some(Instant::now());
    loop {
        tick.tick().await;
        let started = Instant::now();
        if let Err(e) = store.renew_leases().await {
            if reachable_since.take().is_some() {
                tracing::warn!(error = %e, "heartbeat failed: leases are not renewed and no \
                    session is adopted until the store answers again");
            }
            continue;
        }
        let now = Instant::now();
        if now.duration_since(started) > every {
            // The beat waited for the store (a restart, a stall): it counts as a new start.
            reachable_since = Some(now);
        }
        let since = *reachable_since.get_or_insert(now);
        if now.duration_since(since) < lease {
            continue;
        }
        match store.adopt_expired().await {
            Ok(ended) if !ended.is_empty() => {
                tracing::warn!(
                    runs = ended.len(),
                    "ended runs of nodes that went away (node_lost)"
                );
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "adopting expired leases failed; retried at the next beat");
            }
        }
    }
}
