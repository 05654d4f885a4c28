//! The budgets' model-call meter: before each call, its estimated cost is reserved on every
//! budget of its payer (key, user, team) and on the session's own account when its run has a
//! `maxCostUsd`; a budget without room refuses the call (the run pauses). After the call, the
//! reservations are reconciled with what it cost, and a soft limit passed for the first time in
//! its period is announced (a `budgetWarning` event and a webhook delivery).

use super::BudgetBook;
use super::account::{Hold, Refusal};
use async_trait::async_trait;
use chrono::Utc;
use elfgate_core::budget::usd_to_nanos;
use elfgate_core::{
    BudgetNotice, BudgetPeriod, BudgetScope, BudgetSource, CallGrant, CallPlan, CallRefusal,
    CallReport, ModelMeter, Payer,
};
use elfgate_store::StoredBudget;
use std::sync::Arc;

/// Where a passed soft limit is announced.
#[async_trait]
pub trait WarningSink: Send + Sync {
    /// `budget`'s soft limit was passed by a call of `plan`'s run.
    async fn warn(&self, plan: &CallPlan, budget: &BudgetNotice);
}

/// The budgets as a meter.
pub struct BudgetMeter {
    book: Arc<BudgetBook>,
    warnings: Arc<dyn WarningSink>,
}

impl BudgetMeter {
    /// A meter over `book`, announcing passed soft limits to `warnings`.
    pub fn new(book: Arc<BudgetBook>, warnings: Arc<dyn WarningSink>) -> Self {
        BudgetMeter { book, warnings }
    }
}

/// The id of a session's own account.
pub fn session_account_id(session: &str) -> String {
    format!("ses_{session}")
}

/// A session's own account with the run's limit.
fn session_account(plan: &CallPlan, max_usd: f64) -> StoredBudget {
    let now = Utc::now();
    StoredBudget {
        id: session_account_id(&plan.session_id.to_string()),
        scope: BudgetScope::Session(plan.session_id.to_string()),
        period: BudgetPeriod::Total,
        max_nusd: usd_to_nanos(max_usd),
        soft_nusd: None,
        source: BudgetSource::Session,
        period_start: BudgetPeriod::Total.start_of(now),
        spent_nusd: 0,
        reserved_nusd: 0,
        warned_period: None,
        created_at: now,
        updated_at: now,
    }
}

#[async_trait]
impl ModelMeter for BudgetMeter {
    fn may_refuse(&self, payer: &Payer) -> bool {
        // A run's own maxCostUsd is not known here: with any budget stored, every call is
        // asked first (the chat engines then skip their head start).
        let _ = payer;
        self.book.any()
    }

    async fn before_call(&self, plan: &CallPlan) -> Result<CallGrant, CallRefusal> {
        // The fast path: no budget stored, no maxCostUsd on the run.
        if !self.book.any() && plan.max_cost_usd.is_none() {
            return Ok(CallGrant::none());
        }
        // An unpriced model costs nothing it could be held to (docs/spend.md).
        let estimate = usd_to_nanos(plan.estimated_cost_usd().unwrap_or(0.0));
        let session = match plan.max_cost_usd {
            Some(max) => {
                let account = session_account(plan, max);
                if let Err(e) = self.book.store.set_budget_limit(&account).await {
                    return Err(unchecked(plan, &e.to_string()));
                }
                Some(Arc::new(account))
            }
            None => None,
        };
        match self.book.reserve(&plan.payer, session, estimate).await {
            Ok(hold) if hold.is_empty() => Ok(CallGrant::none()),
            Ok(hold) => Ok(CallGrant::new(hold)),
            Err(Refusal::Over(notice)) => Err(CallRefusal::Budget(notice)),
            Err(Refusal::Unchecked(why)) => Err(unchecked(plan, &why)),
        }
    }

    async fn after_call(&self, plan: &CallPlan, grant: CallGrant, report: &CallReport) {
        let Some(hold) = grant.take::<Hold>() else {
            return;
        };
        let cost = if report.made {
            usd_to_nanos(report.cost_usd.unwrap_or(0.0))
        } else {
            0
        };
        for passed in self.book.settle(hold, cost).await {
            self.warnings.warn(plan, &passed).await;
        }
    }
}

/// A call refused because its budgets could not be checked: named as the first budget that
/// applies, with nothing known of its spend.
fn unchecked(plan: &CallPlan, why: &str) -> CallRefusal {
    tracing::warn!(session = %plan.session_id, error = %why, "budgets could not be checked; the call is refused");
    CallRefusal::Budget(BudgetNotice {
        budget_id: None,
        scope: elfgate_core::BudgetHolder::Session(plan.session_id.to_string()),
        limit_usd: 0.0,
        spent_usd: 0.0,
        period: None,
    })
}
