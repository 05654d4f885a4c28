//! /v1/workflows: workflow definitions, created, listed, read (any version), replaced (a new
//! version) and deleted; each checked before it is stored (see docs/workflows.md).

use super::sessions::detached;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiJson, ApiPath, ApiQuery, StrictBody};
use crate::service::{Actor, WorkflowAct, authorize_workflow, check_workflow_act};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use elfgate_api::CreateSessionResponse;
use elfgate_store::{StoredWorkflow, WorkflowWrite};
use elfgate_workflow::WorkflowDefinition;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::{IntoParams, ToSchema};

/// The routes of this module.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/workflows", get(list).post(create))
        .route("/v1/workflows/{name}", get(one).put(replace).delete(remove))
        .route("/v1/workflows/{name}/runs", post(start_run))
        .route("/v1/workflows/{name}/runs/{runId}/resume", post(resume_run))
}

impl StrictBody for WorkflowDefinition {}

/// A stored version of a workflow.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WorkflowView {
    /// Its name.
    name: String,
    /// This version: 1, then one more for each replacement.
    version: u32,
    /// When this version was stored (RFC 3339).
    created_at: String,
    /// The definition.
    definition: WorkflowDefinition,
}

impl TryFrom<StoredWorkflow> for WorkflowView {
    type Error = ApiError;
    fn try_from(w: StoredWorkflow) -> Result<Self, ApiError> {
        let definition = serde_json::from_value(w.definition).map_err(|e| {
            ApiError::Internal(format!("stored workflow '{}' v{}: {e}", w.name, w.version))
        })?;
        Ok(WorkflowView {
            name: w.name,
            version: w.version,
            created_at: elfgate_core::timefmt::rfc3339_millis(&w.created_at),
            definition,
        })
    }
}

/// The workflows.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct WorkflowList {
    /// The latest version of each, by name.
    workflows: Vec<WorkflowView>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct VersionQuery {
    /// A version (default: the latest).
    version: Option<u32>,
}

/// Creates a workflow (version 1, or one past the versions of a deleted one of that name).
#[utoipa::path(
    post,
    path = "/v1/workflows",
    operation_id = "createWorkflow",
    tag = "workflows",
    request_body = WorkflowDefinition,
    responses(
        (status = 201, description = "Stored", body = WorkflowView),
        (status = 400, description = "Malformed body", body = ErrorBody),
        (status = 401, description = "Missing or invalid credentials (no token, a wrong one, a bad, expired or revoked key)", body = ErrorBody),
        (status = 403, description = "Not allowed to the key (a viewer's change, a key's scope, an admin-only route)", body = ErrorBody),
        (status = 409, description = "A workflow of that name exists (PUT replaces it)", body = ErrorBody),
        (status = 422, description = "A field that is wrong, named with its step (unknown tools, references to later or unknown steps, bad templates or cron expressions)", body = ErrorBody),
        (status = 503, description = "The store is unavailable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn create(
    State(state): State<AppState>,
    actor: Actor,
    ApiJson(def): ApiJson<WorkflowDefinition>,
) -> Result<(StatusCode, Json<WorkflowView>), ApiError> {
    check_workflow_act(&actor, WorkflowAct::Manage)?;
    crate::workflow_runs::check(&state, &def).await?;
    let name = def.name.clone();
    let creator = match &actor {
        Actor::Principal(p) => p.ownership(elfgate_core::Visibility::Team),
        Actor::Daemon => elfgate_core::Ownership::root(),
    };
    let stored = put(state, def, WorkflowWrite::Create, creator)
        .await?
        .ok_or_else(|| {
            ApiError::Conflict(format!(
                "workflow '{name}' exists; PUT /v1/workflows/{name} stores a new version"
            ))
        })?;
    Ok((StatusCode::CREATED, Json(stored.try_into()?)))
}

/// Replaces a workflow: its definition is stored as a new version (runs keep theirs).
#[utoipa::path(
    put,
    path = "/v1/workflows/{name}",
    operation_id = "replaceWorkflow",
    tag = "workflows",
    params(("name" = String, Path, description = "The workflow's name")),
    request_body = WorkflowDefinition,
    responses(
        (status = 200, description = "Stored as a new version", body = WorkflowView),
        (status = 400, description = "Malformed body", body = ErrorBody),
        (status = 401, description = "Missing or invalid credentials (no token, a wrong one, a bad, expired or revoked key)", body = ErrorBody),
        (status = 403, description = "Not allowed to the key (a viewer's change, a key's scope, an admin-only route)", body = ErrorBody),
        (status = 404, description = "No such workflow", body = ErrorBody),
        (status = 409, description = "Another node stored a version at the same moment; try again", body = ErrorBody),
        (status = 422, description = "A field that is wrong (the body's name must be the path's)", body = ErrorBody),
        (status = 503, description = "The store is unavailable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn replace(
    State(state): State<AppState>,
    actor: Actor,
    ApiPath(name): ApiPath<String>,
    ApiJson(def): ApiJson<WorkflowDefinition>,
) -> Result<Json<WorkflowView>, ApiError> {
    if def.name != name {
        return Err(ApiError::Unprocessable(format!(
            "name: the body names '{}', the path '{name}' (a workflow keeps its name)",
            def.name
        )));
    }
    let current = live_workflow(&state, &actor, &name, WorkflowAct::Manage).await?;
    crate::workflow_runs::check(&state, &def).await?;
    let stored = put(state, def, WorkflowWrite::Replace, current.ownership)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("unknown workflow '{name}'")))?;
    Ok(Json(stored.try_into()?))
}

