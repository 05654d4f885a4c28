//! The spend ledger's reads: a session's totals and the ledger's sums by key, user, team, model
//! or day (its rows are written with each run's end, see `RunOutcome::model_calls`).

use crate::StoreResult;
use async_trait::async_trait;
use elfgate_core::{RunId, SessionId, TokenUsage};

/// What the ledger's rows are summed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpendGroupBy {
    /// The API key's id (rows without a key: none).
    Key,
    /// The user.
    User,
    /// The team.
    Team,
    /// The model.
    Model,
    /// The day (UTC, `YYYY-MM-DD`).
    Day,
}

/// Which rows [`SpendStore::spend`] sums.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpendQuery {
    /// What they are summed by.
    pub group_by: SpendGroupBy,
    /// From this time on (RFC 3339, inclusive).
    pub from: Option<String>,
    /// Before this time (RFC 3339, exclusive).
    pub to: Option<String>,
    /// Only this user's rows (None: everyone's).
    pub user: Option<String>,
}

/// Spend summed over a group of the ledger's rows, or over a session.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SpendSum {
    /// The group's value (the key id, user, team, model or day); None for the rows without one
    /// (calls made without a key).
    pub group: Option<String>,
    /// Model calls.
    pub calls: u64,
    /// Their tokens.
    pub usage: TokenUsage,
    /// What the priced ones cost, in US dollars (None: none was priced).
    pub cost_usd: Option<f64>,
}

/// Reading the spend ledger.
#[async_trait]
pub trait SpendStore: Send + Sync {
    /// A session's model calls summed (its ended runs').
    async fn session_spend(&self, session_id: SessionId) -> StoreResult<SpendSum>;
    /// A run's model calls summed (none before it ended).
    async fn run_spend(&self, run_id: RunId) -> StoreResult<SpendSum>;
    /// The ledger's rows `q` selects, summed by its grouping, ordered by group.
    async fn spend(&self, q: &SpendQuery) -> StoreResult<Vec<SpendSum>>;
}
