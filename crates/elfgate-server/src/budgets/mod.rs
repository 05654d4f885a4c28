//! Budgets (docs/spend.md, "Budgets"): the node's book of them, and the admin API's work
//! (`admin`). The book is the node's index of every stored budget by scope, so that a model call
//! finds the budgets that apply to it without asking the store: with none stored, finding them
//! is one atomic load. What a scope spent is never kept here: it lives in the budget's row, which
//! every reservation and reconciliation changes in one statement (see `BudgetStore`).

pub mod account;
pub mod admin;
pub mod meter;
pub mod resume;
pub mod warnings;

use elfgate_core::{BudgetScope, Payer};
use elfgate_store::{Store, StoreResult, StoredBudget};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often a fleet's node reads the budgets again, to see those another node created,
/// changed or deleted.
pub const FLEET_REFRESH: Duration = Duration::from_secs(2);

/// The budgets by scope.
type Index = HashMap<BudgetScope, Vec<Arc<StoredBudget>>>;

/// The node's index of the stored budgets.
pub struct BudgetBook {
    pub(crate) store: Arc<dyn Store>,
    /// Whether any budget is stored: the one check a model call makes when none is.
    any: AtomicBool,
    index: RwLock<Arc<Index>>,
}

impl BudgetBook {
    /// An empty book over `store` (filled by [`BudgetBook::reload`]).
    pub fn new(store: Arc<dyn Store>) -> Self {
        BudgetBook {
            store,
            any: AtomicBool::new(false),
            index: RwLock::new(Arc::default()),
        }
    }

    /// Reads every budget from the store again.
    pub async fn reload(&self) -> StoreResult<()> {
        let mut index = Index::new();
        for b in self.store.list_budgets().await? {
            index.entry(b.scope.clone()).or_default().push(Arc::new(b));
        }
        let any = !index.is_empty();
        if let Ok(mut slot) = self.index.write() {
            *slot = Arc::new(index);
        }
        self.any.store(any, Ordering::Release);
        Ok(())
    }

    /// Whether any budget is stored.
    pub fn any(&self) -> bool {
        self.any.load(Ordering::Acquire)
    }

    /// The budgets of a call `payer` pays for.
    pub fn applicable(&self, payer: &Payer) -> Vec<Arc<StoredBudget>> {
        if !self.any() {
            return Vec::new();
        }
        let index = match self.index.read() {
            Ok(i) => Arc::clone(&i),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        };
        let scopes = [
            payer.key_id.clone().map(BudgetScope::Key),
            Some(BudgetScope::User(payer.user.clone())),
            Some(BudgetScope::Team(payer.team.clone())),
        ];
        scopes
            .iter()
            .flatten()
            .filter_map(|s| index.get(s))
            .flatten()
            .cloned()
            .collect()
    }

    /// Makes the configuration's `[[budgets]]` the stored ones of source `config`, then fills
    /// the book; on a fleet, reads the budgets again every [`FLEET_REFRESH`] until `shutdown`.
    pub async fn start(
        self: &Arc<Self>,
        configured: &[crate::config::BudgetEntry],
        fleet: bool,
        shutdown: CancellationToken,
    ) -> StoreResult<()> {
        let now = chrono::Utc::now();
        let rows: Vec<StoredBudget> = configured
            .iter()
            .map(|e| admin::configured(e, now))
            .collect();
        self.store.sync_config_budgets(&rows).await?;
        self.reload().await?;
        if fleet {
            let book = Arc::clone(self);
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        () = tokio::time::sleep(FLEET_REFRESH) => {}
                    }
                    if let Err(e) = book.reload().await {
                        tracing::warn!(error = %e, "could not read the budgets again; keeping the last ones read");
                    }
                }
            });
        }
        Ok(())
    }
}