/// Stores a checked definition; two writers of one version at once: the second is a conflict.
async fn put(
    state: AppState,
    def: WorkflowDefinition,
    write: WorkflowWrite,
    creator: elfgate_core::Ownership,
) -> Result<Option<StoredWorkflow>, ApiError> {
    let json = serde_json::to_value(&def)
        .map_err(|e| ApiError::Internal(format!("workflow definition: {e}")))?;
    detached(async move {
        let stored = match state
            .store
            .put_workflow(&def.name, &json, write, &creator)
            .await
        {
            Err(elfgate_store::StoreError::Constraint(_)) => {
                return Err(ApiError::Conflict(format!(
                    "workflow '{}' was changed at the same moment; read it and try again",
                    def.name
                )));
            }
            other => other?,
        };
        crate::workflow_runs::refresh_triggers(&state).await;
        Ok(stored)
    })
    .await
}

/// Lists the workflows, each at its latest version.
#[utoipa::path(
    get,
    path = "/v1/workflows",
    operation_id = "listWorkflows",
    tag = "workflows",
    responses(
        (status = 200, description = "The workflows, by name", body = WorkflowList),
        (status = 401, description = "Missing or invalid credentials (no token, a wrong one, a bad, expired or revoked key)", body = ErrorBody),
        (status = 403, description = "Not allowed to the key (a viewer's change, a key's scope, an admin-only route)", body = ErrorBody),
        (status = 503, description = "The store is unavailable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn list(
    State(state): State<AppState>,
    actor: Actor,
) -> Result<Json<WorkflowList>, ApiError> {
    // Not paged: every workflow is read, and those of another team left out.
    let workflows = state
        .store
        .list_workflows()
        .await?
        .into_iter()
        .filter(|w| {
            authorize_workflow(&actor, &w.ownership, WorkflowAct::Read, || {
                ApiError::NotFound(String::new())
            })
            .is_ok()
        })
        .map(WorkflowView::try_from)
        .collect::<Result<_, _>>()?;
    Ok(Json(WorkflowList { workflows }))
}

/// One workflow: its latest version, or the one asked for.
#[utoipa::path(
    get,
    path = "/v1/workflows/{name}",
    operation_id = "getWorkflow",
    tag = "workflows",
    params(("name" = String, Path, description = "The workflow's name"), VersionQuery),
    responses(
        (status = 200, description = "The workflow", body = WorkflowView),
        (status = 400, description = "Bad query", body = ErrorBody),
        (status = 401, description = "Missing or invalid credentials (no token, a wrong one, a bad, expired or revoked key)", body = ErrorBody),
        (status = 403, description = "Not allowed to the key (a viewer's change, a key's scope, an admin-only route)", body = ErrorBody),
        (status = 404, description = "No such workflow or version (a deleted workflow has none)", body = ErrorBody),
        (status = 503, description = "The store is unavailable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn one(
    State(state): State<AppState>,
    actor: Actor,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<VersionQuery>,
) -> Result<Json<WorkflowView>, ApiError> {
    // Another team's workflow is answered as a missing one, whatever the version asked.
    live_workflow(&state, &actor, &name, WorkflowAct::Read).await?;
    let found = state
        .store
        .get_workflow(&name, q.version)
        .await?
        .filter(|w| w.deleted_at.is_none());
    match (found, q.version) {
        (Some(w), _) => Ok(Json(w.try_into()?)),
        (None, Some(v)) => Err(ApiError::NotFound(format!(
            "workflow '{name}' has no version {v}"
        ))),
        (None, None) => Err(ApiError::NotFound(format!("unknown workflow '{name}'"))),
    }
}

/// Deletes a workflow (its versions are kept for the runs that name them; a new workflow of that
/// name goes on from its last version).
#[utoipa::path(
    delete,
    path = "/v1/workflows/{name}",
    operation_id = "deleteWorkflow",
    tag = "workflows",
    params(("name" = String, Path, description = "The workflow's name")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, description = "Missing or invalid credentials (no token, a wrong one, a bad, expired or revoked key)", body = ErrorBody),
        (status = 403, description = "Not allowed to the key (a viewer's change, a key's scope, an admin-only route)", body = ErrorBody),
        (status = 404, description = "No such workflow", body = ErrorBody),
        (status = 503, description = "The store is unavailable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn remove(
    State(state): State<AppState>,
    actor: Actor,
    ApiPath(name): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    live_workflow(&state, &actor, &name, WorkflowAct::Manage).await?;
    let gone = detached({
        let name = name.clone();
        async move {
            let gone = state.store.delete_workflow(&name).await?;
            crate::workflow_runs::refresh_triggers(&state).await;
            Ok(gone)
        }
    })
    .await?;
    if gone {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!("unknown workflow '{name}'")))
    }
}

