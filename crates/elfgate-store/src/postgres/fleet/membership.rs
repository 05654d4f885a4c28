//! A node's leases: claiming, renewing, checking (fencing) and releasing them, and adopting the
//! sessions whose owner's lease expired.

use super::{Claiming, FleetMember, Held, Membership, secs};
use crate::{StoreError, StoreResult};
use elfgate_core::sync::lock;
use elfgate_core::{LeaseGuard, LeaseState, SessionId};
use sqlx::PgConnection;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;
use tokio::time::Instant;

impl Membership {
    pub(in crate::postgres) fn new(me: FleetMember, beat: sqlx::PgPool) -> Membership {
        let (fenced, _) = broadcast::channel(1024);
        Membership {
            me,
            beat,
            held: Mutex::new(HashMap::new()),
            claiming: Mutex::new(HashMap::new()),
            fenced,
            runs_adopted: AtomicU64::new(0),
            sessions_fenced: AtomicU64::new(0),
        }
    }

    pub(super) fn held(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Held>> {
        lock(&self.held)
    }

    /// Sessions whose lease this node lost, as they are found.
    pub(in crate::postgres) fn subscribe_fenced(&self) -> broadcast::Receiver<SessionId> {
        self.fenced.subscribe()
    }

    /// Claims the session's lease in the caller's transaction: free, expired or already this
    /// node's. The epoch stays when this node holds it, and grows when the lease changes hands.
    /// Call [`Self::claimed`] once the transaction has committed.
    pub(in crate::postgres) async fn claim(
        &self,
        conn: &mut PgConnection,
        session: SessionId,
    ) -> StoreResult<i64> {
        let epoch: Option<i64> = sqlx::query_scalar(
            "INSERT INTO session_leases (session_id, node_id, epoch, expires_at) \
             VALUES ($1, $2, 1, clock_timestamp() + make_interval(secs => $3)) \
             ON CONFLICT (session_id) DO UPDATE SET node_id = EXCLUDED.node_id, \
             epoch = CASE WHEN session_leases.node_id = EXCLUDED.node_id \
             THEN session_leases.epoch ELSE session_leases.epoch + 1 END, \
             expires_at = EXCLUDED.expires_at \
             WHERE session_leases.node_id = EXCLUDED.node_id \
             OR session_leases.expires_at < clock_timestamp() \
             RETURNING epoch",
        )
        .bind(session.to_string())
        .bind(&self.me.node_id)
        .bind(secs(self.me.lease))
        .fetch_optional(&mut *conn)
        .await?;
        match epoch {
            Some(e) => Ok(e),
            None => Err(self.owned_elsewhere(conn, session).await),
        }
    }

    /// The refusal of a write to a session another live node holds.
    async fn owned_elsewhere(&self, conn: &mut PgConnection, session: SessionId) -> StoreError {
        let node: Result<Option<String>, sqlx::Error> =
            sqlx::query_scalar("SELECT node_id FROM session_leases WHERE session_id = $1")
                .bind(session.to_string())
                .fetch_optional(&mut *conn)
                .await;
        match node {
            Ok(node) => StoreError::OwnedElsewhere {
                session: session.to_string(),
                node: node.unwrap_or_default(),
            },
            Err(e) => e.into(),
        }
    }

    /// Whether this node holds the session's lease (and was not fenced).
    pub(in crate::postgres) fn holds(&self, session: SessionId) -> bool {
        self.held().get(&session).is_some_and(|h| !h.fenced)
    }

    /// Closes the heartbeat's connections.
    pub(in crate::postgres) async fn close(&self) {
        self.beat.close().await;
    }

    /// Marks a claim of `session`'s lease in flight until the guard drops (after
    /// [`Self::claimed`]): between the commit and that record, the heartbeat must not take this
    /// node's own fresh lease for an orphan.
    pub(in crate::postgres) fn claiming(self: &Arc<Self>, session: SessionId) -> Claiming {
        *lock(&self.claiming).entry(session).or_insert(0) += 1;
        Claiming {
            membership: self.clone(),
            session,
        }
    }

    /// Whether this node runs `session` or is claiming it.
    pub(super) fn runs_or_claims(&self, session: SessionId) -> bool {
        self.holds(session) || lock(&self.claiming).contains_key(&session)
    }

    /// Records a lease claimed in a committed transaction by a statement sent at `sent`. The
    /// guard of the session's runs stays the same while the lease does.
    pub(in crate::postgres) fn claimed(&self, session: SessionId, epoch: i64, sent: Instant) {
        let mut held = self.held();
        match held.get_mut(&session) {
            Some(h) if h.epoch == epoch && !h.fenced => {
                h.releasing = false;
                h.lease.renewed(sent.into_std(), self.me.lease);
            }
            _ => {
                held.insert(
                    session,
                    Held {
                        epoch,
                        fenced: false,
                        releasing: false,
                        lease: LeaseState::new(sent.into_std(), self.me.lease),
                    },
                );
            }
        }
    }

    /// Before a write for `session` in the caller's transaction: refused when this node's lease
    /// on it was taken over. Takes the lease row FOR SHARE, so an adoption waits for this
    /// transaction. A session this node holds no lease on is not checked (it is not run here).
    pub(in crate::postgres) async fn check(
        &self,
        conn: &mut PgConnection,
        session: SessionId,
    ) -> StoreResult<()> {
        let Some(held) = self.held().get(&session).cloned() else {
            return Ok(());
        };
        if held.fenced {
            return Err(StoreError::Fenced(session.to_string()));
        }
        let row: Option<(String, i64)> = sqlx::query_as(
            "SELECT node_id, epoch FROM session_leases WHERE session_id = $1 FOR SHARE",
        )
        .bind(session.to_string())
        .fetch_optional(&mut *conn)
        .await?;
        if row.is_some_and(|(node, epoch)| node == self.me.node_id && epoch == held.epoch) {
            Ok(())
        } else {
            self.fence(session);
            Err(StoreError::Fenced(session.to_string()))
        }
    }

    /// The sessions of a log batch whose events must not be written: this node held them and
    /// its lease was taken over. Takes their lease rows FOR SHARE in the batch's transaction.
    pub(in crate::postgres) async fn fenced_of(
        &self,
        conn: &mut PgConnection,
        sessions: &HashSet<SessionId>,
    ) -> StoreResult<HashSet<SessionId>> {
        let mine: Vec<(SessionId, Held)> = {
            let held = self.held();
            sessions
                .iter()
                .filter_map(|s| held.get(s).map(|h| (*s, h.clone())))
                .collect()
        };
        if mine.is_empty() {
            return Ok(HashSet::new());
        }
        let ids: Vec<String> = mine.iter().map(|(s, _)| s.to_string()).collect();
        let rows: Vec<(String, String, i64)> = sqlx::query_as(
            "SELECT session_id, node_id, epoch FROM session_leases \
             WHERE session_id = ANY($1::text[]) FOR SHARE",
        )
        .bind(&ids)
        .fetch_all(&mut *conn)
        .await?;
        let current: HashMap<String, (String, i64)> = rows
            .into_iter()
            .map(|(s, node, epoch)| (s, (node, epoch)))
            .collect();
        let mut fenced = HashSet::new();
        for (session, held) in mine {
            let ok = !held.fenced
                && current
                    .get(&session.to_string())
                    .is_some_and(|(node, epoch)| *node == self.me.node_id && *epoch == held.epoch);
            if !ok {
                fenced.insert(session);
            }
        }
        Ok(fenced)
    }

    /// In the transaction that logs a `complete` of `session`: ends this node's lease when the
    /// session has no unfinished run left. Returns whether it did; call [`Self::released`] after
    /// the commit.
    pub(in crate::postgres) async fn release_if_idle(
        &self,
        conn: &mut PgConnection,
        session: SessionId,
    ) -> StoreResult<bool> {
        let Some(epoch) = self.held().get(&session).map(|h| h.epoch) else {
            return Ok(false);
        };
        let done = sqlx::query(
            "DELETE FROM session_leases WHERE session_id = $1 AND node_id = $2 AND epoch = $3 \
             AND NOT EXISTS (SELECT 1 FROM runs WHERE session_id = $1 \
             AND status IN ('running', 'queued'))",
        )
        .bind(session.to_string())
        .bind(&self.me.node_id)
        .bind(epoch)
        .execute(&mut *conn)
        .await?;
        if done.rows_affected() == 0 {
            return Ok(false);
        }
        // Every seq this node handed out is logged (this batch ends with the session's last
        // `complete`): the next owner numbers on from the log, with no hole for this node's
        // unused reservation.
        sqlx::query(
            "UPDATE sessions SET event_seq_reserved = COALESCE((SELECT COALESCE(e.last_seq, \
             e.seq) FROM events e WHERE e.session_id = $1 ORDER BY e.seq DESC LIMIT 1), 0) \
             WHERE id = $1",
        )
        .bind(session.to_string())
        .execute(&mut *conn)
        .await?;
        Ok(true)
    }

    /// Forgets leases ended in a committed transaction.
    pub(in crate::postgres) fn released(&self, sessions: &[SessionId]) {
        let mut held = self.held();
        for s in sessions {
            if let Some(h) = held.remove(s) {
                h.lease.release();
            }
        }
    }

    /// Marks leases whose end is about to commit (see [`Held::releasing`]), or, with `false`,
    /// whose end did not commit: held as before.
    pub(in crate::postgres) fn releasing(&self, sessions: &[SessionId], releasing: bool) {
        let mut held = self.held();
        for s in sessions {
            if let Some(h) = held.get_mut(s) {
                h.releasing = releasing;
            }
        }
    }

    /// What a run of `session` on this node consults before each side effect: the lease this
    /// node holds on it, or, when it holds none (lost, or never claimed), a guard that refuses.
    pub(in crate::postgres) fn guard(&self, session: SessionId) -> LeaseGuard {
        match self.held().get(&session) {
            Some(h) if !h.fenced => LeaseGuard::held(h.lease.clone()),
            _ => LeaseGuard::refused(),
        }
    }

    /// Marks a session's lease lost and tells whoever listens (the server stops its runs).
    pub(in crate::postgres) fn fence(&self, session: SessionId) {
        let newly = match self.held().get_mut(&session) {
            Some(h) if !h.fenced => {
                h.fenced = true;
                h.lease.lose();
                true
            }
            _ => false,
        };
        if newly {
            self.sessions_fenced.fetch_add(1, Ordering::Relaxed);
            tracing::error!(%session,
                "this node's lease on the session was taken over by another node: its writes \
                 are refused and its runs stop");
            let _ = self.fenced.send(session);
        }
    }

    /// At a fleet node's start, before its first heartbeat: the leases of its own earlier life
    /// (a crash, a kill) have no runner any more, so they expire now and the first adoption ends
    /// their runs as `daemon_restart`, rather than the heartbeat renewing them.
    pub(in crate::postgres) async fn expire_earlier_life(
        &self,
        conn: &mut PgConnection,
    ) -> StoreResult<()> {
        sqlx::query(
            "UPDATE session_leases SET expires_at = now() - interval '1 second' \
             WHERE node_id = $1",
        )
        .bind(&self.me.node_id)
        .execute(&mut *conn)
        .await?;
        self.touch_node(conn).await?;
        // A new life: not draining (an earlier one may have stopped draining).
        sqlx::query("UPDATE nodes SET draining = FALSE, started_at = now() WHERE id = $1")
            .bind(&self.me.node_id)
            .execute(&mut *conn)
            .await?;
        Ok(())
    }

    /// The node's own row: there, with a fresh heartbeat.
    async fn touch_node(&self, conn: &mut PgConnection) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO nodes (id, address, version, started_at, heartbeat_at) \
             VALUES ($1, $2, $3, now(), now()) ON CONFLICT (id) DO UPDATE SET \
             address = EXCLUDED.address, version = EXCLUDED.version, heartbeat_at = now()",
        )
        .bind(&self.me.node_id)
        .bind(&self.me.address)
        .bind(&self.me.version)
        .execute(&mut *conn)
        .await?;
        Ok(())
    }

    /// One heartbeat's renewal: the node's row, then every lease it holds. A lease that is no
    /// longer this node's (or has another epoch) was taken over: it is fenced.
    /// Only the leases this process claimed: one of its earlier life (still under its id) has
    /// no runner and must expire, to be adopted.
    pub(super) async fn renew(&self, conn: &mut PgConnection) -> StoreResult<()> {
        self.touch_node(conn).await?;
        // The leases held now; the ones claimed while the renewal runs wait for the next beat.
        let snapshot: HashMap<SessionId, i64> = self
            .held()
            .iter()
            .filter(|(_, h)| !h.fenced)
            .map(|(s, h)| (*s, h.epoch))
            .collect();
        if snapshot.is_empty() {
            return Ok(());
        }
        let ids: Vec<String> = snapshot.keys().map(ToString::to_string).collect();
        // Before the statement: the database's expiry is set after it, so the runs' guards count
        // from no later than the row does.
        let sent = Instant::now();
        let renewed: Vec<(String, i64)> = sqlx::query_as(
            "UPDATE session_leases SET expires_at = clock_timestamp() + make_interval(secs => $2) \
             WHERE node_id = $1 AND session_id = ANY($3::text[]) RETURNING session_id, epoch",
        )
        .bind(&self.me.node_id)
        .bind(secs(self.me.lease))
        .bind(&ids)
        .fetch_all(&mut *conn)
        .await?;
        let renewed: HashMap<String, i64> = renewed.into_iter().collect();
        {
            let held = self.held();
            for (session, epoch) in &snapshot {
                if renewed.get(&session.to_string()) == Some(epoch)
                    && let Some(h) = held.get(session).filter(|h| h.epoch == *epoch)
                {
                    h.lease.renewed(sent.into_std(), self.me.lease);
                }
            }
        }
        let missing: Vec<String> = snapshot
            .iter()
            .filter(|(s, epoch)| renewed.get(&s.to_string()) != Some(*epoch))
            .map(|(s, _)| s.to_string())
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        // Not renewed: taken over when another node or epoch holds the row now. No row means the
        // lease ended with its session's last complete (this node's own release, marked before
        // its commit and forgotten right after it), or an adopter ended the runs and gave it up:
        // lost too, so that a run still waiting here (for a permission, a model) stops at once
        // rather than act for a session another node has ended.
        let holders: Vec<(String, String, i64)> = sqlx::query_as(
            "SELECT session_id, node_id, epoch FROM session_leases \
             WHERE session_id = ANY($1::text[])",
        )
        .bind(&missing)
        .fetch_all(&mut *conn)
        .await?;
        let holders: HashMap<String, (String, i64)> = holders
            .into_iter()
            .map(|(sid, node, epoch)| (sid, (node, epoch)))
            .collect();
        for sid in missing {
            let Ok(session) = sid.parse::<SessionId>() else {
                continue;
            };
            let ours = snapshot.get(&session).copied();
            let lost = match self.held().get(&session) {
                Some(h) if Some(h.epoch) == ours => match holders.get(&sid) {
                    Some((node, epoch)) => *node != self.me.node_id || Some(*epoch) != ours,
                    None => !h.releasing,
                },
                // Released or claimed anew since the snapshot.
                _ => false,
            };
            if lost {
                self.fence(session);
            }
        }
        Ok(())
    }
}
