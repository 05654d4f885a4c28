//! Budgets (see [`BudgetStore`]). A reservation and a reconciliation are each one UPDATE of the
//! budget's row, checked and changed at once, so that nodes sharing a database never reserve
//! past a limit between them. The statements start the account again when the period holding
//! `now` began after the stored one: the current period's start is computed here for each period
//! and picked in SQL by the row's own period, so no statement reads the row first.

use super::{RowsAffected, SqlBackend};
use crate::codec::{parse, parse_ts, ts};
use crate::rows::RowRead;
use crate::{BudgetChange, BudgetStore, Reservation, StoreError, StoreResult, StoredBudget};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use elfgate_core::{BudgetPeriod, BudgetScope, NanoUsd};
use sqlx::{Database, Encode, Executor, Type};

/// The start of the row's current period, from the four bound after the statement's own
/// parameters (`$3`..`$6`: day, week, month, total). A macro so that the statements stay
/// constant strings.
macro_rules! current_start {
    () => {
        "(CASE period WHEN 'day' THEN $3 WHEN 'week' THEN $4 WHEN 'month' THEN $5 ELSE $6 END)"
    };
}

/// Whether the row's period ended (its account starts again).
macro_rules! period_ended {
    () => {
        concat!("period_start < ", current_start!())
    };
}

/// The starts of the periods holding `now`, in the order `current_start!` binds them.
fn period_starts(now: DateTime<Utc>) -> [String; 4] {
    [
        BudgetPeriod::Day,
        BudgetPeriod::Week,
        BudgetPeriod::Month,
        BudgetPeriod::Total,
    ]
    .map(|p| ts(&p.start_of(now)))
}

/// Reserves $1 on budget $2 when the account (started again if its period ended) leaves room,
/// and is not already at its limit.
const RESERVE: &str = concat!(
    "UPDATE budgets SET spent_nusd = CASE WHEN ",
    period_ended!(),
    " THEN 0 ELSE spent_nusd END, reserved_nusd = CASE WHEN ",
    period_ended!(),
    " THEN 0 ELSE reserved_nusd END + $1, period_start = CASE WHEN ",
    period_ended!(),
    " THEN ",
    current_start!(),
    " ELSE period_start END WHERE id = $2 AND (CASE WHEN ",
    period_ended!(),
    " THEN 0 ELSE spent_nusd END) < max_nusd AND (CASE WHEN ",
    period_ended!(),
    " THEN 0 ELSE spent_nusd + reserved_nusd END) + $1 <= max_nusd RETURNING *"
);

/// Releases $1 reserved on budget $7 and adds $2 spent.
const SETTLE: &str = concat!(
    "UPDATE budgets SET spent_nusd = CASE WHEN ",
    period_ended!(),
    " THEN 0 ELSE spent_nusd END + $2, reserved_nusd = CASE WHEN ",
    period_ended!(),
    " THEN 0 WHEN reserved_nusd >= $1 THEN reserved_nusd - $1 ELSE 0 END, \
     period_start = CASE WHEN ",
    period_ended!(),
    " THEN ",
    current_start!(),
    " ELSE period_start END WHERE id = $7 RETURNING *"
);