/// The latest version of workflow `name`, when it is not deleted and `actor` may do `act` with
/// it: 404 when there is none or it is another team's, 403 past the actor's role or scopes.
async fn live_workflow(
    state: &AppState,
    actor: &Actor,
    name: &str,
    act: WorkflowAct,
) -> Result<StoredWorkflow, ApiError> {
    let unknown = || ApiError::NotFound(format!("unknown workflow '{name}'"));
    let stored = state
        .store
        .get_workflow(name, None)
        .await?
        .filter(|w| w.deleted_at.is_none())
        .ok_or_else(unknown)?;
    authorize_workflow(actor, &stored.ownership, act, unknown)?;
    Ok(stored)
}

/// Body of a workflow's run.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct WorkflowRunRequest {
    /// The inputs, by name (those with a default may be left out).
    #[serde(default)]
    #[schema(value_type = Object)]
    inputs: Map<String, Value>,
}

impl StrictBody for WorkflowRunRequest {}

/// Starts a run of a workflow's latest version: a session of the `workflow` engine whose steps
/// run in order, followed like any session (its events, messages, interrupt and delete).
#[utoipa::path(
    post,
    path = "/v1/workflows/{name}/runs",
    operation_id = "startWorkflowRun",
    tag = "workflows",
    params(("name" = String, Path, description = "The workflow's name")),
    request_body = WorkflowRunRequest,
    responses(
        (status = 201, description = "The run's session started", body = CreateSessionResponse),
        (status = 400, description = "Malformed body", body = ErrorBody),
        (status = 401, description = "Missing or invalid credentials (no token, a wrong one, a bad, expired or revoked key)", body = ErrorBody),
        (status = 403, description = "Not allowed to the key (a viewer's change, a key's scope, an admin-only route)", body = ErrorBody),
        (status = 404, description = "No such workflow", body = ErrorBody),
        (status = 422, description = "An input that is unknown, missing or of another type (named), a projectPath that is not a directory here, or a step of a kind that does not run yet", body = ErrorBody),
        (status = 503, description = "Shutting down, or the store is unavailable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn start_run(
    State(state): State<AppState>,
    actor: Actor,
    ApiPath(name): ApiPath<String>,
    ApiJson(body): ApiJson<WorkflowRunRequest>,
) -> Result<(StatusCode, Json<CreateSessionResponse>), ApiError> {
    let stored = live_workflow(&state, &actor, &name, WorkflowAct::Run).await?;
    let started = detached(async move {
        crate::workflow_runs::start(
            &state,
            stored,
            body.inputs,
            crate::workflow_runs::Trigger::Manual(actor),
        )
        .await
    })
    .await?;
    Ok((StatusCode::CREATED, Json(started)))
}

/// Resumes a run that failed or was interrupted: a new run of the same session that starts at
/// the step the run ended in, with the earlier steps' outputs as they were (docs/workflows.md,
/// "Resuming a run").
#[utoipa::path(
    post,
    path = "/v1/workflows/{name}/runs/{runId}/resume",
    operation_id = "resumeWorkflowRun",
    tag = "workflows",
    params(
        ("name" = String, Path, description = "The workflow's name"),
        ("runId" = elfgate_core::RunId, Path, description = "A run of it that failed or was interrupted"),
    ),
    responses(
        (status = 201, description = "The resumed run started", body = CreateSessionResponse),
        (status = 400, description = "Malformed run id", body = ErrorBody),
        (status = 401, description = "Missing or invalid credentials (no token, a wrong one, a bad, expired or revoked key)", body = ErrorBody),
        (status = 403, description = "Not allowed to the key (a viewer's change, a key's scope, an admin-only route)", body = ErrorBody),
        (status = 404, description = "No such run of this workflow", body = ErrorBody),
        (status = 409, description = "The run has not ended, ended well, or every step ended; or a run of the session is going on", body = ErrorBody),
        (status = 503, description = "Shutting down, or the store is unavailable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn resume_run(
    State(state): State<AppState>,
    actor: Actor,
    ApiPath((name, run_id)): ApiPath<(String, String)>,
) -> Result<(StatusCode, Json<CreateSessionResponse>), ApiError> {
    let run_id: elfgate_core::RunId = run_id
        .parse()
        .map_err(|_| ApiError::BadRequest(format!("'{run_id}' is not a run id")))?;
    let resumed =
        detached(async move { crate::workflow_runs::resume(&state, &actor, &name, run_id).await })
            .await?;
    Ok((StatusCode::CREATED, Json(resumed)))
}
