//! Bodies of the budget routes (`/v1/admin/budgets`): what an admin sends to set a spending
//! limit on a key, a user or a team, and what the daemon answers, with each budget's spend in
//! its current period. Strict like every request body: a field the body does not know is
//! refused.

use chrono::{DateTime, Utc};
use elfgate_core::{BudgetPeriod, BudgetScope, BudgetSource};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Body of `POST /v1/admin/budgets`.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateBudgetRequest {
    /// Whose spending it limits: `{"key": ID}`, `{"user": NAME}` or `{"team": NAME}`. Kept as
    /// JSON here so that a wrong one is a 422 naming `scope`.
    #[schema(value_type = BudgetScope)]
    pub scope: Value,
    /// At most this many dollars in a period.
    pub max_usd: f64,
    /// `day`, `week`, `month` (UTC calendar periods) or `total`. Kept as text so that an unknown
    /// one is a 422 naming the periods there are.
    #[schema(value_type = BudgetPeriod)]
    pub period: String,
    /// Past this many dollars in a period, a `budgetWarning` event and a webhook delivery, once
    /// per period; at most `maxUsd`.
    #[serde(default)]
    pub soft_usd: Option<f64>,
}

/// Body of `PATCH /v1/admin/budgets/{id}`: each field given replaces the budget's. Its scope
/// stays: a budget of another scope is another budget.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateBudgetRequest {
    /// A new limit.
    #[serde(default)]
    pub max_usd: Option<f64>,
    /// A new soft limit; null removes it.
    #[schema(value_type = Option<f64>)]
    #[serde(default, deserialize_with = "crate::keys::present")]
    pub soft_usd: Option<Option<f64>>,
    /// A new period: the spend starts again from zero.
    #[schema(value_type = Option<BudgetPeriod>)]
    #[serde(default)]
    pub period: Option<String>,
    /// `true`: the spend of the current period starts again from zero.
    #[serde(default)]
    pub reset: Option<bool>,
}

/// A budget as the API shows it, with its spend in the current period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetView {
    /// Its id.
    pub id: String,
    /// Whose spending it limits.
    pub scope: BudgetScope,
    /// At most this many dollars in a period.
    pub max_usd: f64,
    /// Its period.
    pub period: BudgetPeriod,
    /// Its soft limit; absent when it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soft_usd: Option<f64>,
    /// `api` (changed and deleted here) or `config` (`[[budgets]]`: read-only here).
    pub source: BudgetSource,
    /// Spent in the current period, in dollars.
    pub spent_usd: f64,
    /// Reserved by model calls under way, in dollars.
    pub reserved_usd: f64,
    /// When the current period started; absent for `total`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period_start: Option<DateTime<Utc>>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it was last changed.
    pub updated_at: DateTime<Utc>,
}

/// Body of `GET /v1/admin/budgets`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BudgetList {
    /// Every budget, oldest first.
    pub budgets: Vec<BudgetView>,
}

/// Body of `POST /v1/sessions/{id}/resume` (may be empty).
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResumeRequest {
    /// The prompt the resumed run answers; absent: [`RESUME_PROMPT`].
    #[serde(default)]
    pub prompt: Option<String>,
    /// Settings of the resumed run over the session's (a raised `maxCostUsd`, say).
    #[schema(value_type = Option<Object>)]
    #[serde(default)]
    pub engine_config: Option<Value>,
}

/// What a resumed run is prompted with when the request names nothing else.
pub const RESUME_PROMPT: &str = "Continue from where you stopped.";
