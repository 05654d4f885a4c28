//! /v1/engines and /v1/mcp/reload.

use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;
use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use elfgate_core::EngineInfo;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// The engine routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/engines", get(list))
        .route("/v1/mcp/reload", post(reload_mcp))
}

/// Answer of GET /v1/engines.
#[derive(Debug, Serialize, ToSchema)]
struct EngineList {
    /// Every engine the daemon hosts.
    engines: Vec<EngineInfo>,
}

/// The engines the daemon hosts.
#[utoipa::path(
    get,
    path = "/v1/engines",
    operation_id = "listEngines",
    tag = "engines",
    responses(
        (status = 200, description = "Engine infos", body = EngineList),
        (status = 401, description = "Missing bearer token", body = ErrorBody),
        (status = 403, description = "Wrong bearer token", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
async fn list(State(state): State<AppState>) -> Json<EngineList> {
    Json(EngineList {
        engines: state.dispatcher.engine_infos(),
    })
}

/// Reloads MCP tools for all active sessions (not part of this build yet).
#[utoipa::path(
    post,
    path = "/v1/mcp/reload",
    operation_id = "reloadMcp",
    tag = "engines",
    responses(
        (status = 401, description = "Missing bearer token", body = ErrorBody),
        (status = 403, description = "Wrong bearer token", body = ErrorBody),
        (status = 501, description = "MCP is not part of this build", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
async fn reload_mcp() -> Result<Json<Value>, ApiError> {
    Err(ApiError::NotImplemented(
        "MCP support is not part of this build yet".into(),
    ))
}
