//! Liveness, readiness, metrics and the OpenAPI document.

use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

/// The operational routes (no auth).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
}

/// The operational routes behind auth.
pub fn protected_routes() -> Router<AppState> {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
}

async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    if state.is_shutting_down() {
        return Err(ApiError::Unavailable("the daemon is shutting down".into()));
    }
    state
        .store
        .ping()
        .await
        .map_err(|e| ApiError::Unavailable(format!("database not reachable: {e}")))?;
    Ok(Json(json!({"status": "ready"})))
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state
            .metrics
            .render_prometheus(state.dispatcher.active().len()),
    )
}

async fn openapi() -> Json<Value> {
    Json(crate::openapi::document())
}
