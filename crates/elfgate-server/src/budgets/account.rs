//! Reserving a model call's estimated cost on every budget that applies to it, and reconciling
//! when it ends. Each step is one atomic statement per budget on the budget's row (see
//! `BudgetStore`), so that calls on every node of a fleet share one account: a reservation that
//! would pass the limit is refused, whatever reserved before it. A call refused on one budget
//! releases what it reserved on the others.

use super::BudgetBook;
use chrono::Utc;
use elfgate_core::budget::nanos_to_usd;
use elfgate_core::{BudgetHolder, BudgetNotice, NanoUsd, Payer};
use elfgate_store::{Reservation, StoredBudget};
use std::sync::Arc;

/// What a call reserved: each budget and the amount, released by [`BudgetBook::settle`].
#[derive(Debug, Default)]
pub struct Hold {
    held: Vec<(Arc<StoredBudget>, NanoUsd)>,
}

impl Hold {
    /// Whether it holds nothing (no budget applied).
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

/// Why a call may not be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refusal {
    /// A budget has no room for it.
    #[error("{0}")]
    Over(BudgetNotice),
    /// The budgets could not be checked (the store did not answer): refused rather than let
    /// through unchecked.
    #[error("the budgets could not be checked: {0}")]
    Unchecked(String),
}

/// What a budget's row says, as a notice.
pub fn notice_of(b: &StoredBudget, now: chrono::DateTime<Utc>) -> BudgetNotice {
    BudgetNotice {
        budget_id: Some(b.id.clone()),
        scope: BudgetHolder::from(b.scope.clone()),
        limit_usd: nanos_to_usd(b.max_nusd),
        spent_usd: nanos_to_usd(b.spent_at(now)),
        period: Some(b.period),
    }
}

impl BudgetBook {
    /// Reserves `estimate` on every budget of `payer`, and on `session`'s own account when the
    /// run has one; the hold to settle, or why not.
    pub async fn reserve(
        &self,
        payer: &Payer,
        session: Option<Arc<StoredBudget>>,
        estimate: NanoUsd,
    ) -> Result<Hold, Refusal> {
        let mut hold = Hold::default();
        let now = Utc::now();
        let budgets = self.applicable(payer).into_iter().chain(session);
        for budget in budgets {
            let refused = match self.store.reserve_budget(&budget.id, estimate, now).await {
                Ok(Reservation::Granted(_)) => {
                    hold.held.push((budget, estimate));
                    continue;
                }
                // Deleted since the book was read: nothing to hold.
                Ok(Reservation::Gone) => continue,
                Ok(Reservation::Refused(row)) => Refusal::Over(notice_of(&row, now)),
                Err(e) => Refusal::Unchecked(e.to_string()),
            };
            self.settle(hold, 0).await;
            return Err(refused);
        }
        Ok(hold)
    }

    /// Releases `hold` and adds `cost` to each of its budgets; the soft limits this call passed
    /// first in their period (on any node), to announce.
    pub async fn settle(&self, hold: Hold, cost: NanoUsd) -> Vec<BudgetNotice> {
        let now = Utc::now();
        let mut passed = Vec::new();
        for (budget, reserved) in hold.held {
            let row = match self
                .store
                .settle_budget(&budget.id, reserved, cost, now)
                .await
            {
                Ok(Some(row)) => row,
                Ok(None) => continue,
                Err(e) => {
                    // The reservation stays held until the period ends or the budget is reset:
                    // the budget errs on the side of less spending.
                    tracing::warn!(budget_id = %budget.id, error = %e, "could not reconcile a budget's reservation");
                    continue;
                }
            };
            let Some(soft) = row.soft_nusd else {
                continue;
            };
            if row.spent_nusd < soft || cost == 0 {
                continue;
            }
            match self
                .store
                .claim_budget_warning(&row.id, row.period_start)
                .await
            {
                Ok(true) => passed.push(BudgetNotice {
                    limit_usd: nanos_to_usd(soft),
                    ..notice_of(&row, now)
                }),
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(budget_id = %row.id, error = %e, "could not claim a budget's warning");
                }
            }
        }
        passed
    }
}
