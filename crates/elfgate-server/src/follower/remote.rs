//! A fleet node's share of following: the events of a run another node makes do not pass through
//! this node's bus. They come over NATS as their owner relays them (already framed), from the
//! owner's memory when a relayed event shows a gap, and from the log, read while nothing is
//! relayed and after this node's bus closed under the follower.

use super::{Event, Follower, LOG_PAGE, Next, OnLag};
use crate::fleet::follow::Following;
use crate::fleet::owner::OwnerWatch;
use bytes::Bytes;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;
use tokio::time::{Interval, MissedTickBehavior};

/// A fleet node reads the log for a session another node runs after this long without an event
/// of it over NATS (NATS away, a lost last message, events an adopter wrote to the log).
const FOLLOW_LOG_EVERY: Duration = Duration::from_millis(200);

/// What a follower on a fleet node keeps for the runs of other nodes.
pub(super) struct Remote {
    /// When the log is read next; each event relayed over NATS puts it off.
    every: Interval,
    /// The owner's events as it publishes them on NATS (subscribed before anything was read),
    /// through the one bounded subscription this node keeps per followed session. None when
    /// this node ran the session as the follower started, or NATS closed it for good.
    relayed: Option<Following>,
    /// The owner of the session, whose relayed events alone are taken.
    owner: OwnerWatch,
    /// The last read of another node's run's log failed (said once in the daemon's log).
    log_failing: bool,
    /// The bus closed under the follower while the session lives on (this node's runs of it lost
    /// their lease and were muted): it follows the log from here.
    pub(super) bus_gone: bool,
}

/// The subscription of `remote` and when it reads the log, borrowed apart.
pub(super) fn parts(
    remote: Option<&mut Remote>,
) -> (Option<&mut Following>, Option<&mut Interval>) {
    match remote {
        Some(r) => (r.relayed.as_mut(), Some(&mut r.every)),
        None => (None, None),
    }
}

/// The next message relayed for the followed session; never, without a subscription.
pub(super) async fn relayed(
    relayed: Option<&mut Following>,
) -> Result<async_nats::Message, RecvError> {
    match relayed {
        Some(sub) => sub.next().await,
        None => std::future::pending().await,
    }
}

/// When the log is to be read for other nodes' events; never, on a single node.
pub(super) async fn log_due(every: Option<&mut Interval>) {
    match every {
        Some(every) => {
            every.tick().await;
        }
        None => std::future::pending().await,
    }
}

impl Follower {
    /// Follows, besides this node's bus, the runs other nodes of the fleet make of the session:
    /// `relayed` are their events over NATS, `owner` who runs it as far as known.
    pub(crate) fn with_remote(&mut self, relayed: Option<Following>, owner: OwnerWatch) {
        // Not at once: the follower has just read what there was (from the owner or the log).
        let mut every = tokio::time::interval_at(
            tokio::time::Instant::now() + FOLLOW_LOG_EVERY,
            FOLLOW_LOG_EVERY,
        );
        every.set_missed_tick_behavior(MissedTickBehavior::Delay);
        self.remote = Some(Remote {
            every,
            relayed,
            owner,
            log_failing: false,
            bus_gone: false,
        });
    }

    /// A message relayed over NATS, or why none came.
    pub(super) async fn take_relayed(
        &mut self,
        m: Result<async_nats::Message, RecvError>,
    ) -> Option<Next> {
        match m {
            Ok(m) => {
                if self.is_from_owner(&m).await {
                    self.queue_relayed(&m.payload).await;
                }
                None
            }
            Err(RecvError::Lagged(missed)) => {
                if let Some(fleet) = &self.state.fleet {
                    fleet.follower_lagged(self.session_id, missed);
                }
                match self.on_lag {
                    // Too far behind, as on the owner: the reader reloads from its cursor.
                    OnLag::Reset => Some(self.reset()),
                    // The next relayed event shows the gap, or the next read of the log fills it.
                    OnLag::CatchUp => None,
                }
            }
            // NATS closed the subscription for good: the log remains.
            Err(RecvError::Closed) => {
                if let Some(r) = &mut self.remote {
                    r.relayed = None;
                }
                None
            }
        }
    }

