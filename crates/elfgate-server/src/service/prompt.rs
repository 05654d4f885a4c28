//! A later prompt of a session: its checks against the stored session, then its run stored and
//! dispatched (or queued).

use super::access::authorize_session;
use super::bus::open_run_bus;
use super::checks::{
    check_attachments, check_engine, check_native_search, check_project_here, check_serving,
    check_settings,
};
use super::command::{Actor, Origin};
use super::run_context::{Prompt, build_ctx, new_run, submit_prompt};
use super::scopes::{RunSettings, RunTarget, check_run};
use super::secrets::SecretScan;
use super::spec::{PromptSpec, RunSpec, stored_engine_config};
use crate::error::ApiError;
use crate::session_gate::PromptPass;
use crate::state::AppState;
use elfgate_api::SendMessageResponse;
use elfgate_core::{Access, EngineType, OnBusy, Run, Session, SessionId};

/// The session a later run is for, when `actor` may steer it, with the pass that a prompt holds
/// until its run is admitted or withdrawn, so that a DELETE either stops the run or is seen by
/// the checks that follow (see session_gate.rs).
pub(crate) async fn enter_session<'s>(
    state: &'s AppState,
    actor: &Actor,
    session_id: SessionId,
) -> Result<(PromptPass<'s>, Session), ApiError> {
    let Some(pass) = state.sessions.enter(session_id).await else {
        // Said only to whom may steer it; to anyone else it is unknown, as it soon will be.
        authorize_session(state, actor, session_id, Access::Steer).await?;
        return Err(ApiError::NotFound(format!(
            "session '{session_id}' is being deleted"
        )));
    };
    let session = authorize_session(state, actor, session_id, Access::Steer).await?;
    Ok((pass, session))
}

/// The state's checks of a later prompt, in order: a `workflow` session takes prompts only from
/// its workflow, the prompt and system prompt carry no secret, the settings fit the daemon, the
/// key's scopes allow the run (its overrides over the session's settings), the engine takes the
/// run, the attachments and native search fit the provider, the project is here. Returns the
/// run's settings over the session's.
fn check_prompt_run(
    state: &AppState,
    actor: &Actor,
    session: &Session,
    prompt: &str,
    run: RunSpec,
    origin: &Origin,
) -> Result<RunSpec, ApiError> {
    let workflow = match origin {
        Origin::Workflow(workflow) => Some(workflow.clone()),
        Origin::Api | Origin::Gateway(_) if session.engine == EngineType::Workflow => {
            return Err(ApiError::Unprocessable(
                "a workflow's session takes no prompts: start another run with POST \
                 /v1/workflows/{name}/runs"
                    .into(),
            ));
        }
        Origin::Api | Origin::Gateway(_) => None,
    };
    SecretScan::new(state).check_prompt(prompt, run.system_prompt.as_deref())?;
    check_settings(state, session.engine, &run)?;
    let mut run = run.over_session(session)?;
    if workflow.is_some() {
        run.engine_config.workflow = workflow;
    }
    check_run_scopes(state, actor, session, &run, origin.project_field())?;
    // The provider this run would use: the prompt's, else the session's.
    let provider_id = run
        .provider_id
        .as_deref()
        .or(session.provider_id.as_deref());
    check_engine(
        state,
        session.engine,
        session.cli_backend,
        &run.engine_config,
        provider_id,
    )?;
    check_attachments(state, session.engine, provider_id, &run.attachments)?;
    check_native_search(state, session.engine, provider_id, &run.engine_config)?;
    check_project_here(state, session)?;
    Ok(run)
}

/// The key's scopes against a later run of `session` with `run` (already over the session's
/// settings): the prompt's provider and model, else the session's, else the defaults.
pub(crate) fn check_run_scopes(
    state: &AppState,
    actor: &Actor,
    session: &Session,
    run: &RunSpec,
    project_field: &'static str,
) -> Result<(), ApiError> {
    let settings = RunSettings {
        provider_id: run
            .provider_id
            .as_deref()
            .or(session.provider_id.as_deref()),
        model: run.model.as_deref().or(session.model.as_deref()),
        project_path: session.project_path.as_deref(),
        permission_mode: run.permission_mode,
        engine_config: &run.engine_config,
    };
    check_run(
        actor,
        &RunTarget::resolve(state, session.engine, settings, project_field),
    )
}

