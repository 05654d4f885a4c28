//! Requests carrying the same idempotency key (`clientMsgId`) are handled one at a time.
//!
//! A retried request may arrive while the original is still being handled: both would look the
//! key up before either stored it and both would start a run (two sessions for one creation), or
//! the retry would find the original's run active and be refused as busy instead of being told
//! it is a duplicate. Holding the key's lock from the lookup to the end of the handling makes the
//! retry see the original's outcome.

use crate::keyed_lock::{KeyedGuard, KeyedLocks};
use elfgate_core::SessionId;

/// A key's scope: `None` for session creation (keys are looked up in every session), a session
/// for its prompts (keys are per session).
type Scope = Option<SessionId>;

/// The keys being handled, each with its lock.
#[derive(Default)]
pub struct KeyLocks {
    locks: KeyedLocks<(Scope, String)>,
}

/// Held while a request with a key is handled; the next request with that key waits for it.
pub type KeyGuard<'a> = KeyedGuard<'a, (Scope, String)>;

impl KeyLocks {
    /// Waits until no other request with `key` in `scope` is being handled, then holds it.
    pub async fn acquire(&self, scope: Scope, key: &str) -> KeyGuard<'_> {
        self.locks.exclusive((scope, key.to_string())).await
    }

    /// How many keys have an entry (for tests: entries do not outlive their requests).
    pub fn len(&self) -> usize {
        self.locks.len()
    }

    /// Whether no key has an entry.
    pub fn is_empty(&self) -> bool {
        self.locks.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    #[tokio::test]
    async fn a_held_key_makes_the_next_holder_wait_and_entries_go_away() {
        let locks = KeyLocks::default();
        let first = locks.acquire(None, "k").await;
        // Polled once: the same key waits; another key, or the key in another scope, does not.
        assert!(locks.acquire(None, "k").now_or_never().is_none());
        assert!(locks.acquire(None, "other").now_or_never().is_some());
        assert!(
            locks
                .acquire(Some(SessionId::new()), "k")
                .now_or_never()
                .is_some()
        );
        drop(first);
        let again = locks.acquire(None, "k").now_or_never();
        assert!(again.is_some(), "the key stayed held after its holder left");
        drop(again);
        // A waiter given up mid-wait leaves nothing behind either.
        assert!(locks.is_empty());
    }
}
