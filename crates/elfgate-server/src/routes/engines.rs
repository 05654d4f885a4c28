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
    /// How the processes started for agents are confined.
    sandbox: SandboxInfo,
}

/// The sandbox in effect (docs/security.md).
#[derive(Debug, Serialize, ToSchema)]
struct SandboxInfo {
    /// `required`, `best_effort` or `off`.
    mode: String,
    /// `bubblewrap`, `landlock`, or `none`.
    mechanism: String,
    /// Why there is no mechanism.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

/// The engines the daemon hosts.
#[utoipa::path(
    get,
    path = "/v1/engines",
    operation_id = "listEngines",
    tag = "engines",
    responses(
        (status = 200, description = "Engine infos", body = EngineList),
        (status = 401, description = "Missing or invalid credentials (no token, a wrong one, a bad, expired or revoked key)", body = ErrorBody),
        (status = 403, description = "Not allowed to the key (a viewer's change, a key's scope, an admin-only route)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
async fn list(State(state): State<AppState>) -> Json<EngineList> {
    let facts = state.tinyelf.sandbox_facts();
    let text = |k: &str| facts.get(k).and_then(|v| v.as_str()).map(str::to_string);
    Json(EngineList {
        engines: state.dispatcher.engine_infos(),
        sandbox: SandboxInfo {
            mode: text("mode").unwrap_or_default(),
            mechanism: text("mechanism").unwrap_or_default(),
            reason: text("reason"),
        },
    })
}
