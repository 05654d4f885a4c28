//! Concurrent runs per rule: a slot held from a run's admission (started or queued) to its end.
//! A single node counts them in memory; a fleet's nodes count them as rows of the database
//! (elfgate-store's rate_runs), so that a rule holds across the nodes.

use super::{Limit, Quota, RateError, RateRefusal};
use elfgate_core::{RunId, SessionId};
use elfgate_store::PgStore;
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
    /// Runs held on this node, by rule bucket (a single node's count).
    counts: HashMap<String, u64>,
    /// The buckets each run admitted here holds.
    by_run: HashMap<RunId, HeldRun>,
}

/// Where a fleet counts its runs.
pub(super) struct FleetRuns {
    pub(super) store: PgStore,
    pub(super) node_id: String,
    /// How long after its last heartbeat a node's runs still count (its lease).
    pub(super) alive: Duration,
}

/// The runs held, by rule.
#[derive(Default)]
pub(super) struct RunSlots {
    held: Mutex<Held>,
    fleet: Option<FleetRuns>,
}

/// One `(bucket, scope, most)` limit of a payer's rules.
pub(super) type RunLimit = (String, String, u64);

fn refusal((_, scope, most): &RunLimit) -> RateRefusal {
    RateRefusal {
        scope: scope.clone(),
        limit: Limit::ConcurrentRuns,
        quota: Quota {
            limit: *most,
            remaining: 0,
            reset: RETRY_AFTER_RUNS,
        },
        window_secs: 60,
        retry_after: RETRY_AFTER_RUNS,
    }
}

impl RunSlots {
    pub(super) fn new(fleet: Option<FleetRuns>) -> Self {
        RunSlots {
            held: Mutex::default(),
            fleet,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        // Plain counts: a panic elsewhere leaves them whole.
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The runs admitted here at least [`SETTLED`] ago whose session `runs` says is idle: their
    /// end was never told (their lease lost to another node, the watcher's queue full).
    fn untold(&self, runs: &(dyn Fn(SessionId) -> bool + Sync)) -> Vec<RunId> {
        self.lock()
            .by_run
            .iter()
            .filter(|(_, r)| r.since.elapsed() >= SETTLED && !runs(r.session))
            .map(|(id, _)| *id)
            .collect()
    }

    /// A slot of each limit for `run` of `session` when every one has room, else the first full.
    /// Before refusing, frees the slots of runs whose end was never told.
    pub(super) async fn hold(
        self: &Arc<Self>,
        limits: &[RunLimit],
        run: RunId,
        session: SessionId,
        runs: &(dyn Fn(SessionId) -> bool + Sync),
    ) -> Result<RunSlot, RateError> {
        let Some(full) = self.try_hold(limits, run, session).await? else {
            return Ok(self.slot(limits, run, session));
        };
        let untold = self.untold(runs);
        let swept = self.sweep_fleet(&untold).await?;
        if untold.is_empty() && !swept {
            return Err(RateError::Refused(refusal(&limits[full])));
        }
        for id in untold {
            self.release(id).await;
        }
        match self.try_hold(limits, run, session).await? {
            None => Ok(self.slot(limits, run, session)),
            Some(full) => Err(RateError::Refused(refusal(&limits[full]))),
        }
    }

    /// Holds the slots, or says which limit is full.
    async fn try_hold(
        &self,
        limits: &[RunLimit],
        run: RunId,
        session: SessionId,
    ) -> Result<Option<usize>, RateError> {
        if let Some(f) = &self.fleet {
            let buckets: Vec<(String, u64)> =
                limits.iter().map(|(b, _, m)| (b.clone(), *m)).collect();
            return Ok(f
                .store
                .hold_rate_runs(
                    &run.to_string(),
                    &session.to_string(),
                    &f.node_id,
                    &buckets,
                    f.alive,
                )
                .await?);
        }
        let mut held = self.lock();
        if let Some(full) = limits
            .iter()
            .position(|(bucket, _, most)| held.counts.get(bucket).copied().unwrap_or(0) >= *most)
        {
            return Ok(Some(full));
        }
        for (bucket, _, _) in limits {
            *held.counts.entry(bucket.clone()).or_insert(0) += 1;
        }
        Ok(None)
    }

    /// A fleet's rows of this node that no run admitted here holds (left by an earlier start of
    /// the node under the same id) are freed. Whether any were.
    async fn sweep_fleet(&self, untold: &[RunId]) -> Result<bool, RateError> {
        let Some(f) = &self.fleet else {
            return Ok(false);
        };
        let mut swept = false;
        for (run, _) in f.store.rate_runs_of_node(&f.node_id).await? {
            let known = run
                .parse::<RunId>()
                .ok()
                .is_some_and(|id| self.lock().by_run.contains_key(&id) && !untold.contains(&id));
            if !known {
                f.store.release_rate_runs(&run).await?;
                swept = true;
            }
        }
        Ok(swept)
    }

    fn slot(self: &Arc<Self>, limits: &[RunLimit], run: RunId, session: SessionId) -> RunSlot {
        self.lock().by_run.insert(
            run,
            HeldRun {
                session,
                since: Instant::now(),
                buckets: limits.iter().map(|(b, _, _)| b.clone()).collect(),
            },
        );
        RunSlot {
            slots: self.clone(),
            run: Some(run),
        }
    }

    /// Frees what `run` holds, here and in the fleet's rows.
    pub(super) async fn release(&self, run: RunId) {
        if !self.forget(run) {
            return;
        }
        if let Some(f) = &self.fleet
            && let Err(e) = f.store.release_rate_runs(&run.to_string()).await
        {
            // Freed by the next refusal's sweep instead (the run is no longer known here).
            tracing::warn!(error = %e.summary(), "a run's concurrent-runs slots were not freed");
        }
    }

    /// Drops `run` from this node's books; whether it held anything.
    fn forget(&self, run: RunId) -> bool {
        let mut held = self.lock();
        let Some(gone) = held.by_run.remove(&run) else {
            return false;
        };
        for bucket in &gone.buckets {
            if let Some(count) = held.counts.get_mut(bucket) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    held.counts.remove(bucket);
                }
            }
        }
        true
    }
}

/// The slots a run about to be admitted holds: freed when dropped, unless the run was admitted
/// ([`RunSlot::admitted`]), when they are freed at its end.
pub struct RunSlot {
    slots: Arc<RunSlots>,
    run: Option<RunId>,
}

impl RunSlot {
    /// The run is about to be admitted: its slots are held until it ends.
    pub fn admitted(mut self) {
        self.run = None;
    }
}

impl Drop for RunSlot {
    fn drop(&mut self) {
        let Some(run) = self.run.take() else {
            return;
        };
        let slots = self.slots.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move { slots.release(run).await });
            }
            // No runtime (a test without one): this node's books at least.
            Err(_) => {
                slots.forget(run);
            }
        }
    }
}
