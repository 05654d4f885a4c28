//! /v1/skills: the skills tinyelf sessions can load (see docs/context.md).

use crate::error::{ApiError, ErrorBody};
use crate::extract::ApiQuery;
use crate::state::AppState;
use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use elfgate_engines::tinyelf::SkillSet;
use serde::Deserialize;
use utoipa::IntoParams;

/// The routes of this module.
pub fn routes() -> Router<AppState> {
    Router::new().route("/v1/skills", get(list))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub(crate) struct SkillsQuery {
    /// A project directory: its `.elfgate/skills` are listed too.
    project_path: Option<String>,
}

/// Lists the skills of the configured folders (and of a project), with the folders that are not
/// usable skills and why.
#[utoipa::path(
    get,
    path = "/v1/skills",
    operation_id = "listSkills",
    tag = "engines",
    params(SkillsQuery),
    responses(
        (status = 200, description = "Skills by name, and the folders left out", body = SkillSet),
        (status = 400, description = "Bad query", body = ErrorBody),
        (status = 401, description = "Missing or invalid credentials (no token, a wrong one, a bad, expired or revoked key)", body = ErrorBody),
        (status = 403, description = "Not allowed to the key (a viewer's change, a key's scope, an admin-only route)", body = ErrorBody),
        (status = 422, description = "projectPath is not a directory", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn list(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<SkillsQuery>,
) -> Result<Json<SkillSet>, ApiError> {
    let project = match q.project_path.filter(|p| !p.is_empty()) {
        Some(p) => match std::fs::canonicalize(&p) {
            Ok(dir) if dir.is_dir() => Some(dir),
            Ok(_) => {
                return Err(ApiError::Unprocessable(format!(
                    "projectPath: {p} is not a directory"
                )));
            }
            Err(e) => return Err(ApiError::Unprocessable(format!("projectPath: {p}: {e}"))),
        },
        None => None,
    };
    Ok(Json(state.tinyelf.skills(project.as_deref()).await))
}
