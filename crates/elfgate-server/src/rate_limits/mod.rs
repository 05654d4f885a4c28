//! `[[rate_limits]]` enforced (docs/spend.md, "Rate limits"): token buckets of requests and model
//! tokens per minute, and counts of concurrent runs, per key, user or team. A rule's buckets are
//! shared by every principal it matches (a team's rule by the whole team). A single node keeps
//! them in memory; a fleet's nodes share them as PostgreSQL rows, one round trip per rule.
//!
//! With no rule configured every check returns at its first branch.

mod layer;
mod memory;
mod meter;
mod refusal;
mod runs;

pub use layer::limit_requests;
pub use meter::RateLimitMeter;
use refusal::refill_time;
pub use refusal::{Limit, Quota, RateRefusal, retry_after_secs};
pub use runs::RunSlot;
use runs::{FleetRuns, RunSlots};

use crate::config::{RateLimitRule, RateLimitValues, RateScope};
use elfgate_core::{Principal, RunId, SessionId};
use elfgate_store::{BucketLevel, PgStore, StoreError};
use memory::MemoryBuckets;

/// Why a check did not let a request through.
#[derive(Debug, thiserror::Error)]
pub enum RateError {
    /// A rule refused it.
    #[error("{0}")]
    Refused(RateRefusal),
    /// The shared buckets could not be read: the check cannot be made, so it refuses.
    #[error("{0}")]
    Store(#[from] StoreError),
}

/// Who is charged: the principal's key, user and team.
#[derive(Debug, Clone, Copy)]
pub struct Payer<'a> {
    /// The key's public id, when the request came with a key.
    pub key_id: Option<&'a str>,
    /// The user.
    pub user: &'a str,
    /// The user's team.
    pub team: &'a str,
}

impl<'a> From<&'a Principal> for Payer<'a> {
    fn from(p: &'a Principal) -> Self {
        Payer {
            key_id: p.key_id.as_deref(),
            user: &p.user,
            team: &p.team,
        }
    }
}

/// One configured rule, checked.
#[derive(Debug, Clone)]
struct Rule {
    scope: RateScope,
    values: RateLimitValues,
}

impl Rule {
    fn matches(&self, payer: Payer<'_>) -> bool {
        match &self.scope {
            RateScope::Key(id) => payer.key_id == Some(id.as_str()),
            RateScope::User(name) => payer.user == name,
            RateScope::Team(name) => payer.team == name,
        }
    }

    /// The rule's bucket of `limit`, when it sets that limit (never for concurrent runs, which
    /// are counted, not refilled).
    fn bucket(&self, limit: Limit) -> Option<Bucket<'_>> {
        let (kind, per_window) = match limit {
            Limit::Requests => ("rpm", self.values.requests_per_minute?),
            Limit::Tokens => ("tpm", self.values.tokens_per_minute?),
            Limit::ConcurrentRuns => return None,
        };
        Some(Bucket {
            key: format!("{kind}:{}", self.scope),
            scope: &self.scope,
            limit,
            per_window,
            window_secs: self.values.window_secs,
        })
    }

    /// The key of the rule's count of concurrent runs, and its most.
    fn runs(&self) -> Option<(String, String, u64)> {
        let most = self.values.concurrent_runs?;
        Some((format!("runs:{}", self.scope), self.scope.to_string(), most))
    }
}

/// One bucket of one rule: its key (the kind of limit and the rule's scope), its capacity and the
/// seconds it takes to refill.
struct Bucket<'r> {
    key: String,
    scope: &'r RateScope,
    limit: Limit,
    per_window: u64,
    window_secs: u64,
}

impl Bucket<'_> {
    fn quota(&self, tokens: f64) -> Quota {
        Quota::of(self.per_window, self.window_secs, tokens)
    }

    /// The refusal of `cost` by this bucket holding `tokens`.
    fn refusal(&self, tokens: f64, cost: f64) -> RateRefusal {
        RateRefusal {
            scope: self.scope.to_string(),
            limit: self.limit,
            quota: self.quota(tokens),
            window_secs: self.window_secs,
            retry_after: refill_time(self.per_window, self.window_secs, cost - tokens),
        }
    }
}

