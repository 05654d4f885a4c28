//! /v1/admin/keys (API keys: admins only, see `auth::admin_only`) and /v1/me (who a key is).

use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiJson, ApiPath, StrictBody};
use crate::keys::admin;
use crate::routes::sessions::detached;
use crate::service::Actor;
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, patch};
use axum::{Json, Router};
use elfgate_api::keys::{CreateKeyRequest, CreatedKey, KeyList, KeyView, UpdateKeyRequest};
use elfgate_core::Principal;

/// The key routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/admin/keys", get(list).post(create))
        .route("/v1/admin/keys/{id}", patch(update).delete(revoke))
        .route("/v1/me", get(me))
}

impl StrictBody for CreateKeyRequest {}
impl StrictBody for UpdateKeyRequest {}

/// Creates an API key: its secret is in this answer and nowhere else.
#[utoipa::path(
    post,
    path = "/v1/admin/keys",
    operation_id = "createKey",
    tag = "keys",
    request_body = CreateKeyRequest,
    responses(
        (status = 201, description = "Created; `key` is shown this once", body = CreatedKey),
        (status = 400, description = "Malformed body", body = ErrorBody),
        (status = 401, description = "Missing or invalid credentials", body = ErrorBody),
        (status = 403, description = "Not an admin", body = ErrorBody),
        (status = 422, description = "An unknown field or role, or an empty name", body = ErrorBody),
        (status = 503, description = "The store is unavailable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn create(
    State(state): State<AppState>,
    actor: Actor,
    ApiJson(req): ApiJson<CreateKeyRequest>,
) -> Result<(StatusCode, Json<CreatedKey>), ApiError> {
    let created =
        detached(async move { admin::create(&state, principal(&actor), req).await }).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// Every API key, revoked ones included, without secrets.
#[utoipa::path(
    get,
    path = "/v1/admin/keys",
    operation_id = "listKeys",
    tag = "keys",
    responses(
        (status = 200, description = "The keys", body = KeyList),
        (status = 401, description = "Missing or invalid credentials", body = ErrorBody),
        (status = 403, description = "Not an admin", body = ErrorBody),
        (status = 503, description = "The store is unavailable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn list(State(state): State<AppState>) -> Result<Json<KeyList>, ApiError> {
    Ok(Json(KeyList {
        keys: admin::list(&state).await?,
    }))
}

/// Changes an API key's name, role, scopes or expiry; every node sees the change within 2 s.
#[utoipa::path(
    patch,
    path = "/v1/admin/keys/{id}",
    operation_id = "updateKey",
    tag = "keys",
    params(("id" = String, Path, description = "The key's public id")),
    request_body = UpdateKeyRequest,
    responses(
        (status = 200, description = "Changed", body = KeyView),
        (status = 400, description = "Malformed body", body = ErrorBody),
        (status = 401, description = "Missing or invalid credentials", body = ErrorBody),
        (status = 403, description = "Not an admin", body = ErrorBody),
        (status = 404, description = "No such key, or it is revoked", body = ErrorBody),
        (status = 422, description = "An unknown field or role, or nothing to change", body = ErrorBody),
        (status = 503, description = "The store is unavailable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn update(
    State(state): State<AppState>,
    actor: Actor,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<UpdateKeyRequest>,
) -> Result<Json<KeyView>, ApiError> {
    let changed =
        detached(async move { admin::update(&state, principal(&actor), &id, req).await }).await?;
    Ok(Json(changed))
}

/// Revokes an API key: every node refuses it within 2 s.
#[utoipa::path(
    delete,
    path = "/v1/admin/keys/{id}",
    operation_id = "revokeKey",
    tag = "keys",
    params(("id" = String, Path, description = "The key's public id")),
    responses(
        (status = 204, description = "Revoked (or it already was)"),
        (status = 401, description = "Missing or invalid credentials", body = ErrorBody),
        (status = 403, description = "Not an admin", body = ErrorBody),
        (status = 404, description = "No such key", body = ErrorBody),
        (status = 503, description = "The store is unavailable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn revoke(
    State(state): State<AppState>,
    actor: Actor,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    detached(async move { admin::revoke(&state, principal(&actor), &id).await }).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The principal a command acts for, if a request's.
fn principal(actor: &Actor) -> Option<&Principal> {
    match actor {
        Actor::Principal(p) => Some(p),
        Actor::Daemon => None,
    }
}

/// Who the request's credentials are: user, team, role, key id and scopes.
#[utoipa::path(
    get,
    path = "/v1/me",
    operation_id = "me",
    tag = "keys",
    responses(
        (status = 200, description = "The caller's principal", body = Principal),
        (status = 401, description = "Missing or invalid credentials", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn me(actor: Actor) -> Result<Json<Principal>, ApiError> {
    match actor {
        Actor::Principal(p) => Ok(Json(p.as_ref().clone())),
        Actor::Daemon => Err(ApiError::Unauthorized),
    }
}
