//! `[[budgets]]`: spending limits on a key, a user or a team, set by the operator (docs/spend.md,
//! "Budgets"). They are stored beside the ones made through the API, with ids derived from their
//! scope and period so that every node of a fleet keeps the same rows, and are read-only there.

use super::ConfigError;
use elfgate_core::{BudgetPeriod, BudgetScope, budget};
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// One `[[budgets]]` entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetEntry {
    /// `{ key = "ID" }`, `{ user = "NAME" }` or `{ team = "NAME" }`.
    pub scope: BudgetScope,
    /// At most this many dollars in a period.
    pub max_usd: f64,
    /// `day`, `week`, `month` or `total`.
    pub period: BudgetPeriod,
    /// Past this many dollars, a warning once per period.
    #[serde(default)]
    pub soft_usd: Option<f64>,
}

impl BudgetEntry {
    /// Its id: the same on every node for the same scope and period.
    pub fn id(&self) -> String {
        let mut h = Sha256::new();
        for part in [self.scope.kind(), self.scope.name(), self.period.as_str()] {
            h.update(part.as_bytes());
            h.update([0]);
        }
        format!("cfg_{}", &hex::encode(h.finalize())[..16])
    }
}

/// Checks every entry: amounts in range, a name given, one budget per scope and period.
pub(super) fn check(entries: &[BudgetEntry]) -> Result<(), ConfigError> {
    for (i, e) in entries.iter().enumerate() {
        let at = format!("budgets[{i}]");
        budget::check_amounts(
            &format!("{at}.max_usd"),
            e.max_usd,
            &format!("{at}.soft_usd"),
            e.soft_usd,
        )
        .map_err(ConfigError::Invalid)?;
        if e.scope.name().trim().is_empty() {
            return Err(ConfigError::Invalid(format!(
                "{at}.scope: the {} is empty",
                e.scope.kind()
            )));
        }
        if let Some(j) = entries[..i]
            .iter()
            .position(|o| o.scope == e.scope && o.period == e.period)
        {
            return Err(ConfigError::Invalid(format!(
                "{at}: budgets[{j}] is already the {} budget of {}",
                e.period, e.scope
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::tests::try_load;

    #[test]
    fn budgets_are_read_and_bad_ones_refused_by_key() {
        let loaded = try_load(
            "[[budgets]]\nscope = { team = \"research\" }\nmax_usd = 50.0\nperiod = \"month\"\n\
             soft_usd = 40.0\n",
        )
        .unwrap();
        assert_eq!(loaded.budgets.len(), 1);
        assert!(loaded.budgets[0].id().starts_with("cfg_"));
        for (toml, want) in [
            (
                "[[budgets]]\nscope = { team = \"r\" }\nmax_usd = -1.0\nperiod = \"day\"\n",
                "budgets[0].max_usd",
            ),
            (
                "[[budgets]]\nscope = { team = \"r\" }\nmax_usd = 1.0\nperiod = \"day\"\n\
                 soft_usd = 2.0\n",
                "budgets[0].soft_usd",
            ),
            (
                "[[budgets]]\nscope = { key = \"\" }\nmax_usd = 1.0\nperiod = \"day\"\n",
                "budgets[0].scope",
            ),
            (
                "[[budgets]]\nscope = { user = \"u\" }\nmax_usd = 1.0\nperiod = \"day\"\n\
                 [[budgets]]\nscope = { user = \"u\" }\nmax_usd = 2.0\nperiod = \"day\"\n",
                "budgets[1]: budgets[0] is already",
            ),
            (
                "[[budgets]]\nscope = { user = \"u\" }\nmax_usd = 1.0\nperiod = \"hour\"\n",
                "period",
            ),
            (
                "[[budgets]]\nscope = { group = \"u\" }\nmax_usd = 1.0\nperiod = \"day\"\n",
                "group",
            ),
        ] {
            let refused = try_load(toml).unwrap_err().to_string();
            assert!(refused.contains(want), "{toml}: {refused}");
        }
    }
}
