//! `[[rate_limits]]`: how fast a key, a user or a team may call (see docs/spend.md, "Rate
//! limits"). A rule's scope names one principal or a whole team; every principal it matches
//! shares its buckets.

use super::ConfigError;
use serde::Deserialize;

/// One `[[rate_limits]]` rule. The limits are read as signed numbers so that a negative one is
/// refused by name here rather than as a type error of the parser.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitRule {
    /// Whom it limits: `{ key = "ID" }`, `{ user = "NAME" }` or `{ team = "NAME" }`.
    pub scope: RateScope,
    /// Requests that start or continue work, per minute.
    #[serde(default)]
    pub requests_per_minute: Option<i64>,
    /// Model tokens (input and output), per minute.
    #[serde(default)]
    pub tokens_per_minute: Option<i64>,
    /// Runs admitted (running or queued) at once.
    #[serde(default)]
    pub concurrent_runs: Option<i64>,
    /// The window the per-minute limits count over, in seconds (default 60: per minute). A
    /// shorter one refills the buckets faster: the same figure per fewer seconds.
    #[serde(default)]
    pub window_secs: Option<i64>,
}

/// The longest window a rule may count over: an hour.
pub const MAX_WINDOW_SECS: i64 = 3_600;

/// Whom a rule limits. A team's rule is one budget of requests for the whole team, not one per
/// member.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum RateScope {
    /// An API key, by its public id.
    Key(String),
    /// A user, by name.
    User(String),
    /// A team, by name: shared by its members.
    Team(String),
}

impl std::fmt::Display for RateScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RateScope::Key(id) => write!(f, "key:{id}"),
            RateScope::User(name) => write!(f, "user:{name}"),
            RateScope::Team(name) => write!(f, "team:{name}"),
        }
    }
}

/// The limits a rule sets, checked: each absent or positive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimitValues {
    /// Requests per minute.
    pub requests_per_minute: Option<u64>,
    /// Tokens per minute.
    pub tokens_per_minute: Option<u64>,
    /// Runs at once.
    pub concurrent_runs: Option<u64>,
    /// Seconds the per-minute limits count over (60 unless the rule says otherwise).
    pub window_secs: u64,
}

impl RateLimitRule {
    /// The rule's limits, or the first one that is not a positive whole number, by its key.
    pub fn values(&self, at: usize) -> Result<RateLimitValues, ConfigError> {
        let positive = |key: &str, value: Option<i64>| -> Result<Option<u64>, ConfigError> {
            match value {
                None => Ok(None),
                Some(v) if v > 0 => Ok(Some(v as u64)),
                Some(v) => Err(ConfigError::Invalid(format!(
                    "rate_limits[{at}].{key} is {v}: it must be a positive whole number \
                     (leave the key out for none)"
                ))),
            }
        };
        let values = RateLimitValues {
            requests_per_minute: positive("requests_per_minute", self.requests_per_minute)?,
            tokens_per_minute: positive("tokens_per_minute", self.tokens_per_minute)?,
            concurrent_runs: positive("concurrent_runs", self.concurrent_runs)?,
            window_secs: match positive("window_secs", self.window_secs)? {
                None => 60,
                Some(w) if w <= MAX_WINDOW_SECS as u64 => w,
                Some(w) => {
                    return Err(ConfigError::Invalid(format!(
                        "rate_limits[{at}].window_secs is {w}: at most {MAX_WINDOW_SECS}"
                    )));
                }
            },
        };
        if values.requests_per_minute.is_none()
            && values.tokens_per_minute.is_none()
            && values.concurrent_runs.is_none()
        {
            return Err(ConfigError::Invalid(format!(
                "rate_limits[{at}] ({}) sets no limit: give requests_per_minute, \
                 tokens_per_minute or concurrent_runs",
                self.scope
            )));
        }
        Ok(values)
    }
}

/// Every rule's limits checked, its scope named, no scope twice (two rules on one scope would
/// leave which one holds to chance).
pub(super) fn check(rules: &[RateLimitRule]) -> Result<(), ConfigError> {
    for (at, rule) in rules.iter().enumerate() {
        let name = match &rule.scope {
            RateScope::Key(n) | RateScope::User(n) | RateScope::Team(n) => n,
        };
        if name.trim().is_empty() {
            return Err(ConfigError::Invalid(format!(
                "rate_limits[{at}].scope names no one: give a key id, user or team name"
            )));
        }
        rule.values(at)?;
        if let Some(first) = rules[..at].iter().position(|r| r.scope == rule.scope) {
            return Err(ConfigError::Invalid(format!(
                "rate_limits[{at}].scope ({}) is also rate_limits[{first}]'s: one rule per scope",
                rule.scope
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::RateScope;
    use crate::config::tests::try_load;

    #[test]
    fn rules_load_with_their_scopes_and_bad_ones_are_refused_by_key() {
        let loaded = try_load(
            "[[rate_limits]]\nscope = { team = \"ops\" }\nrequests_per_minute = 60\n\
             [[rate_limits]]\nscope = { key = \"k1\" }\ntokens_per_minute = 1000\nconcurrent_runs = 2\n",
        )
        .unwrap();
        assert_eq!(loaded.rate_limits.len(), 2);
        assert_eq!(loaded.rate_limits[0].scope, RateScope::Team("ops".into()));
        assert_eq!(
            loaded.rate_limits[1].values(1).unwrap().concurrent_runs,
            Some(2)
        );
        for (toml, want) in [
            (
                "[[rate_limits]]\nscope = { team = \"t\" }\nrequests_per_minute = 0\n",
                "rate_limits[0].requests_per_minute is 0",
            ),
            (
                "[[rate_limits]]\nscope = { user = \"u\" }\ntokens_per_minute = -5\n",
                "rate_limits[0].tokens_per_minute is -5",
            ),
            (
                "[[rate_limits]]\nscope = { team = \"t\" }\n",
                "rate_limits[0] (team:t) sets no limit",
            ),
            (
                "[[rate_limits]]\nscope = { team = \"t\" }\nconcurrent_runs = 1\nwindow_secs = 0\n",
                "rate_limits[0].window_secs is 0",
            ),
            (
                "[[rate_limits]]\nscope = { team = \"t\" }\nconcurrent_runs = 1\nwindow_secs = 3601\n",
                "rate_limits[0].window_secs is 3601: at most 3600",
            ),
            (
                "[[rate_limits]]\nscope = { team = \"t\" }\nrequests_per_minute = 1\nburst = 2\n",
                "burst",
            ),
            (
                "[[rate_limits]]\nscope = { group = \"t\" }\nrequests_per_minute = 1\n",
                "group",
            ),
            (
                "[[rate_limits]]\nscope = { team = \"t\" }\nconcurrent_runs = 1\n\
                 [[rate_limits]]\nscope = { team = \"t\" }\nrequests_per_minute = 1\n",
                "rate_limits[1].scope (team:t) is also rate_limits[0]'s",
            ),
        ] {
            let refused = try_load(toml).unwrap_err().to_string();
            assert!(refused.contains(want), "{toml}: {refused}");
        }
    }
}
