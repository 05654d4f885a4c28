//! `[[rate_limits]]` enforced (docs/spend.md, "Rate limits"): token buckets of requests and model
//! tokens per minute, and counts of concurrent runs, per key, user or team. A rule's buckets are
//! shared by every principal it matches (a team's rule by the whole team). A single node keeps
//! them in memory; a fleet's nodes share them as PostgreSQL rows, one round trip per rule.
//!
//! With no rule configured every check returns at its first branch.

mod layer;
mod memory;
mod refusal;
mod runs;

pub use layer::limit_requests;
pub use refusal::{Limit, Quota, RateRefusal, retry_after_secs};
pub use runs::RunSlot;

use crate::config::{RateLimitRule, RateLimitValues, RateScope};
use elfgate_core::{Principal, RunId};
use elfgate_store::{BucketLevel, PgStore, StoreError};
use memory::MemoryBuckets;
use std::time::Duration;

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

    /// The bucket's key: the kind of limit and the rule's scope.
    fn bucket(&self, limit: Limit) -> String {
        let kind = match limit {
            Limit::Requests => "rpm",
            Limit::Tokens => "tpm",
            Limit::ConcurrentRuns => "runs",
        };
        format!("{kind}:{}", self.scope)
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
    runs: std::sync::Arc<runs::RunSlots>,
}

impl RateLimits {
    /// The configured rules (already checked at load), their buckets in `fleet`'s database when
    /// the daemon is a node of one, else in memory.
    pub fn new(rules: &[RateLimitRule], fleet: Option<PgStore>) -> Self {
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
        RateLimits {
            rules,
            counters: match fleet {
                Some(store) => Counters::Fleet(store),
                None => Counters::Memory(MemoryBuckets::default()),
            },
            runs: Default::default(),
        }
    }

    /// Whether any rule is configured.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    fn matching<'s>(&'s self, payer: Payer<'s>) -> impl Iterator<Item = &'s Rule> {
        self.rules.iter().filter(move |r| r.matches(payer))
    }

    async fn take(
        &self,
        key: &str,
        per_minute: u64,
        cost: f64,
        force: bool,
    ) -> Result<BucketLevel, StoreError> {
        let per_minute = per_minute as f64;
        match &self.counters {
            Counters::Memory(m) => Ok(m.take(key, per_minute, cost, force)),
            Counters::Fleet(store) => store.take_rate_tokens(key, per_minute, cost, force).await,
        }
    }

    async fn give_back(&self, key: &str, per_minute: u64, amount: f64) {
        let per_minute = per_minute as f64;
        match &self.counters {
            Counters::Memory(m) => m.give_back(key, per_minute, amount),
            Counters::Fleet(store) => {
                // Not given back: the bucket refills within the minute, and the request that
                // took it is refused anyway; the caller is told about the refusal, not this.
                if let Err(e) = store.give_back_rate_tokens(key, per_minute, amount).await {
                    tracing::warn!(error = %e.summary(), "a rate limit's token was not given back");
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
        let mut taken: Vec<(String, u64)> = Vec::new();
        let mut tightest = None;
        for rule in self.matching(payer) {
            let per_minute = match limit {
                Limit::Requests => rule.values.requests_per_minute,
                Limit::Tokens => rule.values.tokens_per_minute,
                Limit::ConcurrentRuns => None,
            };
            let Some(per_minute) = per_minute else {
                continue;
            };
            let key = rule.bucket(limit);
            // A cost larger than the whole bucket could never be granted: it waits for a full one.
            let cost = cost.min(per_minute as f64);
            let outcome = match self.take(&key, per_minute, cost, false).await {
                Ok(level) if level.granted => Ok(level),
                Ok(level) => Err(RateError::Refused(RateRefusal {
                    scope: rule.scope.to_string(),
                    limit,
                    quota: Quota::of(per_minute, level.tokens),
                    retry_after: Duration::from_secs_f64(
                        ((cost - level.tokens) * 60.0 / per_minute as f64).max(0.0),
                    ),
                })),
                Err(e) => Err(RateError::Store(e)),
            };
            match outcome {
                Ok(level) => {
                    tightest = Some(Quota::of(per_minute, level.tokens).tighter(tightest));
                    taken.push((key, per_minute));
                }
                Err(e) => {
                    for (key, per_minute) in taken {
                        self.give_back(&key, per_minute, cost).await;
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
        for rule in self.matching(payer) {
            let Some(per_minute) = rule.values.tokens_per_minute else {
                continue;
            };
            let level = self
                .take(&rule.bucket(Limit::Tokens), per_minute, 0.0, false)
                .await?;
            let quota = Quota::of(per_minute, level.tokens);
            if level.tokens < 1.0 {
                return Err(RateError::Refused(RateRefusal {
                    scope: rule.scope.to_string(),
                    limit: Limit::Tokens,
                    quota,
                    retry_after: Duration::from_secs_f64(
                        (1.0 - level.tokens) * 60.0 / per_minute as f64,
                    ),
                }));
            }
            tightest = Some(quota.tighter(tightest));
        }
        Ok(tightest)
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
        for rule in self.matching(payer) {
            let Some(per_minute) = rule.values.tokens_per_minute else {
                continue;
            };
            let key = rule.bucket(Limit::Tokens);
            let reserved = reserved.min(per_minute);
            if used > reserved {
                self.take(&key, per_minute, (used - reserved) as f64, true)
                    .await?;
            } else {
                self.give_back(&key, per_minute, (reserved - used) as f64)
                    .await;
            }
        }
        Ok(())
    }

    /// A run about to be admitted (started or queued): a slot of every matching rule's
    /// concurrent runs, held until the run ends ([`RateLimits::run_ended`]) or, when it is not
    /// admitted after all, until the slot is dropped. None when no rule limits the payer's runs.
    pub fn hold_run(&self, payer: Payer<'_>) -> Result<Option<RunSlot>, RateError> {
        if self.rules.is_empty() {
            return Ok(None);
        }
        let limits: Vec<(String, String, u64)> = self
            .matching(payer)
            .filter_map(|r| {
                let most = r.values.concurrent_runs?;
                Some((r.bucket(Limit::ConcurrentRuns), r.scope.to_string(), most))
            })
            .collect();
        if limits.is_empty() {
            return Ok(None);
        }
        self.runs
            .hold(&limits)
            .map(Some)
            .map_err(RateError::Refused)
    }

    /// A run ended: its slots, if it held any, are free.
    pub fn run_ended(&self, run_id: RunId) {
        if !self.rules.is_empty() {
            self.runs.release(run_id);
        }
    }
}
