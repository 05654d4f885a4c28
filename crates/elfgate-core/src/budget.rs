//! Budgets: at most what a key, a user or a team may spend in dollars over a period (docs/spend.md,
//! "Budgets"). Amounts are kept as whole nano-dollars ([`NanoUsd`]) so that a reservation and
//! its reconciliation add and subtract exactly, in memory and in a database row alike.

use crate::modes::BudgetPeriod;
use chrono::{DateTime, Datelike, Duration, NaiveTime, TimeZone, Utc};
use serde::{Deserialize, Serialize};

/// Dollars in billionths: one token at a few cents per million tokens is still many units.
pub type NanoUsd = i64;

/// Nano-dollars in a dollar.
pub const NANOS_PER_USD: f64 = 1e9;

/// The largest amount a budget may name, in dollars (a billion: far more than any real budget,
/// far less than what nano-dollars in 64 bits hold).
pub const MAX_BUDGET_USD: f64 = 1e9;

/// `usd` in nano-dollars, to the nearest (so that a limit of 0.3 is 300 000 000 exactly, not one
/// more from binary fractions).
pub fn usd_to_nanos(usd: f64) -> NanoUsd {
    if !usd.is_finite() || usd <= 0.0 {
        return 0;
    }
    // Bounded by MAX_BUDGET_USD where budgets are checked; a cost above it saturates.
    (usd * NANOS_PER_USD).round().min(i64::MAX as f64) as NanoUsd
}

/// `nanos` in dollars.
pub fn nanos_to_usd(nanos: NanoUsd) -> f64 {
    nanos as f64 / NANOS_PER_USD
}

/// Whose spending a budget limits.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum BudgetScope {
    /// An API key, by its public id.
    Key(String),
    /// A user, by name.
    User(String),
    /// A team, by name.
    Team(String),
    /// A session's own account (engineConfig `maxCostUsd`), by the session's id: kept by the
    /// daemon, never given in the API or the configuration.
    #[serde(skip)]
    Session(String),
}

impl BudgetScope {
    /// `key`, `user` or `team`.
    pub fn kind(&self) -> &'static str {
        match self {
            BudgetScope::Key(_) => "key",
            BudgetScope::User(_) => "user",
            BudgetScope::Team(_) => "team",
            BudgetScope::Session(_) => "session",
        }
    }

    /// The id or name it names.
    pub fn name(&self) -> &str {
        match self {
            BudgetScope::Key(n)
            | BudgetScope::User(n)
            | BudgetScope::Team(n)
            | BudgetScope::Session(n) => n,
        }
    }

    /// The scope of kind `kind` (as [`BudgetScope::kind`] names it) and `name`; None for another
    /// kind.
    pub fn from_parts(kind: &str, name: String) -> Option<BudgetScope> {
        match kind {
            "key" => Some(BudgetScope::Key(name)),
            "user" => Some(BudgetScope::User(name)),
            "team" => Some(BudgetScope::Team(name)),
            "session" => Some(BudgetScope::Session(name)),
            _ => None,
        }
    }
}

impl std::fmt::Display for BudgetScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} '{}'", self.kind(), self.name())
    }
}

impl BudgetPeriod {
    /// When the period holding `now` started (the Unix epoch for `total`). Periods are calendar
    /// periods in UTC: a day from midnight, a week from Monday's midnight, a month from the 1st.
    pub fn start_of(self, now: DateTime<Utc>) -> DateTime<Utc> {
        let midnight =
            |t: DateTime<Utc>| Utc.from_utc_datetime(&t.date_naive().and_time(NaiveTime::MIN));
        match self {
            BudgetPeriod::Day => midnight(now),
            BudgetPeriod::Week => {
                midnight(now) - Duration::days(i64::from(now.weekday().num_days_from_monday()))
            }
            BudgetPeriod::Month => {
                midnight(now) - Duration::days(i64::from(now.day().saturating_sub(1)))
            }
            BudgetPeriod::Total => DateTime::UNIX_EPOCH,
        }
    }
}

/// Whose budget a notice names: one of the stored budgets' scopes, or a session's or a
/// workflow's own `maxCostUsd`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum BudgetHolder {
    /// An API key's budget.
    Key(String),
    /// A user's budget.
    User(String),
    /// A team's budget.
    Team(String),
    /// The session's engineConfig `maxCostUsd`.
    Session(String),
    /// The workflow's `maxCostUsd` (by name).
    Workflow(String),
}