/// Starts (or queues) a later run of a session.
pub async fn send_message(
    state: &AppState,
    actor: &Actor,
    session_id: SessionId,
    spec: PromptSpec,
    origin: Origin,
) -> Result<SendMessageResponse, ApiError> {
    tracing::debug!(%actor, %session_id, "send message");
    check_serving(state)?;
    let (_pass, session) = enter_session(state, actor, session_id).await?;
    let PromptSpec {
        prompt,
        on_busy,
        parent_id,
        run,
    } = spec;
    let own_channel = run.engine_config.channel_permissions;
    let run_spec = check_prompt_run(state, actor, &session, &prompt, run, &origin)?;
    // The session's channel permissions change only when a prompt sends new ones: then its
    // stored engineConfig with them is stored.
    let config_with_new_channel = match own_channel {
        Some(p) => {
            let mut stored = stored_engine_config(&session)?;
            (stored.channel_permissions != Some(p)).then(|| {
                stored.channel_permissions = Some(p);
                stored
            })
        }
        None => None,
    };
    let client_msg_id = run_spec.client_msg_id.clone();
    // Held until the run is stored and dispatched (or withdrawn): a retry racing this request
    // waits, then finds the run, instead of being refused as busy because of it.
    let _key = match client_msg_id.as_deref() {
        Some(key) => Some(state.client_keys.acquire(Some(session_id), key).await),
        None => None,
    };
    if let Some(key) = client_msg_id.as_deref()
        && let Some(run) = state
            .store
            .run_by_client_msg_id(Some(session_id), key)
            .await?
    {
        return Ok(duplicate_of(run));
    }
    if on_busy == OnBusy::Reject
        && let Some(active) = state.dispatcher.active().get(session_id)
    {
        return Err(ApiError::Busy {
            active_run_id: active.run_id,
        });
    }
    // Refused before the run is stored; admission checks again, atomically, below.
    let active = state.dispatcher.active();
    if on_busy == OnBusy::Enqueue && active.queue_is_full(session_id) {
        return Err(ApiError::TooManyQueued(active.max_queued()));
    }
    if let Some(parent) = parent_id
        && state.store.get_message(session_id, parent).await?.is_none()
    {
        return Err(ApiError::NotFound(format!(
            "unknown parent message '{parent}' in this session"
        )));
    }
    // The prompt hooks last among the checks: a refused or repeated request runs none.
    let mut origin = origin;
    let mut prompt = prompt;
    if let Some(p) = submit_prompt(
        state,
        &prompt,
        Some(session_id),
        session.engine,
        session.project_path.as_deref(),
        &run_spec.channel,
    )
    .await?
    {
        if let Origin::Gateway(call) = &mut origin {
            call.rewrite_prompt(&p);
        }
        prompt = p;
    }
    if let Some(stored) = config_with_new_channel {
        state
            .store
            .set_session_engine_config(session_id, &stored.to_json())
            .await?;
    }
    let run = new_run(session_id, client_msg_id.clone(), run_spec.channel.clone());
    if let Err(e) = state.store.create_run(&run).await {
        // The same key may have been stored a moment ago by a concurrent retry.
        if let Some(key) = client_msg_id.as_deref()
            && let Some(earlier) = state
                .store
                .run_by_client_msg_id(Some(session_id), key)
                .await?
        {
            return Ok(duplicate_of(earlier));
        }
        return Err(e.into());
    }
    let bus = open_run_bus(state, session_id).await?;
    let prompt = Prompt {
        run_id: run.id,
        text: prompt,
        is_resume: true,
        parent_id,
    };
    let mut ctx = build_ctx(state, &session, prompt, run_spec, bus, actor);
    if let Origin::Gateway(call) = origin {
        call.apply(&mut ctx);
    }
    match state.dispatcher.dispatch(ctx, on_busy) {
        Ok(status) => Ok(SendMessageResponse {
            session_id,
            run_id: run.id,
            status: status.into(),
            duplicate: false,
        }),
        Err(e) => {
            // Not admitted (lost a race with another prompt, a full queue, shutting down): the
            // run never started.
            state.store.delete_run(run.id).await?;
            Err(e.into())
        }
    }
}

fn duplicate_of(run: Run) -> SendMessageResponse {
    SendMessageResponse {
        session_id: run.session_id,
        run_id: run.id,
        status: run.status,
        duplicate: true,
    }
}
