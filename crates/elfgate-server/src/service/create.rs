//! Creating a session: its checks, the session stored with its first run and prompt in one
//! commit, and the run dispatched.

use super::access::check_may_start;
use super::checks::{
    apply_agent_profile, check_attachments, check_engine, check_engine_available,
    check_native_search, check_project_path, check_serving, check_settings,
};
use super::command::{Actor, Origin};
use super::run_context::{Prompt, build_ctx, new_run, submit_prompt};
use super::scopes::{RunSettings, RunTarget, check_run};
use super::secrets::SecretScan;
use super::spec::SessionSpec;
use crate::error::ApiError;
use crate::state::AppState;
use chrono::Utc;
use elfgate_api::CreateSessionResponse;
use elfgate_core::{EngineType, EventPayload, OnBusy, Ownership, RunStatus, Session, SessionId};

/// The state's checks of a new session, in order: the engine is in this build, the prompt and
/// system prompt carry no secret, the project can be used, the agent profile exists (and is
/// applied), the settings fit the daemon, only a workflow starts a `workflow` session, the key's
/// scopes allow what the session resolves to, the engine takes the run, the attachments and
/// native search fit the provider.
fn check_session(
    state: &AppState,
    actor: &Actor,
    spec: &mut SessionSpec,
    origin: &Origin,
) -> Result<(), ApiError> {
    check_engine_available(state, spec.engine)?;
    SecretScan::new(state).check_prompt(&spec.prompt, spec.run.system_prompt.as_deref())?;
    check_project_path(state, spec.project_path.as_deref(), origin.project_field())?;
    apply_agent_profile(state, spec)?;
    check_settings(state, spec.engine, &spec.run)?;
    // Only the daemon names the workflow a `workflow` session runs.
    spec.run.engine_config.workflow = match origin {
        Origin::Workflow(workflow) => Some(workflow.clone()),
        Origin::Api | Origin::Gateway(_) if spec.engine == EngineType::Workflow => {
            return Err(ApiError::Unprocessable(
                "engine: a workflow's run is started with POST /v1/workflows/{name}/runs".into(),
            ));
        }
        Origin::Api | Origin::Gateway(_) => None,
    };
    let settings = RunSettings {
        provider_id: spec.run.provider_id.as_deref(),
        model: spec.run.model.as_deref(),
        project_path: spec.project_path.as_deref(),
        permission_mode: spec.run.permission_mode,
        engine_config: &spec.run.engine_config,
    };
    check_run(
        actor,
        &RunTarget::resolve(state, spec.engine, settings, origin.project_field()),
    )?;
    let provider_id = spec.run.provider_id.as_deref();
    check_engine(
        state,
        spec.engine,
        spec.cli_backend,
        &spec.run.engine_config,
        provider_id,
    )?;
    check_attachments(state, spec.engine, provider_id, &spec.run.attachments)?;
    check_native_search(state, spec.engine, provider_id, &spec.run.engine_config)
}

/// Whom a new session belongs to: whom the daemon's caller names (a workflow's run: the
/// workflow's team), else the actor (the daemon's own runs: the root key's), with the visibility
/// asked for or `[auth] default_visibility`.
fn ownership_of(state: &AppState, actor: &Actor, spec: &mut SessionSpec) -> Ownership {
    let visibility = spec
        .visibility
        .unwrap_or(state.config.auth.default_visibility);
    match (spec.owner.take(), actor) {
        (Some(owner), _) => owner,
        (None, Actor::Principal(p)) => p.ownership(visibility),
        (None, Actor::Daemon) => Ownership {
            visibility,
            ..Ownership::root()
        },
    }
}

