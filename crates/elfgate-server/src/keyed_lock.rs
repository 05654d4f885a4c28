//! Read-write locks named by a key, made on first use and forgotten with their last holder, so
//! that the map only holds the keys in use.

use dashmap::DashMap;
use std::hash::Hash;
use std::sync::Arc;
use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};

/// The locks of the keys in use.
pub struct KeyedLocks<K: Eq + Hash> {
    locks: DashMap<K, Arc<RwLock<()>>>,
}

impl<K: Eq + Hash> Default for KeyedLocks<K> {
    fn default() -> Self {
        KeyedLocks {
            locks: DashMap::new(),
        }
    }
}

/// Kept for its drop, which releases the lock.
enum Held {
    Shared { _guard: OwnedRwLockReadGuard<()> },
    Exclusive { _guard: OwnedRwLockWriteGuard<()> },
}

/// A key held, shared or alone; dropping it lets the next holders in.
pub struct KeyedGuard<'a, K: Eq + Hash + Clone> {
    locks: &'a KeyedLocks<K>,
    key: K,
    held: Option<Held>,
    lock: Option<Arc<RwLock<()>>>,
}

impl<K: Eq + Hash + Clone> KeyedLocks<K> {
    fn lock(&self, key: &K) -> Arc<RwLock<()>> {
        self.locks.entry(key.clone()).or_default().clone()
    }

    /// Waits until nobody holds `key` alone, then holds it with any other shared holders.
    pub async fn shared(&self, key: K) -> KeyedGuard<'_, K> {
        let lock = self.lock(&key);
        let held = Held::Shared {
            _guard: lock.clone().read_owned().await,
        };
        self.guard(key, held, lock)
    }

    /// Waits until nobody holds `key`, then holds it alone. Holders that come meanwhile wait
    /// behind it (tokio's lock is fair), so it is not starved by a stream of shared holders.
    pub async fn exclusive(&self, key: K) -> KeyedGuard<'_, K> {
        let lock = self.lock(&key);
        let held = Held::Exclusive {
            _guard: lock.clone().write_owned().await,
        };
        self.guard(key, held, lock)
    }

    fn guard(&self, key: K, held: Held, lock: Arc<RwLock<()>>) -> KeyedGuard<'_, K> {
        KeyedGuard {
            locks: self,
            key,
            held: Some(held),
            lock: Some(lock),
        }
    }

    /// How many keys have an entry (for tests: entries do not outlive their holders).
    pub fn len(&self) -> usize {
        self.locks.len()
    }

    /// Whether no key has an entry.
    pub fn is_empty(&self) -> bool {
        self.locks.is_empty()
    }
}

impl<K: Eq + Hash + Clone> Drop for KeyedGuard<'_, K> {
    fn drop(&mut self) {
        drop(self.held.take());
        drop(self.lock.take());
        // Only the map holds it now: nobody waits for this key. A holder that clones it after
        // this check finds a live entry and removes it itself when done.
        self.locks
            .locks
            .remove_if(&self.key, |_, lock| Arc::strong_count(lock) == 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    #[tokio::test]
    async fn shared_holders_share_and_exclusive_ones_wait() {
        let locks = KeyedLocks::<u32>::default();
        let a = locks.shared(1).await;
        let b = locks.shared(1).now_or_never();
        assert!(b.is_some(), "two shared holders");
        assert!(locks.exclusive(1).now_or_never().is_none());
        assert!(locks.exclusive(2).now_or_never().is_some(), "another key");
        drop((a, b));
        let alone = locks.exclusive(1).await;
        assert!(locks.shared(1).now_or_never().is_none());
        drop(alone);
        assert!(locks.is_empty(), "entries go with their last holder");
    }
}
