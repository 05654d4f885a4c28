//! The answer of `GET /v1/spend`: the spend ledger summed by key, user, team, model or day.

use elfgate_core::TokenUsage;
use serde::{Deserialize, Serialize};

/// The ledger's rows summed by one grouping.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpendReport {
    /// What the rows are summed by: `key`, `user`, `team`, `model` or `day`.
    pub group_by: String,
    /// The groups, ordered by their value.
    pub groups: Vec<SpendGroup>,
}

/// One group's sums.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpendGroup {
    /// The group's value: a key id, user, team, model or day (`YYYY-MM-DD`, UTC); null for
    /// calls made without a key when grouped by key.
    pub group: Option<String>,
    /// Model calls in it.
    pub calls: u64,
    /// Their tokens.
    #[serde(flatten)]
    pub usage: TokenUsage,
    /// What the priced ones cost, in US dollars; absent when none was priced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}
