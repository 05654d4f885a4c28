//! Managing budgets (`/v1/admin/budgets`): creating, listing, changing and deleting them. Those
//! of the configuration (`[[budgets]]`) are listed with `source: "config"` and refused (409) to
//! a change or a deletion: the configuration is where they are set. Each change is seen by this
//! node's book at once, by the fleet's other nodes within [`super::FLEET_REFRESH`].

use crate::config::BudgetEntry;
use crate::error::ApiError;
use crate::state::AppState;
use chrono::{DateTime, SubsecRound, Utc};
use elfgate_api::budgets::{BudgetView, CreateBudgetRequest, UpdateBudgetRequest};
use elfgate_core::budget::{self, nanos_to_usd, usd_to_nanos};
use elfgate_core::{BudgetPeriod, BudgetScope, BudgetSource};
use elfgate_store::{BudgetChange, StoredBudget};

/// Longest user or team name, or key id, a scope names.
const MAX_NAME_CHARS: usize = 200;

/// The stored row of a configured budget, as of `now` for a new one.
pub fn configured(entry: &BudgetEntry, now: DateTime<Utc>) -> StoredBudget {
    StoredBudget {
        id: entry.id(),
        scope: entry.scope.clone(),
        period: entry.period,
        max_nusd: usd_to_nanos(entry.max_usd),
        soft_nusd: entry.soft_usd.map(usd_to_nanos),
        source: BudgetSource::Config,
        period_start: entry.period.start_of(now),
        spent_nusd: 0,
        reserved_nusd: 0,
        warned_period: None,
        created_at: now,
        updated_at: now,
    }
}

/// Creates a budget as `req` asks.
pub async fn create(state: &AppState, req: CreateBudgetRequest) -> Result<BudgetView, ApiError> {
    let scope = scope(req.scope)?;
    let period = period(&req.period)?;
    budget::check_amounts("maxUsd", req.max_usd, "softUsd", req.soft_usd)
        .map_err(ApiError::Unprocessable)?;
    if let BudgetScope::Key(id) = &scope
        && state.store.get_key(id).await?.is_none()
    {
        return Err(ApiError::Unprocessable(format!(
            "`scope.key`: no API key '{id}'"
        )));
    }
    // As stored: to the millisecond, so that this answer and later reads agree.
    let now = Utc::now().trunc_subsecs(3);
    let stored = StoredBudget {
        id: new_id()?,
        scope,
        period,
        max_nusd: usd_to_nanos(req.max_usd),
        soft_nusd: req.soft_usd.map(usd_to_nanos),
        source: BudgetSource::Api,
        period_start: period.start_of(now),
        spent_nusd: 0,
        reserved_nusd: 0,
        warned_period: None,
        created_at: now,
        updated_at: now,
    };
    state.store.create_budget(&stored).await?;
    reload(state).await;
    tracing::info!(budget_id = %stored.id, scope = %stored.scope, max_usd = req.max_usd, period = %period, "budget created");
    Ok(view(stored, now))
}

/// Every budget with its spend in its current period.
pub async fn list(state: &AppState) -> Result<Vec<BudgetView>, ApiError> {
    let now = Utc::now();
    Ok(state
        .store
        .list_budgets()
        .await?
        .into_iter()
        .map(|b| view(b, now))
        .collect())
}

/// Budget `id` with its spend.
pub async fn get(state: &AppState, id: &str) -> Result<BudgetView, ApiError> {
    // A session's own account is the session's, not a budget of the API.
    let found = state
        .store
        .get_budget(id)
        .await?
        .filter(|b| b.source != BudgetSource::Session);
    Ok(view(found.ok_or_else(|| no_such_budget(id))?, Utc::now()))
}

