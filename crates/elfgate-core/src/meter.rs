//! The model-call meter: the one hook every model call of every run goes through, before it is
//! made and after it ends. Budgets and rate limits are meters (each may refuse a call before it
//! is made), spend accounting reads the reports. Per call, never per token; with no meter
//! registered a call pays a branch.

use crate::ids::{RunId, SessionId};
use crate::principal::{Ownership, Principal};
use crate::usage::TokenUsage;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

/// A model's prices in US dollars per million tokens. A model without prices has no cost (an
/// absent cost, never 0).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Prices {
    /// Prompt tokens not read from nor written to the provider's prompt cache.
    pub input_usd_per_mtok: f64,
    /// Generated tokens.
    pub output_usd_per_mtok: f64,
    /// Prompt tokens read from the cache (absent: priced as input).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_usd_per_mtok: Option<f64>,
    /// Prompt tokens written to the cache (absent: priced as input).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_usd_per_mtok: Option<f64>,
}

impl Prices {
    /// What `usage` costs: cached prompt tokens at the cache rates (at the input rate where the
    /// cache rate is not set), the rest of the prompt at the input rate (`input_tokens` counts
    /// the cached ones too), the output at the output rate.
    pub fn cost(&self, usage: &TokenUsage) -> f64 {
        let cache_read_rate = self
            .cache_read_usd_per_mtok
            .unwrap_or(self.input_usd_per_mtok);
        let cache_write_rate = self
            .cache_write_usd_per_mtok
            .unwrap_or(self.input_usd_per_mtok);
        let uncached = usage
            .input_tokens
            .saturating_sub(usage.cache_read_tokens)
            .saturating_sub(usage.cache_write_tokens);
        (uncached as f64 * self.input_usd_per_mtok
            + usage.cache_read_tokens as f64 * cache_read_rate
            + usage.cache_write_tokens as f64 * cache_write_rate
            + usage.output_tokens as f64 * self.output_usd_per_mtok)
            / 1_000_000.0
    }
}

/// Who pays for a run's model calls: the key that sent the prompt (if one did), its user and
/// the user's team. A run the daemon starts on its own (a workflow's schedule, a webhook) is
/// paid by the session's owner, without a key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Payer {
    /// The key's public id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    /// The user's name.
    pub user: String,
    /// The user's team.
    pub team: String,
}

impl Payer {
    /// The principal that sent the prompt.
    pub fn of(principal: &Principal) -> Self {
        Payer {
            key_id: principal.key_id.clone(),
            user: principal.user.clone(),
            team: principal.team.clone(),
        }
    }

    /// The owner of what the daemon runs on its own.
    pub fn owner(ownership: &Ownership) -> Self {
        Payer {
            key_id: None,
            user: ownership.owner.clone(),
            team: ownership.team.clone(),
        }
    }

    /// The root key's user and team (tests, runs outside any request).
    pub fn root() -> Self {
        Payer::owner(&Ownership::root())
    }
}

impl Default for Payer {
    fn default() -> Self {
        Payer::root()
    }
}

/// One model call about to be made, as the meters see it.
#[derive(Debug, Clone, PartialEq)]
pub struct CallPlan {
    /// The run's session.
    pub session_id: SessionId,
    /// The run.
    pub run_id: RunId,
    /// Who pays.
    pub payer: Arc<Payer>,
    /// The provider's configured name.
    pub provider: String,
    /// The model asked for.
    pub model: String,
    /// The model's prices, when configured.
    pub prices: Option<Prices>,
    /// What the call is expected to use at most, made up front: the input from the request's
    /// size, the output from its output limit (`max_tokens`, else a default). What a budget
    /// reserves and a tokens-per-minute rule takes before the call.
    pub estimate: TokenUsage,
}

impl CallPlan {
    /// What the estimate costs (None: the model has no prices).
    pub fn estimated_cost_usd(&self) -> Option<f64> {
        self.prices.map(|p| p.cost(&self.estimate))
    }
}

/// What a model call used, once it ended (or never went upstream).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CallReport {
    /// Tokens reported, or estimated where marked.
    pub usage: TokenUsage,
    /// `usage.input_tokens` is an estimate from the request's size.
    pub input_tokens_estimated: bool,
    /// `usage.output_tokens` is an estimate from the streamed text.
    pub output_tokens_estimated: bool,
    /// What it cost (None: the model has no prices).
    pub cost_usd: Option<f64>,
    /// false when the call was not made after all (a later meter refused it, the run was
    /// interrupted before it opened): a reservation is released without spending.
    pub made: bool,
}