/// Creates a session and starts its first run.
pub async fn create_session(
    state: &AppState,
    actor: &Actor,
    spec: SessionSpec,
    origin: Origin,
) -> Result<CreateSessionResponse, ApiError> {
    tracing::debug!(%actor, engine = %spec.engine, "create session");
    check_serving(state)?;
    check_may_start(actor)?;
    let mut spec = spec;
    let ownership = ownership_of(state, actor, &mut spec);
    check_session(state, actor, &mut spec, &origin)?;
    // Held until the session is stored: a retry racing this request waits, then finds it.
    let _key = match spec.run.client_msg_id.as_deref() {
        Some(key) => Some(state.client_keys.acquire(None, key).await),
        None => None,
    };
    // A key repeated by its owner only: another user's key of the same name is another request.
    if let Some(key) = spec.run.client_msg_id.as_deref()
        && let Some(run) = state.store.run_by_client_msg_id(None, key).await?
        && state
            .store
            .get_session(run.session_id)
            .await?
            .is_some_and(|s| s.ownership.owner == ownership.owner)
    {
        return Ok(CreateSessionResponse {
            session_id: run.session_id,
            run_id: run.id,
            events_url: format!("/v1/sessions/{}/events", run.session_id),
            duplicate: true,
        });
    }
    // The prompt hooks last among the checks: a refused or repeated request runs none.
    let mut origin = origin;
    if let Some(p) = submit_prompt(
        state,
        &spec.prompt,
        None,
        spec.engine,
        spec.project_path.as_deref(),
        &spec.run.channel,
    )
    .await?
    {
        if let Origin::Gateway(call) = &mut origin {
            call.rewrite_prompt(&p);
        }
        spec.prompt = p;
    }
    let now = Utc::now();
    let session = Session {
        id: SessionId::new(),
        engine: spec.engine,
        title: spec.title,
        provider_id: spec.run.provider_id.clone(),
        model: spec.run.model.clone(),
        cli_backend: spec.cli_backend,
        project_path: spec.project_path,
        agent_id: spec.agent_id,
        system_prompt: spec.run.system_prompt.clone(),
        permission_mode: spec.run.permission_mode,
        // Stored as understood: canonical key names, so that an alias reads back the same.
        engine_config: spec.run.engine_config.to_json(),
        cli_session_id: None,
        created_at: now,
        updated_at: now,
        ownership,
    };
    let mut run = new_run(
        session.id,
        spec.run.client_msg_id.clone(),
        spec.run.channel.clone(),
    );
    // A new session has no other run: its first one starts at once, so it is stored as running.
    run.status = RunStatus::Running;
    // create_session stores the first seq reservation with the session.
    let bus = state
        .dispatcher
        .hub()
        .open(session.id, 0, elfgate_core::SEQ_RESERVE_BLOCK);
    let prompt = Prompt {
        run_id: run.id,
        text: spec.prompt,
        is_resume: false,
        parent_id: None,
    };
    let mut ctx = build_ctx(state, &session, prompt, spec.run, bus.clone(), actor);
    // The first prompt is stored in the same commit as the session and its running run: one wait
    // instead of three before the request goes upstream. The run's recorder is told so, and
    // neither it nor the engine writes them again.
    let user = elfgate_engines::prompt::new_user_message(&ctx, None);
    ctx.recorder = state
        .dispatcher
        .first_run_recorder(session.id, run.id, user.clone());
    // The engine may begin the upstream call now, so that it overlaps the commit; it publishes
    // and stores nothing before it is dispatched below, and the call is dropped if the commit fails.
    // Work handed in (the gateway's whole upstream request) is the engine's to start early too.
    if let Origin::Gateway(call) = origin {
        call.apply(&mut ctx);
    }
    if let Some(e) = state.dispatcher.get_engine(session.engine) {
        let early = e.head_start(&ctx);
        if early.is_set() {
            ctx.head_start = early;
        }
    }
    if let Err(e) = state
        .store
        .create_session(&session, &run, Some(&user))
        .await
    {
        state.dispatcher.hub().remove(session.id);
        return Err(e.into());
    }
    super::bus::guard_by_lease(state, &bus);
    bus.publish(Some(run.id), EventPayload::SessionCreated {})
        .await;
    // Stored with the session, so announced with it too, whatever the run does next.
    bus.publish(Some(run.id), EventPayload::UserMessage { message: user })
        .await;
    match state.dispatcher.dispatch(ctx, OnBusy::Reject) {
        Ok(_) => Ok(CreateSessionResponse {
            session_id: session.id,
            run_id: run.id,
            events_url: format!("/v1/sessions/{}/events", session.id),
            duplicate: false,
        }),
        // The stored run never started; the next start ends it (daemon_restart). A new session
        // has no run to be busy with or queue behind.
        Err(e) => Err(e.into()),
    }
}
