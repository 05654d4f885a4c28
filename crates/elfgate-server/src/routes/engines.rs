//! /v1/engines.

use crate::error::ErrorBody;
use crate::state::AppState;
use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use elfgate_core::EngineInfo;
use serde::Serialize;
use utoipa::ToSchema;

/// The engine routes.
pub fn routes() -> Router<AppState> {
    Router::new().route("/v1/engines", get(list))
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