#[async_trait]
impl<S> BudgetStore for S
where
    S: SqlBackend,
    for<'c> &'c mut <S::Db as Database>::Connection: Executor<'c, Database = S::Db>,
    for<'q> String: Encode<'q, S::Db> + Type<S::Db>,
    for<'q> Option<String>: Encode<'q, S::Db> + Type<S::Db>,
    for<'q> i64: Encode<'q, S::Db> + Type<S::Db>,
    for<'q> Option<i64>: Encode<'q, S::Db> + Type<S::Db>,
{
    async fn create_budget(&self, b: &StoredBudget) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO budgets (id, scope_kind, scope_name, period, max_nusd, soft_nusd, \
             source, period_start, spent_nusd, reserved_nusd, warned_period, created_at, \
             updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
        )
        .bind(b.id.clone())
        .bind(b.scope.kind().to_string())
        .bind(b.scope.name().to_string())
        .bind(b.period.to_string())
        .bind(b.max_nusd)
        .bind(b.soft_nusd)
        .bind(b.source.to_string())
        .bind(ts(&b.period_start))
        .bind(b.spent_nusd)
        .bind(b.reserved_nusd)
        .bind(b.warned_period.as_ref().map(ts))
        .bind(ts(&b.created_at))
        .bind(ts(&b.updated_at))
        .execute(self.shared().write)
        .await?;
        Ok(())
    }

    async fn get_budget(&self, id: &str) -> StoreResult<Option<StoredBudget>> {
        let row = sqlx::query("SELECT * FROM budgets WHERE id = $1")
            .bind(id.to_owned())
            .fetch_optional(self.shared().read)
            .await?;
        row.as_ref().map(budget_from_row).transpose()
    }

    async fn list_budgets(&self) -> StoreResult<Vec<StoredBudget>> {
        let rows =
            sqlx::query("SELECT * FROM budgets WHERE source <> 'session' ORDER BY created_at, id")
                .fetch_all(self.shared().read)
                .await?;
        rows.iter().map(budget_from_row).collect()
    }

    async fn set_budget_limit(&self, b: &StoredBudget) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO budgets (id, scope_kind, scope_name, period, max_nusd, soft_nusd, \
             source, period_start, spent_nusd, reserved_nusd, warned_period, created_at, \
             updated_at) VALUES ($1, $2, $3, $4, $5, NULL, $6, $7, 0, 0, NULL, $8, $8) \
             ON CONFLICT (id) DO UPDATE SET max_nusd = excluded.max_nusd \
             WHERE budgets.max_nusd <> excluded.max_nusd",
        )
        .bind(b.id.clone())
        .bind(b.scope.kind().to_string())
        .bind(b.scope.name().to_string())
        .bind(b.period.to_string())
        .bind(b.max_nusd)
        .bind(b.source.to_string())
        .bind(ts(&b.period_start))
        .bind(ts(&b.updated_at))
        .execute(self.shared().write)
        .await?;
        Ok(())
    }

    async fn update_budget(
        &self,
        id: &str,
        change: &BudgetChange,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<StoredBudget>> {
        // A new period, like a reset, starts the account again: from the epoch, which the next
        // reservation takes for an ended period (or, for `total`, as the one there is).
        let restart = change.reset || change.period.is_some();
        let row = sqlx::query(
            "UPDATE budgets SET max_nusd = COALESCE($1, max_nusd), \
             soft_nusd = CASE WHEN $2 = 1 THEN $3 ELSE soft_nusd END, \
             period = COALESCE($4, period), \
             spent_nusd = CASE WHEN $5 = 1 THEN 0 ELSE spent_nusd END, \
             reserved_nusd = CASE WHEN $5 = 1 THEN 0 ELSE reserved_nusd END, \
             period_start = CASE WHEN $5 = 1 THEN $6 ELSE period_start END, \
             warned_period = CASE WHEN $5 = 1 THEN NULL ELSE warned_period END, \
             updated_at = $7 WHERE id = $8 AND source = 'api' RETURNING *",
        )
        .bind(change.max_nusd)
        .bind(i64::from(change.soft_nusd.is_some()))
        .bind(change.soft_nusd.flatten())
        .bind(change.period.map(|p| p.to_string()))
        .bind(i64::from(restart))
        .bind(ts(&DateTime::UNIX_EPOCH))
        .bind(ts(&now))
        .bind(id.to_owned())
        .fetch_optional(self.shared().write)
        .await?;
        row.as_ref().map(budget_from_row).transpose()
    }

    async fn delete_budget(&self, id: &str) -> StoreResult<bool> {
        let done = sqlx::query("DELETE FROM budgets WHERE id = $1 AND source = 'api'")
            .bind(id.to_owned())
            .execute(self.shared().write)
            .await?;
        Ok(done.rows_changed() > 0)
    }

    async fn sync_config_budgets(&self, budgets: &[StoredBudget]) -> StoreResult<()> {
        let mut tx = self.shared().write.begin().await?;
        for b in budgets {
            // A budget whose period changed starts its account again; one whose limits changed
            // keeps what it spent.
            sqlx::query(
                "INSERT INTO budgets (id, scope_kind, scope_name, period, max_nusd, soft_nusd, \
                 source, period_start, spent_nusd, reserved_nusd, warned_period, created_at, \
                 updated_at) VALUES ($1, $2, $3, $4, $5, $6, 'config', $7, 0, 0, NULL, $8, $8) \
                 ON CONFLICT (id) DO UPDATE SET max_nusd = excluded.max_nusd, \
                 soft_nusd = excluded.soft_nusd, \
                 spent_nusd = CASE WHEN budgets.period = excluded.period \
                 THEN budgets.spent_nusd ELSE 0 END, \
                 period_start = CASE WHEN budgets.period = excluded.period \
                 THEN budgets.period_start ELSE excluded.period_start END, \
                 period = excluded.period, updated_at = excluded.updated_at",
            )
            .bind(b.id.clone())
            .bind(b.scope.kind().to_string())
            .bind(b.scope.name().to_string())
            .bind(b.period.to_string())
            .bind(b.max_nusd)
            .bind(b.soft_nusd)
            .bind(ts(&b.period_start))
            .bind(ts(&b.updated_at))
            .execute(&mut *tx)
            .await?;
        }
        let stored: Vec<String> = {
            let rows = sqlx::query("SELECT id FROM budgets WHERE source = 'config'")
                .fetch_all(&mut *tx)
                .await?;
            rows.iter()
                .map(|r| r.text("id"))
                .collect::<Result<_, _>>()?
        };
        for gone in stored
            .iter()
            .filter(|id| !budgets.iter().any(|b| &b.id == *id))
        {
            sqlx::query("DELETE FROM budgets WHERE id = $1 AND source = 'config'")
                .bind(gone.clone())
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn reserve_budget(
        &self,
        id: &str,
        amount: NanoUsd,
        now: DateTime<Utc>,
    ) -> StoreResult<Reservation> {
        let [day, week, month, total] = period_starts(now);
        let row = sqlx::query(RESERVE)
            .bind(amount)
            .bind(id.to_owned())
            .bind(day)
            .bind(week)
            .bind(month)
            .bind(total)
            .fetch_optional(self.shared().write)
            .await?;
        if let Some(row) = row {
            return Ok(Reservation::Granted(budget_from_row(&row)?));
        }
        Ok(match self.get_budget(id).await? {
            Some(b) => Reservation::Refused(b),
            None => Reservation::Gone,
        })
    }

    async fn settle_budget(
        &self,
        id: &str,
        reserved: NanoUsd,
        spent: NanoUsd,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<StoredBudget>> {
        let [day, week, month, total] = period_starts(now);
        let row = sqlx::query(SETTLE)
            .bind(reserved)
            .bind(spent)
            .bind(day)
            .bind(week)
            .bind(month)
            .bind(total)
            .bind(id.to_owned())
            .fetch_optional(self.shared().write)
            .await?;
        row.as_ref().map(budget_from_row).transpose()
    }

    async fn last_run_finish(&self, session_id: &str) -> StoreResult<Option<String>> {
        let row = sqlx::query(
            "SELECT finish_reason FROM runs WHERE session_id = $1 ORDER BY started_at DESC, id \
             DESC LIMIT 1",
        )
        .bind(session_id.to_owned())
        .fetch_optional(self.shared().read)
        .await?;
        Ok(row
            .map(|r| r.opt_text("finish_reason"))
            .transpose()?
            .flatten())
    }

    async fn claim_budget_warning(
        &self,
        id: &str,
        period_start: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let start = ts(&period_start);
        let done = sqlx::query(
            "UPDATE budgets SET warned_period = $1 WHERE id = $2 AND (warned_period IS NULL OR \
             warned_period < $1)",
        )
        .bind(start)
        .bind(id.to_owned())
        .execute(self.shared().write)
        .await?;
        Ok(done.rows_changed() == 1)
    }
}

fn budget_from_row(r: &impl RowRead) -> StoreResult<StoredBudget> {
    let kind = r.text("scope_kind")?;
    let scope = BudgetScope::from_parts(&kind, r.text("scope_name")?)
        .ok_or_else(|| StoreError::Corrupt(format!("budget scope kind '{kind}'")))?;
    Ok(StoredBudget {
        id: r.text("id")?,
        scope,
        period: parse("budget period", &r.text("period")?)?,
        max_nusd: r.int("max_nusd")?,
        soft_nusd: r.opt_int("soft_nusd")?,
        source: parse("budget source", &r.text("source")?)?,
        period_start: parse_ts(&r.text("period_start")?)?,
        spent_nusd: r.int("spent_nusd")?,
        reserved_nusd: r.int("reserved_nusd")?,
        warned_period: r
            .opt_text("warned_period")?
            .map(|s| parse_ts(&s))
            .transpose()?,
        created_at: parse_ts(&r.text("created_at")?)?,
        updated_at: parse_ts(&r.text("updated_at")?)?,
    })
}