/// Whose budget refused a call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum BudgetScope {
    /// A key's, by its public id.
    Key(String),
    /// A user's.
    User(String),
    /// A team's.
    Team(String),
    /// The session's own (`engineConfig.maxCostUsd`).
    Session(SessionId),
}

impl std::fmt::Display for BudgetScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BudgetScope::Key(id) => write!(f, "key {id}"),
            BudgetScope::User(name) => write!(f, "user {name}"),
            BudgetScope::Team(name) => write!(f, "team {name}"),
            BudgetScope::Session(id) => write!(f, "session {id}"),
        }
    }
}

/// A budget that refused a call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetRefusal {
    /// The budget's id (None: the session's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_id: Option<String>,
    /// Whose budget it is.
    pub scope: BudgetScope,
    /// Its limit.
    pub limit_usd: f64,
    /// What was spent (and reserved) of it when the call was refused.
    pub spent_usd: f64,
}

/// What a rate-limit rule counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RateLimitKind {
    /// Requests per minute.
    Requests,
    /// Tokens per minute.
    Tokens,
    /// Runs at once.
    ConcurrentRuns,
}

/// A rate-limit rule that refused a call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RateLimitRefusal {
    /// The rule, as its configuration names it (e.g. `team=research`).
    pub rule: String,
    /// What it counts.
    pub kind: RateLimitKind,
    /// Its limit.
    pub limit: u64,
    /// What is left of it now.
    pub remaining: u64,
    /// When a call may succeed again.
    pub retry_after: Duration,
}

/// Why a meter refused a model call.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallRefusal {
    /// A budget is spent.
    #[error("the budget of {} is reached: {:.6} of {:.6} USD spent", .0.scope, .0.spent_usd, .0.limit_usd)]
    Budget(BudgetRefusal),
    /// A rate limit is reached.
    #[error("the rate limit {} is reached: retry after {} ms", .0.rule, .0.retry_after.as_millis())]
    RateLimited(RateLimitRefusal),
}

impl CallRefusal {
    /// The error code a refused call's run reports.
    pub fn code(&self) -> crate::ErrorCode {
        match self {
            CallRefusal::Budget(_) => crate::ErrorCode::BudgetExceeded,
            CallRefusal::RateLimited(_) => crate::ErrorCode::RateLimited,
        }
    }
}

/// What a meter keeps from a call's start to its end (its reservation): anything of its own.
#[derive(Default)]
pub struct CallGrant(Option<Box<dyn Any + Send + Sync>>);

impl CallGrant {
    /// A grant that holds nothing.
    pub fn none() -> Self {
        CallGrant(None)
    }

    /// A grant holding `held`.
    pub fn new<T: Any + Send + Sync>(held: T) -> Self {
        CallGrant(Some(Box::new(held)))
    }

    /// What it holds, if it is a `T`.
    pub fn take<T: Any>(self) -> Option<T> {
        self.0?.downcast::<T>().ok().map(|b| *b)
    }
}

impl std::fmt::Debug for CallGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CallGrant").field(&self.0.is_some()).finish()
    }
}

/// One concern that watches model calls: a budget, a rate limit, an account of spend.
#[async_trait]
pub trait ModelMeter: Send + Sync {
    /// Whether [`ModelMeter::before_call`] may refuse a call of `payer`. A run whose payer it
    /// may refuse makes no call before the meter was asked (the chat engines then skip their
    /// head start, which opens the call before the run is admitted). Default: never refuses.
    fn may_refuse(&self, _payer: &Payer) -> bool {
        false
    }

    /// Asked before the call goes upstream: a grant (what the meter reserved) or a refusal.
    async fn before_call(&self, plan: &CallPlan) -> Result<CallGrant, CallRefusal>;

    /// Told once the call ended (or was not made: `report.made` false), with the grant that
    /// `before_call` gave.
    async fn after_call(&self, plan: &CallPlan, grant: CallGrant, report: &CallReport);
}

/// The meters a daemon runs, asked in order. Empty by default: a call then pays nothing.
#[derive(Clone, Default)]
pub struct Meters(Arc<[Arc<dyn ModelMeter>]>);

impl std::fmt::Debug for Meters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Meters").field(&self.0.len()).finish()
    }
}

/// The grants of a [`Meters`]' meters for one call, in order.
#[derive(Debug, Default)]
pub struct MetersGrant(Vec<CallGrant>);

impl Meters {
    /// These meters, asked in this order.
    pub fn new(meters: Vec<Arc<dyn ModelMeter>>) -> Self {
        Meters(meters.into())
    }

