//! Concurrent runs per rule: a count per rule on this node, a slot held from a run's admission
//! (started or queued) to its end.

use super::{Limit, Quota, RateRefusal};
use elfgate_core::RunId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a caller refused for concurrent runs is told to wait: a run's end cannot be
/// foreseen, so a short while.
const RETRY_AFTER_RUNS: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
struct Held {
    /// Runs held, by rule bucket.
    counts: HashMap<String, u64>,
    /// The buckets each admitted run holds.
    by_run: HashMap<RunId, Vec<String>>,
}

/// The runs held, by rule.
#[derive(Debug, Default)]
pub(super) struct RunSlots(Mutex<Held>);

impl RunSlots {
    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        // Plain counts: a panic elsewhere leaves them whole.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// One slot of each `(bucket, scope, most)` when every one has room, else the first full.
    pub(super) fn hold(
        self: &Arc<Self>,
        limits: &[(String, String, u64)],
    ) -> Result<RunSlot, RateRefusal> {
        let mut held = self.lock();
        for (bucket, scope, most) in limits {
            let now = held.counts.get(bucket).copied().unwrap_or(0);
            if now >= *most {
                return Err(RateRefusal {
                    scope: scope.clone(),
                    limit: Limit::ConcurrentRuns,
                    quota: Quota {
                        limit: *most,
                        remaining: 0,
                        reset: RETRY_AFTER_RUNS,
                    },
                    window_secs: 60,
                    retry_after: RETRY_AFTER_RUNS,
                });
            }
        }
        for (bucket, _, _) in limits {
            *held.counts.entry(bucket.clone()).or_insert(0) += 1;
        }
        Ok(RunSlot {
            slots: self.clone(),
            buckets: limits.iter().map(|(b, _, _)| b.clone()).collect(),
        })
    }

    fn free(held: &mut Held, buckets: &[String]) {
        for bucket in buckets {
            if let Some(count) = held.counts.get_mut(bucket) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    held.counts.remove(bucket);
                }
            }
        }
    }

    pub(super) fn release(&self, run_id: RunId) {
        let mut held = self.lock();
        if let Some(buckets) = held.by_run.remove(&run_id) {
            Self::free(&mut held, &buckets);
        }
    }
}

/// The slots a run about to be admitted holds: freed when dropped, unless the run was admitted
/// ([`RunSlot::admitted`]), when they are freed at its end.
#[derive(Debug)]
pub struct RunSlot {
    slots: Arc<RunSlots>,
    buckets: Vec<String>,
}

impl RunSlot {
    /// The run was admitted: its slots are held until it ends.
    pub fn admitted(mut self, run_id: RunId) {
        let buckets = std::mem::take(&mut self.buckets);
        self.slots.lock().by_run.insert(run_id, buckets);
    }
}

impl Drop for RunSlot {
    fn drop(&mut self) {
        if !self.buckets.is_empty() {
            RunSlots::free(&mut self.slots.lock(), &self.buckets);
        }
    }
}
