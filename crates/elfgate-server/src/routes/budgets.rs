//! /v1/admin/budgets: spending limits on keys, users and teams (admins only, see
//! `auth::admin_only`).

use crate::budgets::admin;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiJson, ApiPath, StrictBody};
use crate::routes::sessions::detached;
use crate::service::{Actor, parse_session_id};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use elfgate_api::SendMessageResponse;
use elfgate_api::budgets::{
    BudgetList, BudgetView, CreateBudgetRequest, ResumeRequest, UpdateBudgetRequest,
};
use elfgate_core::SessionId;

/// The budget routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/admin/budgets", get(list).post(create))
        .route(
            "/v1/admin/budgets/{id}",
            get(show).patch(update).delete(delete),
        )
        .route("/v1/sessions/{id}/resume", post(resume))
}

impl StrictBody for CreateBudgetRequest {}
impl StrictBody for UpdateBudgetRequest {}
impl StrictBody for ResumeRequest {}

/// Creates a budget.
#[utoipa::path(
    post,
    path = "/v1/admin/budgets",
    operation_id = "createBudget",
    tag = "budgets",
    request_body = CreateBudgetRequest,
    responses(
        (status = 201, description = "Created", body = BudgetView),
        (status = 400, description = "Malformed body", body = ErrorBody),
        (status = 401, description = "Missing or invalid credentials", body = ErrorBody),
        (status = 403, description = "Not an admin", body = ErrorBody),
        (status = 422, description = "An unknown field, scope or period, an amount out of range, or a key that does not exist", body = ErrorBody),
        (status = 503, description = "The store is unavailable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn create(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<CreateBudgetRequest>,
) -> Result<(StatusCode, Json<BudgetView>), ApiError> {
    let created = detached(async move { admin::create(&state, req).await }).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// Every budget, those of the configuration included, with its spend in its current period.
#[utoipa::path(
    get,
    path = "/v1/admin/budgets",
    operation_id = "listBudgets",
    tag = "budgets",
    responses(
        (status = 200, description = "The budgets", body = BudgetList),
        (status = 401, description = "Missing or invalid credentials", body = ErrorBody),
        (status = 403, description = "Not an admin", body = ErrorBody),
        (status = 503, description = "The store is unavailable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn list(State(state): State<AppState>) -> Result<Json<BudgetList>, ApiError> {
    Ok(Json(BudgetList {
        budgets: admin::list(&state).await?,
    }))
}

/// One budget with its spend in its current period.
#[utoipa::path(
    get,
    path = "/v1/admin/budgets/{id}",
    operation_id = "getBudget",
    tag = "budgets",
    params(("id" = String, Path, description = "The budget's id")),
    responses(
        (status = 200, description = "The budget", body = BudgetView),
        (status = 401, description = "Missing or invalid credentials", body = ErrorBody),
        (status = 403, description = "Not an admin", body = ErrorBody),
        (status = 404, description = "No such budget", body = ErrorBody),
        (status = 503, description = "The store is unavailable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn show(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<BudgetView>, ApiError> {
    Ok(Json(admin::get(&state, &id).await?))
}

/// Changes a budget's limits or period, or starts its spend again from zero: a paused session
/// may then be resumed.
#[utoipa::path(
    patch,
    path = "/v1/admin/budgets/{id}",
    operation_id = "updateBudget",
    tag = "budgets",
    params(("id" = String, Path, description = "The budget's id")),
    request_body = UpdateBudgetRequest,
    responses(
        (status = 200, description = "Changed", body = BudgetView),
        (status = 400, description = "Malformed body", body = ErrorBody),
        (status = 401, description = "Missing or invalid credentials", body = ErrorBody),
        (status = 403, description = "Not an admin", body = ErrorBody),
        (status = 404, description = "No such budget", body = ErrorBody),
        (status = 409, description = "A budget of the configuration: change it there", body = ErrorBody),
        (status = 422, description = "An unknown field or period, an amount out of range, or nothing to change", body = ErrorBody),
        (status = 503, description = "The store is unavailable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn update(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<UpdateBudgetRequest>,
) -> Result<Json<BudgetView>, ApiError> {
    let changed = detached(async move { admin::update(&state, &id, req).await }).await?;
    Ok(Json(changed))
}

/// Deletes a budget.
#[utoipa::path(
    delete,
    path = "/v1/admin/budgets/{id}",
    operation_id = "deleteBudget",
    tag = "budgets",
    params(("id" = String, Path, description = "The budget's id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, description = "Missing or invalid credentials", body = ErrorBody),
        (status = 403, description = "Not an admin", body = ErrorBody),
        (status = 404, description = "No such budget", body = ErrorBody),
        (status = 409, description = "A budget of the configuration: remove it there", body = ErrorBody),
        (status = 503, description = "The store is unavailable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn delete(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    detached(async move { admin::delete(&state, &id).await }).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Resumes a session paused at a spent budget (`budget_paused`), once the budget has room
/// again: a new run of the session, prompted with `prompt` or a fixed one.
#[utoipa::path(
    post,
    path = "/v1/sessions/{id}/resume",
    operation_id = "resumeSession",
    tag = "sessions",
    params(("id" = SessionId, Path, description = "Session id")),
    request_body(content = ResumeRequest, description = "Optional (an empty body resumes with the fixed prompt)"),
    responses(
        (status = 202, description = "The resumed run started", body = SendMessageResponse),
        (status = 400, description = "Malformed body", body = ErrorBody),
        (status = 401, description = "Missing or invalid credentials (no token, a wrong one, a bad, expired or revoked key)", body = ErrorBody),
        (status = 403, description = "Not allowed to the key (a viewer's change, a key's scope, an admin-only route)", body = ErrorBody),
        (status = 404, description = "Unknown session", body = ErrorBody),
        (status = 409, description = "Not paused at a budget, or a budget that paused it still has no room (named)", body = ErrorBody),
        (status = 422, description = "A field the body does not have, or engineConfig outside its bounds", body = ErrorBody),
        (status = 503, description = "Shutting down", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn resume(
    State(state): State<AppState>,
    actor: Actor,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<ResumeRequest>,
) -> Result<(StatusCode, Json<SendMessageResponse>), ApiError> {
    let id = parse_session_id(&id)?;
    let sent =
        detached(async move { crate::budgets::resume::resume(&state, &actor, id, req).await })
            .await?;
    Ok((StatusCode::ACCEPTED, Json(sent)))
}
