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

use elfgate_core::sync::lock;
use elfgate_core::{LeaseState, SessionId};
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::broadcast;

mod membership;
mod node;

pub(super) use node::heartbeat_loop;

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
