//! A fleet node's hold on a session it runs, as its runs see it: one guard per session, which the
//! node's heartbeat keeps up to date, consulted before every side effect of a run (an event
//! published, a model call, a tool call, a permission answer acted on).
//!
//! The store's lease row is the truth, but asking it before each side effect would cost a query
//! each. The guard keeps what the heartbeat learnt instead: the lease is certainly this node's
//! until the instant its last renewal was sent plus the lease's length (the row's expiry, set by
//! the database after the renewal was sent, is later still). Past that instant, another node may
//! have adopted the session (this node was paused, or cut off from the database): the run waits
//! until the heartbeat says which, renewed (the run goes on) or lost (the run stops, and nothing
//! more of it reaches anyone). On a single node there is no lease and the guard always passes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// A session's lease as this node knows it, shared by the node's heartbeat (which renews or loses
/// it) and the guards of the session's runs.
#[derive(Debug)]
pub struct LeaseState {
    /// The clock's origin for `valid_until_ms` (a monotonic clock: it runs on while the process
    /// is stopped).
    base: Instant,
    /// Until when, in milliseconds after `base`, the lease is certainly this node's.
    valid_until_ms: AtomicU64,
    /// Fired when the heartbeat found the lease taken over (or gone).
    lost: CancellationToken,
    /// The lease ended with the session's last run: nothing is guarded any more.
    released: AtomicBool,
    /// Woken at each renewal, loss or release.
    changed: Notify,
}

impl LeaseState {
    /// A lease claimed by a statement sent at `sent`, lasting `lease`.
    pub fn new(sent: Instant, lease: Duration) -> Arc<LeaseState> {
        let state = Arc::new(LeaseState {
            base: sent,
            valid_until_ms: AtomicU64::new(0),
            lost: CancellationToken::new(),
            released: AtomicBool::new(false),
            changed: Notify::new(),
        });
        state.renewed(sent, lease);
        state
    }

    /// The lease was renewed by a statement sent at `sent`: it is this node's for `lease` after.
    pub fn renewed(&self, sent: Instant, lease: Duration) {
        let until = sent.saturating_duration_since(self.base) + lease;
        let ms = u64::try_from(until.as_millis()).unwrap_or(u64::MAX);
        self.valid_until_ms.fetch_max(ms, Ordering::AcqRel);
        self.changed.notify_waiters();
    }

    /// Another node took the lease over (or ended it): every run of the session stops.
    pub fn lose(&self) {
        self.lost.cancel();
        self.changed.notify_waiters();
    }

    /// The lease ended with the session's last run (this node's own release).
    pub fn release(&self) {
        self.released.store(true, Ordering::Release);
        self.changed.notify_waiters();
    }

    fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }

    fn is_released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }

    fn unexpired(&self) -> bool {
        let now = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        now < self.valid_until_ms.load(Ordering::Acquire)
    }
}

/// What a run consults before a side effect (see the module's documentation). Cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct LeaseGuard(Option<Arc<LeaseState>>);

impl LeaseGuard {
    /// The guard of a session whose lease `state` is.
    pub fn held(state: Arc<LeaseState>) -> LeaseGuard {
        LeaseGuard(Some(state))
    }

    /// The guard of a run with no lease to hold (a single node): it always passes.
    pub fn unguarded() -> LeaseGuard {
        LeaseGuard(None)
    }

    /// The guard of a run that may not act at all: this node holds no lease for its session.
    pub fn refused() -> LeaseGuard {
        let state = LeaseState::new(Instant::now(), Duration::ZERO);
        state.lose();
        LeaseGuard(Some(state))
    }

    /// Whether the run may act now without asking: the lease is certainly this node's (or there
    /// is none to hold). Cheap: two atomic loads and a clock read.
    pub fn may_act(&self) -> bool {
        match &self.0 {
            None => true,
            Some(s) => !s.is_lost() && (s.is_released() || s.unexpired()),
        }
    }

    /// Whether the heartbeat found the lease lost: nothing more of the run may happen.
    pub fn is_lost(&self) -> bool {
        self.0.as_ref().is_some_and(|s| s.is_lost())
    }

    /// Waits until the run may act (true) or the lease is lost (false). Nothing to wait for while
    /// the lease is certainly this node's.
    pub async fn settled(&self) -> bool {
        self.confirm(&CancellationToken::new()).await
    }

    /// Before a side effect of a run: true when it may go ahead, false when the lease is lost or
    /// `cancel` fired while waiting for the heartbeat's word on it.
    pub async fn confirm(&self, cancel: &CancellationToken) -> bool {
        let Some(s) = &self.0 else {
            return true;
        };
        loop {
            let changed = s.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if s.is_lost() {
                return false;
            }
            if s.is_released() || s.unexpired() {
                return true;
            }
            tokio::select! {
                _ = changed => {}
                _ = s.lost.cancelled() => return false,
                _ = cancel.cancelled() => return false,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_lease_past_its_time_waits_for_the_heartbeats_word() {
        let state = LeaseState::new(
            Instant::now() - Duration::from_secs(10),
            Duration::from_secs(4),
        );
        let guard = LeaseGuard::held(state.clone());
        assert!(!guard.may_act());
        let waiting = tokio::spawn({
            let guard = guard.clone();
            async move { guard.settled().await }
        });
        tokio::task::yield_now().await;
        state.renewed(Instant::now(), Duration::from_secs(4));
        assert!(waiting.await.unwrap());
        assert!(guard.may_act());

        let later = LeaseState::new(
            Instant::now() - Duration::from_secs(10),
            Duration::from_secs(4),
        );
        let guard = LeaseGuard::held(later.clone());
        let waiting = tokio::spawn({
            let guard = guard.clone();
            async move { guard.settled().await }
        });
        tokio::task::yield_now().await;
        later.lose();
        assert!(!waiting.await.unwrap());
        assert!(guard.is_lost() && !guard.may_act());
    }

    #[tokio::test]
    async fn no_lease_passes_and_a_refused_one_never_does() {
        assert!(LeaseGuard::unguarded().may_act());
        assert!(LeaseGuard::unguarded().settled().await);
        assert!(!LeaseGuard::refused().settled().await);
    }
}
