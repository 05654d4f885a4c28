//! A single node's token buckets, in memory: the same arithmetic as the fleet's shared rows
//! (elfgate-store's rate_buckets), without the round trip.

use elfgate_store::BucketLevel;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

/// One bucket: what it held when it was last touched.
#[derive(Debug, Clone, Copy)]
struct Level {
    tokens: f64,
    at: Instant,
}

/// The buckets of one node, by key.
#[derive(Debug, Default)]
pub struct MemoryBuckets(Mutex<HashMap<String, Level>>);

impl MemoryBuckets {
    /// Takes `cost` tokens from `key` (capacity `per_window`, refilled over `window_secs`) when
    /// it holds them, or whatever it holds when `force` (a charge for tokens already spent).
    pub fn take(
        &self,
        key: &str,
        per_window: f64,
        window_secs: f64,
        cost: f64,
        force: bool,
    ) -> BucketLevel {
        let now = Instant::now();
        // A poisoned lock only means a panic elsewhere mid-update of plain numbers: the numbers
        // are still whole, so the map goes on being used.
        let mut buckets = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let level = buckets.entry(key.to_owned()).or_insert(Level {
            tokens: per_window,
            at: now,
        });
        let refilled = refill(*level, per_window, window_secs, now);
        let granted = force || refilled >= cost;
        *level = Level {
            tokens: if granted { refilled - cost } else { refilled },
            at: now,
        };
        BucketLevel {
            granted,
            tokens: level.tokens,
        }
    }

    /// Puts back `amount` tokens, at most up to the capacity.
    pub fn give_back(&self, key: &str, per_window: f64, amount: f64) {
        let mut buckets = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(level) = buckets.get_mut(key) {
            level.tokens = (level.tokens + amount).min(per_window);
        }
    }
}

/// What a bucket holds `now`: its whole capacity comes back over a window.
fn refill(level: Level, per_window: f64, window_secs: f64, now: Instant) -> f64 {
    let secs = now.saturating_duration_since(level.at).as_secs_f64();
    (level.tokens + secs * per_window / window_secs).min(per_window)
}

#[cfg(test)]
mod tests {
    use super::MemoryBuckets;

    #[test]
    fn a_bucket_grants_its_capacity_then_refuses_and_a_charge_leaves_a_debt() {
        let buckets = MemoryBuckets::default();
        for _ in 0..3 {
            assert!(buckets.take("k", 3.0, 60.0, 1.0, false).granted);
        }
        let refused = buckets.take("k", 3.0, 60.0, 1.0, false);
        assert!(!refused.granted);
        assert!(refused.tokens < 1.0);
        buckets.give_back("k", 3.0, 1.0);
        assert!(buckets.take("k", 3.0, 60.0, 1.0, false).granted);
        let charged = buckets.take("k", 3.0, 60.0, 5.0, true);
        assert!(charged.granted && charged.tokens < -4.0);
    }
}