    /// The bus closed under the follower: whether it goes on from the log (a fleet node, the
    /// session lives on: another node runs it now, or will, and what it does reaches the log).
    pub(super) async fn bus_closed(&mut self) -> bool {
        if self.remote.is_none()
            || !matches!(
                self.state.store.get_session(self.session_id).await,
                Ok(Some(_))
            )
        {
            return false;
        }
        if let Some(r) = &mut self.remote {
            r.bus_gone = true;
        }
        true
    }

    /// Reads the log for the events of another node's run, unless this node runs the session.
    pub(super) async fn read_remote_log(&mut self) {
        // A run of this node publishes on the bus, ahead of the log (not on the bus the follower
        // had, if gone).
        let bus_gone = self.remote.as_ref().is_some_and(|r| r.bus_gone);
        if !bus_gone && self.state.dispatcher.active().contains(self.session_id) {
            return;
        }
        // A failed read (the database away) is read again at the next tick; the bus's events
        // wait for it rather than leave a gap.
        let _ = self.read_log_before(u64::MAX).await;
    }

    /// Whether a message relayed on the session's subject is signed by the fleet and comes from
    /// the node that owns the session (dropped and counted otherwise).
    async fn is_from_owner(&mut self, msg: &async_nats::Message) -> bool {
        let (Some(fleet), Some(r)) = (self.state.fleet.clone(), self.remote.as_mut()) else {
            return false;
        };
        match fleet.verified(msg) {
            Some(sender) => r.owner.owned_by(&fleet, &sender.node, &msg.subject).await,
            None => false,
        }
    }

    /// The seq of the last event handed on or queued.
    fn queued_last(&self) -> u64 {
        self.queue.back().map_or(self.last, Event::seq)
    }

    /// An event another node relayed: queued when it is the next one, after the events before it
    /// when there is a gap (a lost or early message). When neither the owner nor the log has them
    /// yet, it waits for the next read of the log, which brings it too: nothing is skipped.
    async fn queue_relayed(&mut self, payload: &Bytes) {
        let Some(e) = crate::event_frame::single_frame(payload) else {
            return;
        };
        // The bus carries the session: no need to read the log while it does.
        if let Some(r) = &mut self.remote {
            r.every.reset();
        }
        if e.seq <= self.last {
            return;
        }
        if e.seq > self.last + 1
            && !self.fill_from_owner(e.seq).await
            // The owner did not answer: from the log, or at the next read of it.
            && !self.read_log_before(e.seq).await
        {
            return;
        }
        if e.seq == self.queued_last() + 1 {
            self.queue.push_back(Event::Relayed(e));
        }
    }

    /// Queues the events before `before` from the memory of the node that runs the session;
    /// whether it had them all.
    async fn fill_from_owner(&mut self, before: u64) -> bool {
        let Some(fleet) = self.state.fleet.clone() else {
            return false;
        };
        let after = self.queued_last();
        // The node whose event showed the gap, found to own the session just before.
        let Some(owner) = self
            .remote
            .as_ref()
            .and_then(|r| r.owner.owner())
            .map(str::to_string)
        else {
            return false;
        };
        let Some(events) = fleet.recent_events(self.session_id, after, &owner).await else {
            return false;
        };
        let mut next = after + 1;
        for e in events
            .into_iter()
            .filter(|e| e.seq > after && e.seq < before)
        {
            if e.seq != next {
                return false;
            }
            self.queue.push_back(Event::Relayed(e));
            next += 1;
        }
        next == before
    }

    /// Queues the logged events before `before` (one page); whether the log could be read.
    pub(super) async fn read_log_before(&mut self, before: u64) -> bool {
        let after = self.queued_last();
        let read = self
            .state
            .store
            .events_after(self.session_id, after, LOG_PAGE)
            .await;
        let Some(r) = &mut self.remote else {
            return false;
        };
        match read {
            Ok(page) => {
                if std::mem::take(&mut r.log_failing) {
                    tracing::info!("the log of another node's run can be read again");
                }
                self.queue.extend(
                    page.into_iter()
                        .filter(|e| e.seq < before)
                        .map(Event::Logged),
                );
                true
            }
            Err(e) => {
                if !std::mem::replace(&mut r.log_failing, true) {
                    tracing::warn!(error = %e, "reading the log of another node's run failed; \
                        read again at the next poll, events from the bus wait for it");
                }
                false
            }
        }
    }
}