/// Where the buckets are.
enum Counters {
    /// This node's memory (a single node).
    Memory(MemoryBuckets),
    /// Rows of the fleet's database.
    Fleet(PgStore),
}

/// The daemon's rate limits.
pub struct RateLimits {
    rules: Vec<Rule>,
    counters: Counters,
    runs: std::sync::Arc<RunSlots>,
}

impl RateLimits {
    /// The configured rules (already checked at load). On a node of a fleet (`fleet`: its store,
    /// its id and its lease) their buckets and run counts are rows of the fleet's database, else
    /// this node's memory.
    pub fn new(
        rules: &[RateLimitRule],
        fleet: Option<(PgStore, String, std::time::Duration)>,
    ) -> Self {
        let rules = rules
            .iter()
            .enumerate()
            .filter_map(|(at, r)| {
                Some(Rule {
                    scope: r.scope.clone(),
                    values: r.values(at).ok()?,
                })
            })
            .collect();
        let (counters, runs) = match fleet {
            Some((store, node_id, alive)) => (
                Counters::Fleet(store.clone()),
                RunSlots::new(Some(FleetRuns {
                    store,
                    node_id,
                    alive,
                })),
            ),
            None => (
                Counters::Memory(MemoryBuckets::default()),
                RunSlots::new(None),
            ),
        };
        RateLimits {
            rules,
            counters,
            runs: std::sync::Arc::new(runs),
        }
    }

    /// Whether any rule is configured.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The `limit` buckets of the rules matching `payer`.
    fn buckets<'s>(&'s self, payer: Payer<'s>, limit: Limit) -> impl Iterator<Item = Bucket<'s>> {
        self.rules
            .iter()
            .filter(move |r| r.matches(payer))
            .filter_map(move |r| r.bucket(limit))
    }

    async fn take(
        &self,
        b: &Bucket<'_>,
        cost: f64,
        force: bool,
    ) -> Result<BucketLevel, StoreError> {
        let (per_window, window) = (b.per_window as f64, b.window_secs as f64);
        match &self.counters {
            Counters::Memory(m) => Ok(m.take(&b.key, per_window, window, cost, force)),
            Counters::Fleet(store) => {
                store
                    .take_rate_tokens(&b.key, per_window, window, cost, force)
                    .await
            }
        }
    }

    async fn give_back(&self, b: &Bucket<'_>, amount: f64) {
        let per_window = b.per_window as f64;
        match &self.counters {
            Counters::Memory(m) => m.give_back(&b.key, per_window, amount),
            Counters::Fleet(store) => {
                // Not given back: the bucket refills within its window, and the caller is told
                // about the refusal or the call, not this.
                if let Err(e) = store
                    .give_back_rate_tokens(&b.key, per_window, amount)
                    .await
                {
                    tracing::warn!(error = %e.summary(), "a rate limit's tokens were not given back");
                }
            }
        }
    }

