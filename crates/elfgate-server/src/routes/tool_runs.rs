//! POST /v1/sessions/{id}/tools/{name}: one tool run in a session outside a turn (see
//! docs/context.md, "Tool runs outside turns").

use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiJson, ApiPath, StrictBody};
use crate::service::{self, Actor, parse_session_id};
use crate::state::AppState;
use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use elfgate_core::{RunId, ToolCallStatus};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The routes of this module.
pub fn routes() -> Router<AppState> {
    Router::new().route("/v1/sessions/{id}/tools/{name}", post(run_tool))
}

/// Body of a tool run.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolRunRequest {
    /// The tool's arguments, as the model would give them (default `{}`).
    #[serde(default = "empty_object")]
    #[schema(value_type = Object)]
    arguments: serde_json::Value,
}

impl StrictBody for ToolRunRequest {}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}

/// What a tool run answered.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ToolRunResponse {
    /// The run that ran it.
    run_id: RunId,
    /// The id of the tool_use recorded in the history.
    tool_use_id: String,
    /// How the call ended (denied: a gate refused it; the content says why).
    status: ToolCallStatus,
    /// The tool's result, as a model would have seen it.
    content: String,
    /// Whether the result is an error.
    is_error: bool,
}

/// Runs one registered tool in the session's project without a model call, through the same
/// security pipeline as the model's calls; a permission prompt is answered through the API while
/// this request waits. The call and its result are recorded in the session's history.
#[utoipa::path(
    post,
    path = "/v1/sessions/{id}/tools/{name}",
    operation_id = "runTool",
    tag = "sessions",
    params(
        ("id" = String, Path, description = "Session id"),
        ("name" = String, Path, description = "A registered tool's name"),
    ),
    request_body = ToolRunRequest,
    responses(
        (status = 200, description = "The tool ran (or a gate refused it: see status)", body = ToolRunResponse),
        (status = 400, description = "Malformed body", body = ErrorBody),
        (status = 401, description = "Missing or invalid credentials (no token, a wrong one, a bad, expired or revoked key)", body = ErrorBody),
        (status = 403, description = "Not allowed to the key (a viewer's change, a key's scope, an admin-only route)", body = ErrorBody),
        (status = 404, description = "Unknown session or tool", body = ErrorBody),
        (status = 409, description = "A run is going on in the session", body = ErrorBody),
        (status = 422, description = "Arguments that do not fit the tool's schema, a tool the session's enabledTools leave out, a field the body does not have, or not a tinyelf session", body = ErrorBody),
        (status = 503, description = "Shutting down", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn run_tool(
    State(state): State<AppState>,
    actor: Actor,
    ApiPath((id, name)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<ToolRunRequest>,
) -> Result<Json<ToolRunResponse>, ApiError> {
    let session_id = parse_session_id(&id)?;
    let (run_id, a) = service::run_tool(&state, &actor, session_id, name, body.arguments).await?;
    Ok(Json(ToolRunResponse {
        run_id,
        tool_use_id: a.tool_use_id,
        status: a.status,
        content: a.content,
        is_error: a.is_error,
    }))
}
