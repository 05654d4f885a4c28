//! What every command that starts a run shares: the prompt hooks, the stored run and the run's
//! context as the engine receives it.

use super::command::Actor;
use super::spec::RunSpec;
use crate::error::ApiError;
use crate::state::AppState;
use chrono::Utc;
use elfgate_core::{
    ChannelOrigin, EngineSessionContext, EngineType, EventEmitter, MessageId, Payer, Run, RunId,
    RunStatus, Session, SessionBus, SessionId,
};
use elfgate_tools::PromptVerdict;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The prompt side of a run about to be built.
pub(crate) struct Prompt {
    pub(crate) run_id: RunId,
    pub(crate) text: String,
    pub(crate) is_resume: bool,
    pub(crate) parent_id: Option<MessageId>,
}

/// The run's context: the session's settings under the run's (already laid over the session's
/// stored engineConfig and permission mode).
pub(crate) fn build_ctx(
    state: &AppState,
    session: &Session,
    p: Prompt,
    run: RunSpec,
    bus: Arc<SessionBus>,
    actor: &Actor,
) -> EngineSessionContext {
    let Prompt {
        run_id,
        text: prompt,
        is_resume,
        parent_id,
    } = p;
    EngineSessionContext {
        session: session.clone(),
        run_id,
        prompt,
        is_resume,
        user_message_id: MessageId::new(),
        recorder: state.dispatcher.recorder(session.id, run_id),
        head_start: Default::default(),
        client_msg_id: run.client_msg_id,
        parent_id,
        provider_id: run.provider_id.or_else(|| session.provider_id.clone()),
        model: run.model.or_else(|| session.model.clone()),
        system_prompt: run.system_prompt.or_else(|| session.system_prompt.clone()),
        thinking_level: run.thinking_level,
        project_path: session.project_path.clone(),
        agent_id: session.agent_id.clone(),
        engine_config: run.engine_config,
        permission_mode: run.permission_mode,
        cli_backend: session.cli_backend,
        attachments: run.attachments,
        stored_input: None,
        permission_answers: run.answers,
        events: EventEmitter::new(bus, run_id),
        cancel: CancellationToken::new(),
        metrics: state.metrics.clone(),
        tool_run: None,
        node: state.fleet.as_ref().map(|f| f.node_id.clone()),
        sandbox: Some(state.tinyelf.sandbox_facts()),
        channel: run.channel,
        payer: Arc::new(payer_of(actor, session)),
        meters: state.meters.clone(),
        trace: run_trace(actor),
    }
}

/// What a run started now by `actor` takes into its trace (None: runs are not traced).
fn run_trace(actor: &Actor) -> Option<elfgate_core::telemetry::RunTrace> {
    match actor {
        Actor::Principal(p) => {
            elfgate_core::telemetry::RunTrace::here(p.key_id.as_deref(), Some(&p.team))
        }
        Actor::Daemon => elfgate_core::telemetry::RunTrace::here(None, None),
    }
}

/// Who pays for a run: the principal that sent its prompt, else (a run the daemon starts on its
/// own) the session's owner.
fn payer_of(actor: &Actor, session: &Session) -> Payer {
    let mut payer = match actor {
        Actor::Principal(p) => Payer::of(p),
        Actor::Daemon => Payer::owner(&session.ownership),
    };
    // A workflow's run is its team's, whoever started it (its session is the team's).
    if session.engine == EngineType::Workflow {
        payer.team.clone_from(&session.ownership.team);
    }
    payer
}

/// The concurrent-runs slots of `run`, about to be admitted, or the rule it is over (429). The
/// daemon's own runs (a workflow's schedule, a hook) hold none.
pub(crate) async fn hold_run_slot(
    state: &AppState,
    actor: &super::command::Actor,
    run: &Run,
) -> Result<Option<crate::rate_limits::RunSlot>, ApiError> {
    match actor {
        super::command::Actor::Principal(p) => {
            let active = state.dispatcher.active();
            Ok(state
                .rate_limits
                .hold_run(p.as_ref().into(), run.id, run.session_id, &|session| {
                    active.contains(session)
                })
                .await?)
        }
        super::command::Actor::Daemon => Ok(None),
    }
}

/// A new queued run of the session.
pub(crate) fn new_run(
    session_id: SessionId,
    client_msg_id: Option<String>,
    channel: ChannelOrigin,
) -> Run {
    Run {
        id: RunId::new(),
        session_id,
        status: RunStatus::Queued,
        finish_reason: None,
        usage: elfgate_core::TokenUsage::default(),
        iterations: 0,
        started_at: Utc::now(),
        ended_at: None,
        error: None,
        client_msg_id,
        channel,
        cost_usd: None,
        trace_id: None,
    }
}

/// The input scan's hook point: the UserPromptSubmit hooks see the prompt (and the checked
/// channel fields) before anything of it is stored, and may refuse it (422 naming the hook's
/// reason) or rewrite it (the rewritten prompt is the one stored, sent and scanned for secrets).
/// None: the prompt stands as it came.
pub(crate) async fn submit_prompt(
    state: &AppState,
    prompt: &str,
    session_id: Option<SessionId>,
    engine: EngineType,
    project: Option<&str>,
    channel: &ChannelOrigin,
) -> Result<Option<String>, ApiError> {
    let mut payload = serde_json::json!({
        "event": "UserPromptSubmit",
        "sessionId": session_id,
        "engine": engine.as_str(),
        "projectPath": project,
        "prompt": prompt,
    });
    channel.add_to(&mut payload);
    match state
        .tinyelf
        .submit_prompt(&payload, project.map(std::path::Path::new))
        .await
    {
        PromptVerdict::Keep => Ok(None),
        PromptVerdict::Block(reason) => Err(ApiError::Unprocessable(format!(
            "prompt: refused by a UserPromptSubmit hook: {reason}"
        ))),
        PromptVerdict::Rewrite(p) => {
            super::spec::check_prompt(&p)?;
            super::secrets::SecretScan::new(state).check(&p, "prompt")?;
            Ok(Some(p))
        }
    }
}