    /// Takes `cost` from the `limit` bucket of every rule matching `payer`: all of them or none
    /// (what was taken before a refusal is given back). Returns the tightest quota left.
    async fn take_all(
        &self,
        payer: Payer<'_>,
        limit: Limit,
        cost: f64,
    ) -> Result<Option<Quota>, RateError> {
        let mut taken: Vec<(Bucket<'_>, f64)> = Vec::new();
        let mut tightest = None;
        for bucket in self.buckets(payer, limit) {
            // A cost larger than the whole bucket could never be granted: it waits for a full one.
            let cost = cost.min(bucket.per_window as f64);
            let outcome = match self.take(&bucket, cost, false).await {
                Ok(level) if level.granted => Ok(level),
                Ok(level) => Err(RateError::Refused(bucket.refusal(level.tokens, cost))),
                Err(e) => Err(RateError::Store(e)),
            };
            match outcome {
                Ok(level) => {
                    tightest = Some(bucket.quota(level.tokens).tighter(tightest));
                    taken.push((bucket, cost));
                }
                Err(e) => {
                    for (bucket, cost) in &taken {
                        self.give_back(bucket, *cost).await;
                    }
                    return Err(e);
                }
            }
        }
        Ok(tightest)
    }

    /// A request that starts or continues work: one token of every matching rule's
    /// requests-per-minute bucket. None when no rule limits the payer's requests.
    pub async fn take_request(&self, payer: Payer<'_>) -> Result<Option<Quota>, RateError> {
        if self.rules.is_empty() {
            return Ok(None);
        }
        self.take_all(payer, Limit::Requests, 1.0).await
    }

    /// A front door's request: refused before any model call when a matching rule's
    /// tokens-per-minute bucket is spent (it is charged per model call as the run goes). Looks
    /// without taking.
    pub async fn check_tokens(&self, payer: Payer<'_>) -> Result<Option<Quota>, RateError> {
        if self.rules.is_empty() {
            return Ok(None);
        }
        let mut tightest = None;
        for bucket in self.buckets(payer, Limit::Tokens) {
            let level = self.take(&bucket, 0.0, false).await?;
            if level.tokens < 1.0 {
                return Err(RateError::Refused(bucket.refusal(level.tokens, 1.0)));
            }
            tightest = Some(bucket.quota(level.tokens).tighter(tightest));
        }
        Ok(tightest)
    }

    /// Whether any rule limits tokens (else model calls need not ask).
    pub fn limits_any_tokens(&self) -> bool {
        self.rules
            .iter()
            .any(|r| r.values.tokens_per_minute.is_some())
    }

    /// Whether a rule limits the tokens `payer` may spend (so that a model call must ask first).
    pub fn limits_tokens(&self, payer: Payer<'_>) -> bool {
        !self.rules.is_empty() && self.buckets(payer, Limit::Tokens).next().is_some()
    }

    /// Before a model call: reserves `estimate` tokens of every matching rule's
    /// tokens-per-minute bucket, or says how long to wait for them.
    pub async fn reserve_tokens(&self, payer: Payer<'_>, estimate: u64) -> Result<(), RateError> {
        if self.rules.is_empty() {
            return Ok(());
        }
        self.take_all(payer, Limit::Tokens, estimate as f64)
            .await
            .map(|_| ())
    }

    /// After a model call: charges what it used beyond the reservation (a debt the bucket
    /// refills), or gives back what it did not use.
    pub async fn settle_tokens(
        &self,
        payer: Payer<'_>,
        reserved: u64,
        used: u64,
    ) -> Result<(), RateError> {
        if self.rules.is_empty() || reserved == used {
            return Ok(());
        }
        for bucket in self.buckets(payer, Limit::Tokens) {
            // What was reserved of this bucket: never more than it holds.
            let reserved = reserved.min(bucket.per_window);
            if used > reserved {
                self.take(&bucket, (used - reserved) as f64, true).await?;
            } else {
                self.give_back(&bucket, (reserved - used) as f64).await;
            }
        }
        Ok(())
    }

    /// Run `run` of `session`, about to be admitted (started or queued): a slot of every
    /// matching rule's concurrent runs, held until the run ends ([`RateLimits::run_ended`]) or,
    /// when it is not admitted after all, until the slot is dropped. None when no rule limits the
    /// payer's runs. `runs` says whether a session has a run going here, to free the slots of
    /// runs whose end was never told.
    pub async fn hold_run(
        &self,
        payer: Payer<'_>,
        run: RunId,
        session: SessionId,
        runs: &(dyn Fn(SessionId) -> bool + Sync),
    ) -> Result<Option<RunSlot>, RateError> {
        if self.rules.is_empty() {
            return Ok(None);
        }
        let limits: Vec<runs::RunLimit> = self
            .rules
            .iter()
            .filter(|r| r.matches(payer))
            .filter_map(Rule::runs)
            .collect();
        if limits.is_empty() {
            return Ok(None);
        }
        self.runs.hold(&limits, run, session, runs).await.map(Some)
    }

    /// A run ended: its slots, if it held any, are free.
    pub async fn run_ended(&self, run_id: RunId) {
        if !self.rules.is_empty() {
            self.runs.release(run_id).await;
        }
    }
}

#[cfg(test)]
mod tests;