/// Changes budget `id` as `req` asks.
pub async fn update(
    state: &AppState,
    id: &str,
    req: UpdateBudgetRequest,
) -> Result<BudgetView, ApiError> {
    let current = changeable(state, id).await?;
    let period = req.period.as_deref().map(period).transpose()?;
    let max_usd = req.max_usd.unwrap_or(nanos_to_usd(current.max_nusd));
    let soft_usd = match req.soft_usd {
        Some(given) => given,
        None => current.soft_nusd.map(nanos_to_usd),
    };
    budget::check_amounts("maxUsd", max_usd, "softUsd", soft_usd)
        .map_err(ApiError::Unprocessable)?;
    let change = BudgetChange {
        max_nusd: req.max_usd.map(usd_to_nanos),
        soft_nusd: req.soft_usd.map(|s| s.map(usd_to_nanos)),
        period,
        reset: req.reset == Some(true),
    };
    if change == BudgetChange::default() {
        return Err(ApiError::Unprocessable(
            "nothing to change: give maxUsd, softUsd, period or reset".into(),
        ));
    }
    let now = Utc::now();
    let changed = state.store.update_budget(id, &change, now).await?;
    reload(state).await;
    let changed = changed.ok_or_else(|| no_such_budget(id))?;
    tracing::info!(budget_id = %id, "budget changed");
    Ok(view(changed, now))
}

/// Deletes budget `id`.
pub async fn delete(state: &AppState, id: &str) -> Result<(), ApiError> {
    changeable(state, id).await?;
    let deleted = state.store.delete_budget(id).await?;
    reload(state).await;
    if !deleted {
        return Err(no_such_budget(id));
    }
    tracing::info!(budget_id = %id, "budget deleted");
    Ok(())
}

/// Budget `id`, if the API may change it: 404 when there is none, 409 for a configured one.
async fn changeable(state: &AppState, id: &str) -> Result<StoredBudget, ApiError> {
    let current = state
        .store
        .get_budget(id)
        .await?
        .filter(|b| b.source != BudgetSource::Session)
        .ok_or_else(|| no_such_budget(id))?;
    if current.source == BudgetSource::Config {
        return Err(ApiError::Conflict(format!(
            "budget '{id}' is set in the configuration ([[budgets]]): change it there"
        )));
    }
    Ok(current)
}

/// Reads the book again after a change; a store that cannot be read now is read again by the
/// next change (or, on a fleet, the next refresh), and the change itself stands.
async fn reload(state: &AppState) {
    if let Err(e) = state.budgets.reload().await {
        tracing::warn!(error = %e, "could not read the budgets again after a change");
    }
}

fn no_such_budget(id: &str) -> ApiError {
    ApiError::NotFound(format!("no budget '{id}'"))
}

/// A budget's id: `bud_` and 12 random bytes in hex.
fn new_id() -> Result<String, ApiError> {
    let mut bytes = [0u8; 12];
    getrandom::fill(&mut bytes).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(format!("bud_{}", hex::encode(bytes)))
}

fn scope(given: serde_json::Value) -> Result<BudgetScope, ApiError> {
    let wrong = || {
        ApiError::Unprocessable(
            "`scope` must be one of {\"key\": ID}, {\"user\": NAME} or {\"team\": NAME}".into(),
        )
    };
    let scope: BudgetScope = serde_json::from_value(given).map_err(|_| wrong())?;
    let name = scope.name();
    if name.trim().is_empty()
        || name.chars().count() > MAX_NAME_CHARS
        || name.chars().any(char::is_control)
    {
        return Err(ApiError::Unprocessable(format!(
            "`scope.{}` must be 1 to {MAX_NAME_CHARS} characters, none of them control characters",
            scope.kind()
        )));
    }
    Ok(scope)
}

fn period(text: &str) -> Result<BudgetPeriod, ApiError> {
    text.parse().map_err(|_| {
        ApiError::Unprocessable(format!(
            "unknown period '{text}' (at `period`): one of day, week, month, total"
        ))
    })
}

/// A budget as the API shows it, with its spend in the period holding `now`.
pub fn view(b: StoredBudget, now: DateTime<Utc>) -> BudgetView {
    let current = b.period_start >= b.period.start_of(now);
    BudgetView {
        spent_usd: nanos_to_usd(b.spent_at(now)),
        reserved_usd: if current {
            nanos_to_usd(b.reserved_nusd)
        } else {
            0.0
        },
        period_start: (b.period != BudgetPeriod::Total).then(|| b.period.start_of(now)),
        id: b.id,
        scope: b.scope,
        max_usd: nanos_to_usd(b.max_nusd),
        period: b.period,
        soft_usd: b.soft_nusd.map(nanos_to_usd),
        source: b.source,
        created_at: b.created_at,
        updated_at: b.updated_at,
    }
}
