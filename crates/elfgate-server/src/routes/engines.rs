//! /v1/engines and /v1/mcp/reload.

use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use elfgate_core::EngineInfo;
use serde_json::{Value, json};

/// The engine routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/engines", get(list))
        .route("/v1/mcp/reload", post(reload_mcp))
}

async fn list(State(state): State<AppState>) -> Json<Value> {
    let engines: Vec<EngineInfo> = state.dispatcher.engine_infos();
    Json(json!({ "engines": engines }))
}

async fn reload_mcp() -> Result<Json<Value>, ApiError> {
    Err(ApiError::NotImplemented(
        "MCP support is not part of this build yet".into(),
    ))
}
