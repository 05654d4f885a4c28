//! A node of a fleet: who owns which session, and what happens when an owner goes away.
//!
//! A session being run has one owner, held as a lease row (node, epoch, expiry by the database's
//! clock). The node that creates a run claims the lease in the run's own transaction; its
//! heartbeat renews every lease it holds; the lease ends in the transaction that logs the
//! session's last `complete`. Every write the owner makes for the session (its runs, its
//! messages, its event log) first takes the lease row FOR SHARE and checks that it still carries
//! the owner's epoch: a node that adopts the session bumps the epoch (FOR UPDATE, so it waits for
//! a write in flight and every later write sees the new epoch), and the old owner's writes are
//! refused from then on (fencing). The heartbeat also finds sessions whose lease expired with
//! runs unfinished, adopts them and ends those runs as `node_lost`.

use super::PgStore;
use crate::recovery_plan::{DAEMON_RESTART, Ending, NODE_LOST};
use crate::rows::run_from_row;
use crate::{RecoveredRun, StoreError, StoreResult};
use elfgate_core::sync::lock;
use elfgate_core::{LeaseGuard, LeaseState, SessionId};
use sqlx::PgConnection;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::broadcast;
use tokio::time::Instant;

/// This node as the fleet sees it.
#[derive(Debug, Clone)]
pub struct FleetMember {
    /// The node's id (unique in the fleet).
    pub node_id: String,
    /// Where other nodes and operators reach it (`http://HOST:PORT`).
    pub address: String,
    /// The daemon's version.
    pub version: String,
    /// How long a lease lasts without renewal.
    pub lease: Duration,
    /// How often the node renews its leases and looks for sessions to adopt.
    pub heartbeat: Duration,
}

/// The first key of the advisory locks that let one node at a time adopt a session (the second
/// is the session's hash); "adop" in ASCII, apart from the single-node lock's one-key space.
const ADOPTION_LOCKS: i32 = 0x6164_6f70;

/// A node of the fleet, as its heartbeat row says.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeInfo {
    /// Its id.
    pub id: String,
    /// Where it is reached.
    pub address: String,
    /// Its version.
    pub version: String,
    /// Milliseconds since its last heartbeat, by the database's clock.
    pub heartbeat_age_ms: u64,
    /// Sessions it holds a lease on (runs it is running).
    pub active_sessions: u64,
    /// Whether it is draining (takes no new runs).
    pub draining: bool,
}

/// What a node's share of the fleet has done so far, for its metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FleetCounts {
    /// Leases it holds now (sessions it runs), fenced ones not counted.
    pub leases_held: u64,
    /// Runs it ended by adopting their sessions (`node_lost`, or `daemon_restart` for its own
    /// earlier life).
    pub runs_adopted: u64,
    /// Sessions whose lease it lost to another node (it was paused or cut off past its lease).
    pub sessions_fenced: u64,
}

/// A lease this node claimed.
#[derive(Debug, Clone)]
struct Held {
    epoch: i64,
    /// Taken over by another node: every write for the session is refused.
    fenced: bool,
    /// Its end is in a transaction not committed yet (the session's last `complete`): a renewal
    /// that finds no row meanwhile has not lost it.
    releasing: bool,
    /// What the session's runs consult before each side effect, kept up to date by the heartbeat.
    lease: Arc<LeaseState>,
}

/// A node's share of the fleet: its identity, the leases it holds, and who hears of a lost one.
#[derive(Debug)]
pub(super) struct Membership {
    pub(super) me: FleetMember,
    /// The heartbeat's connections, apart from the store's pool.
    beat: sqlx::PgPool,
    held: Mutex<HashMap<SessionId, Held>>,
    /// Sessions with a claim in a transaction not yet recorded in `held` (how many each): not
    /// adopted meanwhile, whatever the database says of their lease.
    claiming: Mutex<HashMap<SessionId, usize>>,
    fenced: broadcast::Sender<SessionId>,
    runs_adopted: AtomicU64,
    sessions_fenced: AtomicU64,
}

