//! The spend ledger's rows (`model_calls`): written with a run's end by both backends.

use crate::codec::ts;
use elfgate_core::ModelCall;
use sqlx::{Database, Encode, QueryBuilder, Type};

/// The columns of a row, in the order [`push_call_values`] binds them.
pub(crate) const MODEL_CALL_COLUMNS: &str = "INSERT INTO model_calls (run_id, seq, at, session_id, \
     key_id, user_name, team, provider, model, input_tokens, output_tokens, cache_read_tokens, \
     cache_write_tokens, input_tokens_estimated, output_tokens_estimated, cost_nusd) ";

/// Billionths of a dollar in a dollar: costs are stored as integers of them, so that sums are
/// exact and alike on both backends.
const NANO_PER_USD: f64 = 1e9;

/// `usd` in billionths of a dollar.
pub(crate) fn nano_usd(usd: f64) -> i64 {
    (usd * NANO_PER_USD).round() as i64
}

/// Billionths of a dollar in dollars.
pub(crate) fn usd(nano: i64) -> f64 {
    nano as f64 / NANO_PER_USD
}

fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Appends `VALUES (...), (...)` of `calls` to an insert begun with [`MODEL_CALL_COLUMNS`].
pub(crate) fn push_call_values<DB>(qb: &mut QueryBuilder<DB>, calls: &[ModelCall])
where
    DB: Database,
    for<'t> String: Encode<'t, DB> + Type<DB>,
    for<'t> Option<String>: Encode<'t, DB> + Type<DB>,
    for<'t> i64: Encode<'t, DB> + Type<DB>,
    for<'t> Option<i64>: Encode<'t, DB> + Type<DB>,
{
    qb.push_values(calls, |mut row, c| {
        row.push_bind(c.run_id.to_string())
            .push_bind(i64::from(c.seq))
            .push_bind(ts(&c.at))
            .push_bind(c.session_id.to_string())
            .push_bind(c.payer.key_id.clone())
            .push_bind(c.payer.user.clone())
            .push_bind(c.payer.team.clone())
            .push_bind(c.provider.clone())
            .push_bind(c.model.clone())
            .push_bind(int(c.usage.input_tokens))
            .push_bind(int(c.usage.output_tokens))
            .push_bind(int(c.usage.cache_read_tokens))
            .push_bind(int(c.usage.cache_write_tokens))
            .push_bind(i64::from(c.input_tokens_estimated))
            .push_bind(i64::from(c.output_tokens_estimated))
            .push_bind(c.cost_usd.map(nano_usd));
    });
}
