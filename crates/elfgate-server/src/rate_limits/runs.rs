//! Concurrent runs per rule: a count per rule on this node, a slot held from a run's admission
//! (started or queued) to its end.

use super::{Limit, Quota, RateRefusal};
use elfgate_core::{RunId, SessionId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a caller refused for concurrent runs is told to wait: a run's end cannot be
/// foreseen, so a short while.
const RETRY_AFTER_RUNS: Duration = Duration::from_secs(1);

/// How long a run's slots are held before a refusal may look whether its session still runs: a
/// run is told as ended a moment after its end, and is admitted a moment after its slots are
/// held.
const SETTLED: Duration = Duration::from_secs(5);

/// What an admitted run holds.
#[derive(Debug)]
struct HeldRun {
    session: SessionId,
    since: Instant,
    buckets: Vec<String>,
}

#[derive(Debug, Default)]
struct Held {
    /// Runs held, by rule bucket.
    counts: HashMap<String, u64>,
    /// The buckets each admitted run holds.
    by_run: HashMap<RunId, HeldRun>,
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
    /// Before refusing, frees the slots of runs whose session `runs` says is idle: a run whose end
    /// was never told (its lease lost to another node, the watcher's queue full) must not hold
    /// its slot for ever.
    pub(super) fn hold(
        self: &Arc<Self>,
        limits: &[(String, String, u64)],
        runs: &dyn Fn(SessionId) -> bool,
    ) -> Result<RunSlot, RateRefusal> {
        let mut held = self.lock();
        let full = |held: &Held| {
            limits
                .iter()
                .any(|(bucket, _, most)| held.counts.get(bucket).copied().unwrap_or(0) >= *most)
        };
        if full(&held) {
            let gone: Vec<RunId> = held
                .by_run
                .iter()
                .filter(|(_, r)| r.since.elapsed() >= SETTLED && !runs(r.session))
                .map(|(id, _)| *id)
                .collect();
            for id in gone {
                if let Some(run) = held.by_run.remove(&id) {
                    Self::free(&mut held, &run.buckets);
                }
            }
        }
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
        if let Some(run) = held.by_run.remove(&run_id) {
            Self::free(&mut held, &run.buckets);
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
    /// The run of `session` is about to be admitted: its slots are held until it ends.
    pub fn admitted(mut self, run_id: RunId, session: SessionId) {
        let buckets = std::mem::take(&mut self.buckets);
        self.slots.lock().by_run.insert(
            run_id,
            HeldRun {
                session,
                since: Instant::now(),
                buckets,
            },
        );
    }
}

impl Drop for RunSlot {
    fn drop(&mut self) {
        if !self.buckets.is_empty() {
            RunSlots::free(&mut self.slots.lock(), &self.buckets);
        }
    }
}