/// A claim of a session's lease in flight (see [`Membership::claiming`]).
pub(super) struct Claiming {
    membership: Arc<Membership>,
    session: SessionId,
}

impl Drop for Claiming {
    fn drop(&mut self) {
        let mut claiming = lock(&self.membership.claiming);
        if let Some(n) = claiming.get_mut(&self.session) {
            *n -= 1;
            if *n == 0 {
                claiming.remove(&self.session);
            }
        }
    }
}

/// Seconds of a duration, as PostgreSQL's interval takes them.
fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

impl Membership {
    pub(super) fn new(me: FleetMember, beat: sqlx::PgPool) -> Membership {
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

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Held>> {
        lock(&self.held)
    }

    /// Sessions whose lease this node lost, as they are found.
    pub(super) fn subscribe_fenced(&self) -> broadcast::Receiver<SessionId> {
        self.fenced.subscribe()
    }

    /// Claims the session's lease in the caller's transaction: free, expired or already this
    /// node's. The epoch stays when this node holds it, and grows when the lease changes hands.
    /// Call [`Self::claimed`] once the transaction has committed.
    pub(super) async fn claim(
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
    pub(super) fn holds(&self, session: SessionId) -> bool {
        self.held().get(&session).is_some_and(|h| !h.fenced)
    }

    /// Closes the heartbeat's connections.
    pub(super) async fn close(&self) {
        self.beat.close().await;
    }

    /// Marks a claim of `session`'s lease in flight until the guard drops (after
    /// [`Self::claimed`]): between the commit and that record, the heartbeat must not take this
    /// node's own fresh lease for an orphan.
    pub(super) fn claiming(self: &Arc<Self>, session: SessionId) -> Claiming {
        *lock(&self.claiming).entry(session).or_insert(0) += 1;
        Claiming {
            membership: self.clone(),
            session,
        }
    }

    /// Whether this node runs `session` or is claiming it.
    fn runs_or_claims(&self, session: SessionId) -> bool {
        self.holds(session) || lock(&self.claiming).contains_key(&session)
    }

    /// Records a lease claimed in a committed transaction by a statement sent at `sent`. The
    /// guard of the session's runs stays the same while the lease does.
    pub(super) fn claimed(&self, session: SessionId, epoch: i64, sent: Instant) {
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
    pub(super) async fn check(
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
    pub(super) async fn fenced_of(
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
    pub(super) async fn release_if_idle(
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
    pub(super) fn released(&self, sessions: &[SessionId]) {
        let mut held = self.held();
        for s in sessions {
            if let Some(h) = held.remove(s) {
                h.lease.release();
            }
        }
    }

    /// Marks leases whose end is about to commit (see [`Held::releasing`]), or, with `false`,
    /// whose end did not commit: held as before.
    pub(super) fn releasing(&self, sessions: &[SessionId], releasing: bool) {
        let mut held = self.held();
        for s in sessions {
            if let Some(h) = held.get_mut(s) {
                h.releasing = releasing;
            }
        }
    }

    /// What a run of `session` on this node consults before each side effect: the lease this
    /// node holds on it, or, when it holds none (lost, or never claimed), a guard that refuses.
    pub(super) fn guard(&self, session: SessionId) -> LeaseGuard {
        match self.held().get(&session) {
            Some(h) if !h.fenced => LeaseGuard::held(h.lease.clone()),
            _ => LeaseGuard::refused(),
        }
    }

    /// Marks a session's lease lost and tells whoever listens (the server stops its runs).
    pub(super) fn fence(&self, session: SessionId) {
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
    pub(super) async fn expire_earlier_life(&self, conn: &mut PgConnection) -> StoreResult<()> {
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
    async fn renew(&self, conn: &mut PgConnection) -> StoreResult<()> {
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
pub(super) async fn heartbeat_loop(store: PgStore, every: Duration, lease: Duration) {
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
