//! /v1/spend: the spend ledger summed by key, user, team, model or day (admins: everyone's rows;
//! anyone else: their own).

use crate::error::{ApiError, ErrorBody};
use crate::extract::ApiQuery;
use crate::service::Actor;
use crate::state::AppState;
use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use elfgate_api::spend::{SpendGroup, SpendReport};
use elfgate_store::{SpendGroupBy, SpendQuery};
use serde::Deserialize;
use utoipa::IntoParams;

/// The ledger's route.
pub fn routes() -> Router<AppState> {
    Router::new().route("/v1/spend", get(spend))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub(crate) struct SpendParams {
    /// What to sum by: `key`, `user`, `team`, `model` or `day` (UTC).
    group_by: String,
    /// From this time on, inclusive: RFC 3339 (`2026-12-01T00:00:00Z`) or a day (`2026-12-01`,
    /// its start in UTC).
    from: Option<String>,
    /// Before this time, exclusive: as `from`.
    to: Option<String>,
}

fn group_by(v: &str) -> Result<SpendGroupBy, ApiError> {
    Ok(match v {
        "key" => SpendGroupBy::Key,
        "user" => SpendGroupBy::User,
        "team" => SpendGroupBy::Team,
        "model" => SpendGroupBy::Model,
        "day" => SpendGroupBy::Day,
        other => {
            return Err(ApiError::Unprocessable(format!(
                "groupBy: '{other}' is none of key, user, team, model, day"
            )));
        }
    })
}

/// A bound as the ledger's times are written (RFC 3339, milliseconds, UTC).
fn bound(field: &str, v: Option<&str>) -> Result<Option<String>, ApiError> {
    let Some(v) = v else { return Ok(None) };
    let at = if let Ok(t) = chrono::DateTime::parse_from_rfc3339(v) {
        t.with_timezone(&chrono::Utc)
    } else if let Ok(day) = chrono::NaiveDate::parse_from_str(v, "%Y-%m-%d") {
        day.and_time(chrono::NaiveTime::MIN).and_utc()
    } else {
        return Err(ApiError::Unprocessable(format!(
            "{field}: '{v}' is neither an RFC 3339 time nor a day (YYYY-MM-DD)"
        )));
    };
    Ok(Some(elfgate_core::timefmt::rfc3339_millis(&at)))
}

/// The spend ledger's model calls summed by one grouping: all of them for an admin, the
/// caller's own for anyone else.
#[utoipa::path(
    get,
    path = "/v1/spend",
    operation_id = "spend",
    tag = "spend",
    params(SpendParams),
    responses(
        (status = 200, description = "The sums, ordered by group", body = SpendReport),
        (status = 400, description = "A malformed or missing parameter", body = ErrorBody),
        (status = 401, description = "Missing or invalid credentials (no token, a wrong one, a bad, expired or revoked key)", body = ErrorBody),
        (status = 422, description = "groupBy, from or to is not one the ledger takes (the message names it)", body = ErrorBody),
        (status = 503, description = "The store is unavailable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn spend(
    State(state): State<AppState>,
    actor: Actor,
    ApiQuery(q): ApiQuery<SpendParams>,
) -> Result<Json<SpendReport>, ApiError> {
    let by = group_by(&q.group_by)?;
    let from = bound("from", q.from.as_deref())?;
    let to = bound("to", q.to.as_deref())?;
    let user = match &actor {
        Actor::Principal(p) if !p.is_admin() => Some(p.user.clone()),
        _ => None,
    };
    let sums = state
        .store
        .spend(&SpendQuery {
            group_by: by,
            from,
            to,
            user,
        })
        .await?;
    let groups = sums
        .into_iter()
        .map(|s| SpendGroup {
            group: s.group,
            calls: s.calls,
            usage: s.usage,
            cost_usd: s.cost_usd,
        })
        .collect();
    Ok(Json(SpendReport {
        group_by: q.group_by,
        groups,
    }))
}
