//! /v1/admin/audit: the access audit (admins only, see `auth::admin_only`).

use crate::error::{ApiError, ErrorBody};
use crate::extract::ApiQuery;
use crate::state::AppState;
use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use elfgate_api::keys::{AccessAuditEntry, AccessAuditList};
use serde::Deserialize;
use utoipa::IntoParams;

/// The audit's route.
pub fn routes() -> Router<AppState> {
    Router::new().route("/v1/admin/audit", get(audit))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct AuditQuery {
    /// At most this many (default 100, 1..=1000).
    limit: Option<u32>,
    /// Only entries with an id below this one (the last id of the previous page).
    before: Option<i64>,
}

/// Key creations, changes and revocations, and refused requests, newest first.
#[utoipa::path(
    get,
    path = "/v1/admin/audit",
    operation_id = "accessAudit",
    tag = "keys",
    params(AuditQuery),
    responses(
        (status = 200, description = "The entries, newest first", body = AccessAuditList),
        (status = 400, description = "A malformed parameter", body = ErrorBody),
        (status = 401, description = "Missing or invalid credentials", body = ErrorBody),
        (status = 403, description = "Not an admin", body = ErrorBody),
        (status = 422, description = "limit outside 1..=1000", body = ErrorBody),
        (status = 503, description = "The store is unavailable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn audit(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> Result<Json<AccessAuditList>, ApiError> {
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::Unprocessable(format!(
            "limit: {limit} is outside 1..=1000"
        )));
    }
    let entries = state
        .store
        .access_events(q.before, limit)
        .await?
        .into_iter()
        .map(|stored| {
            let e = stored.event;
            AccessAuditEntry {
                id: stored.id,
                at: e.at,
                kind: e.kind,
                actor: e.actor,
                key_id: e.key_id,
                route: e.route,
                status: e.status,
                reason: e.reason,
                detail: e.detail,
            }
        })
        .collect();
    Ok(Json(AccessAuditList { entries }))
}