impl From<BudgetScope> for BudgetHolder {
    fn from(scope: BudgetScope) -> Self {
        match scope {
            BudgetScope::Key(n) => BudgetHolder::Key(n),
            BudgetScope::User(n) => BudgetHolder::User(n),
            BudgetScope::Team(n) => BudgetHolder::Team(n),
            BudgetScope::Session(n) => BudgetHolder::Session(n),
        }
    }
}

impl std::fmt::Display for BudgetHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (kind, name) = match self {
            BudgetHolder::Key(n) => ("key", n),
            BudgetHolder::User(n) => ("user", n),
            BudgetHolder::Team(n) => ("team", n),
            BudgetHolder::Session(n) => ("session", n),
            BudgetHolder::Workflow(n) => ("workflow", n),
        };
        write!(f, "{kind} '{name}'")
    }
}

/// A budget as the `budgetPaused` and `budgetWarning` events and a refusal name it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetNotice {
    /// The stored budget's id; absent for a session's or workflow's `maxCostUsd`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_id: Option<String>,
    /// Whose budget it is.
    pub scope: BudgetHolder,
    /// Its limit, in dollars (for a warning: the soft limit).
    pub limit_usd: f64,
    /// What was spent against it, in dollars (in its current period).
    pub spent_usd: f64,
    /// Its period; absent for a session's or workflow's `maxCostUsd`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<BudgetPeriod>,
}

impl std::fmt::Display for BudgetNotice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the budget of {} ({}) is spent: ${:.6} of ${:.6}",
            self.scope,
            match (&self.budget_id, self.period) {
                (Some(id), Some(p)) => format!("{id}, per {p}"),
                (Some(id), None) => id.clone(),
                (None, _) => "maxCostUsd".into(),
            },
            self.spent_usd,
            self.limit_usd
        )
    }
}

/// What is wrong with a budget's amounts, naming the field (`maxUsd`, `softUsd`).
pub fn check_amounts(
    max_field: &str,
    max_usd: f64,
    soft_field: &str,
    soft_usd: Option<f64>,
) -> Result<(), String> {
    if !max_usd.is_finite() || !(0.0..=MAX_BUDGET_USD).contains(&max_usd) {
        return Err(format!(
            "`{max_field}` must be a number of dollars from 0 to {MAX_BUDGET_USD}, not {max_usd}"
        ));
    }
    if let Some(soft) = soft_usd
        && (!soft.is_finite() || soft <= 0.0 || soft > max_usd)
    {
        return Err(format!(
            "`{soft_field}` must be a number of dollars above 0 and at most `{max_field}` \
             ({max_usd}), not {soft}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn periods_start_at_utc_calendar_boundaries() {
        // A Wednesday.
        let now = at("2026-12-09T15:04:05Z");
        assert_eq!(BudgetPeriod::Day.start_of(now), at("2026-12-09T00:00:00Z"));
        assert_eq!(BudgetPeriod::Week.start_of(now), at("2026-12-07T00:00:00Z"));
        assert_eq!(
            BudgetPeriod::Month.start_of(now),
            at("2026-12-01T00:00:00Z")
        );
        assert_eq!(BudgetPeriod::Total.start_of(now), DateTime::UNIX_EPOCH);
    }

    #[test]
    fn scopes_read_as_one_keyed_object() {
        let scope: BudgetScope = serde_json::from_str(r#"{"team": "research"}"#).unwrap();
        assert_eq!(scope, BudgetScope::Team("research".into()));
        assert!(serde_json::from_str::<BudgetScope>(r#"{"group": "x"}"#).is_err());
    }

    #[test]
    fn dollars_round_to_the_nearest_nano_dollar() {
        assert_eq!(usd_to_nanos(0.3), 300_000_000);
        assert_eq!(usd_to_nanos(0.000_000_000_6), 1);
        assert_eq!(usd_to_nanos(1.5), 1_500_000_000);
        assert_eq!(usd_to_nanos(-1.0), 0);
        assert_eq!(usd_to_nanos(f64::NAN), 0);
    }
}