    /// Whether none is registered (the fast path: nothing to ask).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether any meter may refuse `payer`'s calls.
    pub fn may_refuse(&self, payer: &Payer) -> bool {
        self.0.iter().any(|m| m.may_refuse(payer))
    }

    /// Asks each meter in turn; the first refusal releases the grants given before it.
    pub async fn before_call(&self, plan: &CallPlan) -> Result<MetersGrant, CallRefusal> {
        let mut grants = Vec::with_capacity(self.0.len());
        for meter in self.0.iter() {
            match meter.before_call(plan).await {
                Ok(g) => grants.push(g),
                Err(refusal) => {
                    let unused = CallReport::default();
                    for (m, g) in self.0.iter().zip(grants) {
                        m.after_call(plan, g, &unused).await;
                    }
                    return Err(refusal);
                }
            }
        }
        Ok(MetersGrant(grants))
    }

    /// Tells each meter the call's end, with its own grant.
    pub async fn after_call(&self, plan: &CallPlan, grants: MetersGrant, report: &CallReport) {
        for (m, g) in self.0.iter().zip(grants.0) {
            m.after_call(plan, g, report).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_tokens_are_priced_at_the_cache_rates_and_the_rest_at_the_input_rate() {
        let prices = Prices {
            input_usd_per_mtok: 3.0,
            output_usd_per_mtok: 15.0,
            cache_read_usd_per_mtok: Some(0.3),
            cache_write_usd_per_mtok: Some(3.75),
        };
        let usage = TokenUsage {
            input_tokens: 1_000_000,
            output_tokens: 100_000,
            cache_read_tokens: 500_000,
            cache_write_tokens: 100_000,
        };
        let want = 0.4 * 3.0 + 0.5 * 0.3 + 0.1 * 3.75 + 0.1 * 15.0;
        assert!((prices.cost(&usage) - want).abs() < 1e-9);
        let no_cache_rates = Prices {
            cache_read_usd_per_mtok: None,
            cache_write_usd_per_mtok: None,
            ..prices
        };
        assert!((no_cache_rates.cost(&usage) - (3.0 + 1.5)).abs() < 1e-9);
    }

    struct Refusing;

    #[async_trait]
    impl ModelMeter for Refusing {
        fn may_refuse(&self, payer: &Payer) -> bool {
            payer.team == "capped"
        }
        async fn before_call(&self, plan: &CallPlan) -> Result<CallGrant, CallRefusal> {
            Err(CallRefusal::Budget(BudgetRefusal {
                budget_id: None,
                scope: BudgetScope::Team(plan.payer.team.clone()),
                limit_usd: 1.0,
                spent_usd: 1.0,
            }))
        }
        async fn after_call(&self, _: &CallPlan, _: CallGrant, _: &CallReport) {}
    }

    #[derive(Default)]
    struct Counting(std::sync::Mutex<Vec<bool>>);

    #[async_trait]
    impl ModelMeter for Counting {
        async fn before_call(&self, _: &CallPlan) -> Result<CallGrant, CallRefusal> {
            Ok(CallGrant::new(7u32))
        }
        async fn after_call(&self, _: &CallPlan, grant: CallGrant, report: &CallReport) {
            assert_eq!(grant.take::<u32>(), Some(7));
            crate::sync::lock(&self.0).push(report.made);
        }
    }

    fn plan(team: &str) -> CallPlan {
        CallPlan {
            session_id: SessionId::new(),
            run_id: RunId::new(),
            payer: Arc::new(Payer {
                key_id: None,
                user: "u".into(),
                team: team.into(),
            }),
            provider: "p".into(),
            model: "m".into(),
            prices: None,
            estimate: TokenUsage::default(),
        }
    }

    #[tokio::test]
    async fn a_refusal_releases_the_grants_given_before_it() {
        let counting = Arc::new(Counting::default());
        let meters = Meters::new(vec![counting.clone(), Arc::new(Refusing)]);
        assert!(meters.may_refuse(&plan("capped").payer));
        assert!(!meters.may_refuse(&plan("free").payer));
        let refused = meters.before_call(&plan("capped")).await;
        assert!(matches!(refused, Err(CallRefusal::Budget(_))));
        assert_eq!(*crate::sync::lock(&counting.0), [false]);
        let only_counting = Meters::new(vec![counting.clone()]);
        let p = plan("free");
        let grant = only_counting.before_call(&p).await.unwrap();
        let report = CallReport {
            made: true,
            ..CallReport::default()
        };
        only_counting.after_call(&p, grant, &report).await;
        assert_eq!(*crate::sync::lock(&counting.0), [false, true]);
        assert!(Meters::default().is_empty());
    }
}
