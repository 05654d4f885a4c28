//! /v1/mcp/servers and /v1/mcp/reload: the MCP servers and a reload of their configuration.

use crate::config::Config;
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;
use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use elfgate_mcp::{ReloadReport, ServerStatus};
use serde::Serialize;
use utoipa::ToSchema;

/// The MCP routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/mcp/servers", get(servers))
        .route("/v1/mcp/reload", post(reload))
}

/// Answer of GET /v1/mcp/servers.
#[derive(Debug, Serialize, ToSchema)]
pub struct ServerList {
    /// The configured servers (scope global), then the other connections in use: sessions'
    /// own servers, and configurations a reload replaced that a running session still uses.
    pub servers: Vec<ServerStatus>,
}

/// Answer of POST /v1/mcp/reload.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReloadAnswer {
    /// What changed, by server name.
    #[serde(flatten)]
    pub report: ReloadReport,
    /// Sessions with a run going on: each sees the new tool set from its next iteration.
    pub active_sessions: usize,
    /// The servers after the reload.
    pub servers: Vec<ServerStatus>,
}

/// The MCP servers with their status, transport, tool count and the sessions using them.
#[utoipa::path(
    get,
    path = "/v1/mcp/servers",
    operation_id = "listMcpServers",
    tag = "mcp",
    responses(
        (status = 200, description = "The servers", body = ServerList),
        (status = 401, description = "Missing or invalid credentials (no token, a wrong one, a bad, expired or revoked key)", body = ErrorBody),
        (status = 403, description = "Not allowed to the key (a viewer's change, a key's scope, an admin-only route)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn servers(State(state): State<AppState>) -> Json<ServerList> {
    Json(ServerList {
        servers: state.mcp.statuses(),
    })
}

/// Re-reads the `[mcp]` section of the configuration (the file the daemon was started with and
/// the environment), starts using it: servers that changed or went away are stopped once no run
/// uses them, new ones start at first use, unchanged ones are left alone. Running sessions see
/// the new tool set from their next iteration; the current one is not interrupted.
#[utoipa::path(
    post,
    path = "/v1/mcp/reload",
    operation_id = "reloadMcp",
    tag = "mcp",
    responses(
        (status = 200, description = "What changed", body = ReloadAnswer),
        (status = 401, description = "Missing or invalid credentials (no token, a wrong one, a bad, expired or revoked key)", body = ErrorBody),
        (status = 403, description = "Not allowed to the key (a viewer's change, a key's scope, an admin-only route)", body = ErrorBody),
        (status = 422, description = "The configuration no longer loads; nothing changed", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn reload(State(state): State<AppState>) -> Result<Json<ReloadAnswer>, ApiError> {
    let config = Config::load(state.config.source.as_deref())
        .map_err(|e| ApiError::Unprocessable(format!("{e}; nothing was reloaded")))?;
    let report = state.mcp.reload(config.mcp).await;
    let active_sessions = state.dispatcher.reload_mcp_for_all_active().await;
    Ok(Json(ReloadAnswer {
        report,
        active_sessions,
        servers: state.mcp.statuses(),
    }))
}
