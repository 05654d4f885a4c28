//! What a run spent: one [`ModelCall`] per model call (the ledger's row), and the Prometheus
//! counters of spend and tokens by team and model ([`SpendCounters`]).

use crate::ids::{RunId, SessionId};
use crate::meter::Payer;
use crate::sync::lock;
use crate::usage::TokenUsage;
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex};

/// One model call of a run, as the ledger keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelCall {
    /// Its place among the run's calls (0, 1, ...): with the run, its key in the ledger.
    pub seq: u32,
    /// When it ended.
    pub at: DateTime<Utc>,
    /// The run's session.
    pub session_id: SessionId,
    /// The run.
    pub run_id: RunId,
    /// Who paid.
    pub payer: Arc<Payer>,
    /// The provider's configured name (the cli engine: its backend).
    pub provider: String,
    /// The model.
    pub model: String,
    /// Its tokens.
    pub usage: TokenUsage,
    /// `usage.input_tokens` is an estimate.
    pub input_tokens_estimated: bool,
    /// `usage.output_tokens` is an estimate.
    pub output_tokens_estimated: bool,
    /// What it cost (None: unpriced).
    pub cost_usd: Option<f64>,
}

/// The sum of what `calls` cost: None when none of them is priced (unpriced calls add nothing).
pub fn calls_cost(calls: &[ModelCall]) -> Option<f64> {
    calls
        .iter()
        .filter_map(|c| c.cost_usd)
        .fold(None, |sum, c| Some(sum.unwrap_or(0.0) + c))
}

/// Distinct (team, model) pairs the counters keep apart; past it, calls count under
/// `team="other",model="other"`, so that a daemon with many teams or models keeps a bounded
/// number of series.
pub const MAX_SPEND_SERIES: usize = 500;

#[derive(Debug, Default, Clone, Copy)]
struct Totals {
    usd: f64,
    tokens: TokenUsage,
}

/// Spend and tokens by (team, model), counted once per model call at the run's end.
#[derive(Debug, Default)]
pub struct SpendCounters {
    series: Mutex<HashMap<(String, String), Totals>>,
}

impl SpendCounters {
    /// Counts `calls`.
    pub fn count(&self, calls: &[ModelCall]) {
        if calls.is_empty() {
            return;
        }
        let mut series = lock(&self.series);
        for call in calls {
            let mut key = (call.payer.team.clone(), call.model.clone());
            if !series.contains_key(&key) && series.len() >= MAX_SPEND_SERIES {
                key = ("other".into(), "other".into());
            }
            let t = series.entry(key).or_default();
            t.usd += call.cost_usd.unwrap_or(0.0);
            t.tokens += call.usage;
        }
    }

    /// Appends `elfgate_spend_usd_total{team,model}` and `elfgate_tokens_total{team,model,kind}`
    /// in the Prometheus text format.
    pub fn render(&self, out: &mut String) {
        let mut rows: Vec<((String, String), Totals)> = lock(&self.series)
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        let _ = writeln!(
            out,
            "# HELP elfgate_spend_usd_total What priced model calls cost, in US dollars."
        );
        let _ = writeln!(out, "# TYPE elfgate_spend_usd_total counter");
        for ((team, model), t) in &rows {
            let _ = writeln!(
                out,
                "elfgate_spend_usd_total{{team=\"{}\",model=\"{}\"}} {}",
                label(team),
                label(model),
                t.usd
            );
        }
        let _ = writeln!(
            out,
            "# HELP elfgate_tokens_total Tokens of model calls, by kind."
        );
        let _ = writeln!(out, "# TYPE elfgate_tokens_total counter");
        for ((team, model), t) in &rows {
            for (kind, n) in [
                ("input", t.tokens.input_tokens),
                ("output", t.tokens.output_tokens),
                ("cache_read", t.tokens.cache_read_tokens),
                ("cache_write", t.tokens.cache_write_tokens),
            ] {
                let _ = writeln!(
                    out,
                    "elfgate_tokens_total{{team=\"{}\",model=\"{}\",kind=\"{kind}\"}} {n}",
                    label(team),
                    label(model)
                );
            }
        }
    }
}

/// A label value escaped as the Prometheus text format wants it.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(team: &str, model: &str, cost: Option<f64>) -> ModelCall {
        ModelCall {
            seq: 0,
            at: Utc::now(),
            session_id: SessionId::new(),
            run_id: RunId::new(),
            payer: Arc::new(Payer {
                key_id: None,
                user: "u".into(),
                team: team.into(),
            }),
            provider: "p".into(),
            model: model.into(),
            usage: TokenUsage {
                input_tokens: 10,
                output_tokens: 5,
                ..TokenUsage::default()
            },
            input_tokens_estimated: false,
            output_tokens_estimated: false,
            cost_usd: cost,
        }
    }

    #[test]
    fn unpriced_calls_add_nothing_and_none_priced_is_no_cost() {
        assert_eq!(calls_cost(&[call("t", "m", None)]), None);
        assert_eq!(
            calls_cost(&[call("t", "m", Some(0.5)), call("t", "m", None)]),
            Some(0.5)
        );
    }

    #[test]
    fn series_past_the_bound_count_as_other() {
        let counters = SpendCounters::default();
        for i in 0..MAX_SPEND_SERIES + 3 {
            counters.count(&[call(&format!("t{i}"), "m", Some(1.0))]);
        }
        let mut out = String::new();
        counters.render(&mut out);
        assert!(out.contains("elfgate_spend_usd_total{team=\"other\",model=\"other\"} 3"));
        assert!(out.contains("elfgate_tokens_total{team=\"t1\",model=\"m\",kind=\"input\"} 10"));
    }
}
