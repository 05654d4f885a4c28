//! Liveness, readiness and metrics. (The OpenAPI document's route lives with the document, in
//! `openapi.rs`, so that the document depends on the routes and not the other way round.)

use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use utoipa::ToSchema;

/// The operational routes (no auth).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
}

/// The operational routes behind auth.
pub fn protected_routes() -> Router<AppState> {
    Router::new().route("/metrics", get(metrics))
}

/// Answer of /healthz and /readyz.
#[derive(Debug, Serialize, ToSchema)]
struct HealthStatus {
    /// ok (healthz) or ready (readyz).
    status: &'static str,
}

/// Liveness: the process serves HTTP.
#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "healthz",
    tag = "operations",
    responses((status = 200, description = "Alive", body = HealthStatus))
)]
async fn healthz() -> Json<HealthStatus> {
    Json(HealthStatus { status: "ok" })
}

/// Readiness: not shutting down, the database is reachable and, for a node of a fleet, the
/// fleet's bus (NATS) is connected: without it the node cannot reach the sessions other nodes
/// run, nor they its.
#[utoipa::path(
    get,
    path = "/readyz",
    operation_id = "readyz",
    tag = "operations",
    responses(
        (status = 200, description = "Ready", body = HealthStatus),
        (status = 503, description = "Shutting down, database not reachable, or a fleet node off the bus", body = ErrorBody),
    )
)]
async fn readyz(State(state): State<AppState>) -> Result<Json<HealthStatus>, ApiError> {
    if state.is_shutting_down() {
        return Err(ApiError::shutting_down());
    }
    state
        .store
        .ping()
        .await
        .map_err(|e| ApiError::Unavailable(format!("database not reachable: {e}")))?;
    if let Some(fleet) = &state.fleet
        && !fleet.nats_connected()
    {
        return Err(ApiError::Unavailable(
            "the fleet's bus (NATS) is not connected (the log says why)".into(),
        ));
    }
    Ok(Json(HealthStatus { status: "ready" }))
}

/// Prometheus metrics in the text exposition format.
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    tag = "operations",
    responses(
        (status = 200, description = "Prometheus text format 0.0.4", content_type = "text/plain", body = String),
        (status = 401, description = "Missing or invalid credentials (no token, a wrong one, a bad, expired or revoked key)", body = ErrorBody),
        (status = 403, description = "Not allowed to the key (a viewer's change, a key's scope, an admin-only route)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let mut text = state
        .metrics
        .render_prometheus(state.dispatcher.active().len());
    if let Some(fleet) = &state.fleet {
        text.push_str(&fleet.render_prometheus());
    }
    text.push_str(&state.access_audit.render_prometheus());
    text.push_str(&crate::telemetry::render_prometheus());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}
