//! Budgets: at most what a key, a user or a team may spend over a period, with what the scope
//! spent in the current period and what calls under way have reserved. Reserving and reconciling
//! are each one atomic statement on the budget's row, so that nodes sharing a database share the
//! budget.

use crate::StoreResult;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use elfgate_core::{BudgetPeriod, BudgetScope, BudgetSource, NanoUsd};

/// One stored budget and its account.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredBudget {
    /// Its id.
    pub id: String,
    /// Whose spending it limits.
    pub scope: BudgetScope,
    /// How long spending adds up.
    pub period: BudgetPeriod,
    /// At most this much in a period.
    pub max_nusd: NanoUsd,
    /// Past this much a warning is given once per period.
    pub soft_nusd: Option<NanoUsd>,
    /// Where it was set.
    pub source: BudgetSource,
    /// The start of the period `spent_nusd` covers.
    pub period_start: DateTime<Utc>,
    /// Spent in that period.
    pub spent_nusd: NanoUsd,
    /// Reserved by calls under way.
    pub reserved_nusd: NanoUsd,
    /// The start of the last period whose soft limit was announced.
    pub warned_period: Option<DateTime<Utc>>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it was last changed.
    pub updated_at: DateTime<Utc>,
}

impl StoredBudget {
    /// What its scope spent in the period holding `now` (nothing when the stored period is an
    /// earlier one: the account starts again at the next reservation).
    pub fn spent_at(&self, now: DateTime<Utc>) -> NanoUsd {
        if self.period_start < self.period.start_of(now) {
            0
        } else {
            self.spent_nusd
        }
    }
}

/// A change to a budget: each field given replaces the stored one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BudgetChange {
    /// A new limit.
    pub max_nusd: Option<NanoUsd>,
    /// A new soft limit: `Some(None)` removes it.
    pub soft_nusd: Option<Option<NanoUsd>>,
    /// A new period (the account starts again).
    pub period: Option<BudgetPeriod>,
    /// Start the account again from zero (spent and reserved).
    pub reset: bool,
}

/// What a reservation came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Reservation {
    /// Reserved; the budget as it is now.
    Granted(StoredBudget),
    /// Refused: it would go past the limit; the budget as it is.
    Refused(StoredBudget),
    /// There is no such budget (deleted meanwhile).
    Gone,
}

/// Storing budgets and keeping their accounts.
#[async_trait]
pub trait BudgetStore: Send + Sync {
    /// Stores a new budget; an id already stored is a
    /// [`StoreError::Constraint`](crate::StoreError::Constraint).
    async fn create_budget(&self, budget: &StoredBudget) -> StoreResult<()>;
    /// The budget `id`.
    async fn get_budget(&self, id: &str) -> StoreResult<Option<StoredBudget>>;
    /// Every budget but the sessions' own accounts, oldest first.
    async fn list_budgets(&self) -> StoreResult<Vec<StoredBudget>>;
    /// Creates `budget` or, when its id is stored, replaces its limit and keeps its account (a
    /// session's own account, whose limit is its run's `maxCostUsd`).
    async fn set_budget_limit(&self, budget: &StoredBudget) -> StoreResult<()>;
    /// Applies `change` to budget `id` (of source `api`) and returns it; None when there is no
    /// such budget of that source.
    async fn update_budget(
        &self,
        id: &str,
        change: &BudgetChange,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<StoredBudget>>;
    /// Deletes budget `id` (of source `api`); false when there was none.
    async fn delete_budget(&self, id: &str) -> StoreResult<bool>;
    /// Makes the configuration's budgets the stored ones of source `config`: each is created or
    /// has its limits replaced (its account kept), and those no longer configured are deleted.
    async fn sync_config_budgets(&self, budgets: &[StoredBudget]) -> StoreResult<()>;
    /// Reserves `amount` on budget `id` unless spent and reserved together would go past its
    /// limit, or it is already at it; starts the account again first when the period holding
    /// `now` is a later one.
    async fn reserve_budget(
        &self,
        id: &str,
        amount: NanoUsd,
        now: DateTime<Utc>,
    ) -> StoreResult<Reservation>;
    /// Ends a reservation of `reserved`: releases it and adds `spent`, what the call cost; the
    /// budget as it is then (None: deleted meanwhile).
    async fn settle_budget(
        &self,
        id: &str,
        reserved: NanoUsd,
        spent: NanoUsd,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<StoredBudget>>;
    /// Why the session's latest run ended (None: it has none, or it has not ended): a session
    /// whose latest run ended with `budget_paused` is paused.
    async fn last_run_finish(&self, session_id: &str) -> StoreResult<Option<String>>;
    /// Claims the soft limit's announcement for the period starting `period_start`: true for the
    /// first caller of the period, false for every other (on every node).
    async fn claim_budget_warning(
        &self,
        id: &str,
        period_start: DateTime<Utc>,
    ) -> StoreResult<bool>;
}
