//! Only the node that owns a session may speak for it on the bus: a follower takes a session's
//! events (and the owner's memory of them) only from the node holding the session's lease. A
//! fleet member that lost the lease (paused or cut off past it, then back) still has the fleet's
//! secret, so its signature alone proves nothing about the session; the store's lease does.
//!
//! Asking the store at every event would cost a query per event, so the owner found is trusted
//! while its events keep coming less than [`RECHECK`] apart, which is shorter than any lease
//! (`cluster.lease_secs` is at least 2 s): a node whose lease expired was silent for longer than
//! that (paused, or stopped by its own lease guard), so its first message after the silence finds
//! the owner out of date and asks the store again; and every [`RECHECK_ANYWAY`] whatever. A
//! follower of a session streaming without pause costs one query per RECHECK_ANYWAY. Dropping an
//! event costs latency only: the follower reads it from the log, which a fenced node cannot write.

use super::Fleet;
use super::signed::Dropped;
use elfgate_core::SessionId;
use std::time::{Duration, Instant};

/// How long a silence makes a follower ask the store again who owns the session.
const RECHECK: Duration = Duration::from_secs(1);
/// How long a follower trusts the owner it found, however steadily its events come.
const RECHECK_ANYWAY: Duration = Duration::from_secs(10);

/// The owner of one followed session, as last found in the store.
pub(crate) struct OwnerWatch {
    session: SessionId,
    owner: Option<String>,
    checked: Option<Instant>,
    /// When the owner's last message was taken.
    heard: Option<Instant>,
    /// The last node refused, and when: asked about again only after RECHECK.
    refused: Option<(String, Instant)>,
}

impl OwnerWatch {
    /// A watch that knows no owner yet.
    pub(crate) fn new(session: SessionId) -> Self {
        OwnerWatch {
            session,
            owner: None,
            checked: None,
            heard: None,
            refused: None,
        }
    }

    /// A watch that has just heard from `owner`, found in the store a moment before.
    pub(crate) fn heard_from(session: SessionId, owner: String) -> Self {
        let now = Some(Instant::now());
        OwnerWatch {
            session,
            owner: Some(owner),
            checked: now,
            heard: now,
            refused: None,
        }
    }

    /// The owner it found last, if any.
    pub(crate) fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    /// Whether `node` owns the session now (asking the store when the owner known is stale or
    /// another node); a message from a node that does not is counted as dropped. A store that
    /// cannot answer counts as no: nothing is taken on trust.
    pub(crate) async fn owned_by(&mut self, fleet: &Fleet, node: &str, subject: &str) -> bool {
        let fresh = |t: &Option<Instant>| t.is_some_and(|t| t.elapsed() < RECHECK);
        if fresh(&self.heard)
            && self.checked.is_some_and(|t| t.elapsed() < RECHECK_ANYWAY)
            && self.owner.as_deref() == Some(node)
        {
            self.heard = Some(Instant::now());
            return true;
        }
        // A node refused a moment ago is refused again without a query: one that keeps sending
        // costs at most one query per RECHECK.
        let refused_lately = matches!(&self.refused, Some((n, t)) if n == node && fresh(&Some(*t)));
        if !refused_lately {
            self.owner = fleet.store.session_owner(self.session).await.ok().flatten();
            self.checked = Some(Instant::now());
            if self.owner.as_deref() == Some(node) {
                self.refused = None;
                self.heard = Some(Instant::now());
                return true;
            }
            self.refused = Some((node.to_string(), Instant::now()));
        }
        fleet.dropped(Dropped::NotOwner, subject, Some(node));
        false
    }
}
