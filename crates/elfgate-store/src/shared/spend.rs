//! The spend ledger's reads (see [`SpendStore`]), alike on both backends.

use super::SqlBackend;
use crate::rows::RowRead;
use crate::{SpendGroupBy, SpendQuery, SpendStore, SpendSum, StoreResult};
use async_trait::async_trait;
use elfgate_core::{RunId, SessionId, TokenUsage};
use sqlx::{Database, Encode, Executor, Type};

/// The sums every read selects (CAST: PostgreSQL's SUM of BIGINT is NUMERIC).
macro_rules! sums {
    () => {
        "COUNT(*) AS calls, \
         CAST(COALESCE(SUM(input_tokens), 0) AS BIGINT) AS input_tokens, \
         CAST(COALESCE(SUM(output_tokens), 0) AS BIGINT) AS output_tokens, \
         CAST(COALESCE(SUM(cache_read_tokens), 0) AS BIGINT) AS cache_read_tokens, \
         CAST(COALESCE(SUM(cache_write_tokens), 0) AS BIGINT) AS cache_write_tokens, \
         CAST(SUM(cost_nusd) AS BIGINT) AS cost_nusd"
    };
}

/// The ledger's rows between `$1` and `$2` of user `$3` summed by `$group`; absent bounds and
/// user match every row (`$N IS NULL`), so that one statement serves every query.
macro_rules! grouped {
    ($group:literal) => {
        concat!(
            "SELECT ",
            $group,
            " AS grp, ",
            sums!(),
            " FROM model_calls WHERE ($1 IS NULL OR at >= $1) AND ($2 IS NULL OR at < $2) \
             AND ($3 IS NULL OR user_name = $3) GROUP BY ",
            $group,
            " ORDER BY ",
            $group
        )
    };
}

fn grouped_sql(by: SpendGroupBy) -> &'static str {
    match by {
        SpendGroupBy::Key => grouped!("key_id"),
        SpendGroupBy::User => grouped!("user_name"),
        SpendGroupBy::Team => grouped!("team"),
        SpendGroupBy::Model => grouped!("model"),
        SpendGroupBy::Day => grouped!("SUBSTR(at, 1, 10)"),
    }
}

#[async_trait]
impl<S> SpendStore for S
where
    S: SqlBackend,
    for<'c> &'c mut <S::Db as Database>::Connection: Executor<'c, Database = S::Db>,
    for<'q> String: Encode<'q, S::Db> + Type<S::Db>,
    for<'q> Option<String>: Encode<'q, S::Db> + Type<S::Db>,
{
    async fn session_spend(&self, session_id: SessionId) -> StoreResult<SpendSum> {
        let row = sqlx::query(concat!(
            "SELECT ",
            sums!(),
            " FROM model_calls WHERE session_id = $1"
        ))
        .bind(session_id.to_string())
        .fetch_one(self.shared().read)
        .await?;
        sum_from_row(&row, None)
    }

    async fn run_spend(&self, run_id: RunId) -> StoreResult<SpendSum> {
        let row = sqlx::query(concat!(
            "SELECT ",
            sums!(),
            " FROM model_calls WHERE run_id = $1"
        ))
        .bind(run_id.to_string())
        .fetch_one(self.shared().read)
        .await?;
        sum_from_row(&row, None)
    }

    async fn spend(&self, q: &SpendQuery) -> StoreResult<Vec<SpendSum>> {
        let rows = sqlx::query(grouped_sql(q.group_by))
            .bind(q.from.clone())
            .bind(q.to.clone())
            .bind(q.user.clone())
            .fetch_all(self.shared().read)
            .await?;
        rows.iter()
            .map(|r| {
                let group = r.opt_text("grp")?;
                sum_from_row(r, group)
            })
            .collect()
    }
}

fn sum_from_row(r: &impl RowRead, group: Option<String>) -> StoreResult<SpendSum> {
    let n = |c: &str| -> StoreResult<u64> { Ok(r.int(c)?.max(0) as u64) };
    Ok(SpendSum {
        group,
        calls: n("calls")?,
        usage: TokenUsage {
            input_tokens: n("input_tokens")?,
            output_tokens: n("output_tokens")?,
            cache_read_tokens: n("cache_read_tokens")?,
            cache_write_tokens: n("cache_write_tokens")?,
        },
        cost_usd: r.opt_int("cost_nusd")?.map(crate::ledger_rows::usd),
    })
}
