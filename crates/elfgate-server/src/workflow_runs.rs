//! Starting a workflow's run, whatever started it (a client, its schedule, an inbound webhook,
//! a run's end); the scheduler is in workflow_schedule.rs.

use crate::error::ApiError;
use crate::service::{Actor, Origin, PromptSpec, RunSpec, SessionSpec};
use crate::state::AppState;
use chrono::{DateTime, Utc};
use elfgate_api::CreateSessionResponse;
use elfgate_core::{Ownership, PermissionAnswers, RunEnded, Visibility};
use elfgate_store::StoredWorkflow;
use elfgate_workflow::{StepKind, Unattended, WorkflowDefinition};
use serde_json::{Map, Value, json};
use std::collections::HashSet;

/// What started a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    /// `POST /v1/workflows/{name}/runs`, by this actor.
    Manual(Actor),
    /// The workflow's schedule, at this fire time.
    Schedule(DateTime<Utc>),
    /// The inbound webhook of this name.
    Hook(String),
    /// The end of this run.
    RunEnd(elfgate_core::RunId),
}

impl Trigger {
    fn describe(&self) -> String {
        match self {
            Trigger::Manual(_) => "by request".to_string(),
            Trigger::Schedule(at) => format!(
                "on schedule at {}",
                elfgate_core::timefmt::rfc3339_millis(at)
            ),
            Trigger::Hook(name) => format!("by webhook {name}"),
            Trigger::RunEnd(run) => format!("on the end of run {run}"),
        }
    }

    /// Who the run is started for: the client who asked, else the daemon itself.
    fn actor(&self) -> Actor {
        match self {
            Trigger::Manual(actor) => actor.clone(),
            Trigger::Schedule(_) | Trigger::Hook(_) | Trigger::RunEnd(_) => Actor::Daemon,
        }
    }

    /// Whom the run's session belongs to: the workflow's team, shared with it; its owner the
    /// user who started it by request, else the workflow's creator.
    fn session_owner(&self, workflow: &Ownership) -> Ownership {
        let owner = match self {
            Trigger::Manual(Actor::Principal(p)) => p.user.clone(),
            _ => workflow.owner.clone(),
        };
        Ownership {
            owner,
            team: workflow.team.clone(),
            visibility: Visibility::Team,
        }
    }
}

/// Who answers a workflow's permission requests: a client through the API, unless the
/// definition says nobody will (`unattended: deny`: a call that would ask is denied at once).
fn answers(def: &WorkflowDefinition) -> PermissionAnswers {
    if def.unattended == Some(Unattended::Deny) {
        PermissionAnswers::Nobody
    } else {
        PermissionAnswers::Client
    }
}

/// Starts a run of `stored` with `given` inputs: a session of the `workflow` engine.
pub async fn start(
    state: &AppState,
    stored: StoredWorkflow,
    given: Map<String, Value>,
    trigger: Trigger,
) -> Result<CreateSessionResponse, ApiError> {
    let owner = trigger.session_owner(&stored.ownership);
    let name = stored.name;
    let version = stored.version;
    let def: WorkflowDefinition = serde_json::from_value(stored.definition)
        .map_err(|e| ApiError::Internal(format!("stored workflow '{name}' v{version}: {e}")))?;
    let inputs = resolve_inputs(&def, given)?;
    let mut run = RunSpec {
        permission_mode: def.permission_mode,
        answers: answers(&def),
        ..RunSpec::default()
    };
    // The workflow's own budget is its run's.
    run.engine_config.max_cost_usd = def.max_cost_usd;
    let spec = SessionSpec {
        engine: elfgate_core::EngineType::Workflow,
        prompt: format!(
            "Run workflow {name} v{version} {} with inputs {}",
            trigger.describe(),
            Value::Object(inputs.clone())
        ),
        title: Some(format!("{name} v{version}")),
        project_path: def.project_path.clone(),
        cli_backend: None,
        agent_id: None,
        run,
        visibility: None,
        owner: Some(owner),
    };
    let workflow = elfgate_core::WorkflowRef {
        name,
        version,
        inputs,
        resume: None,
    };
    crate::service::create_session(state, &trigger.actor(), spec, Origin::Workflow(workflow)).await
}

/// Resumes run `run_id` of workflow `name`, which failed or was interrupted: a new run of its
/// session that starts at the step the run ended in (or the one after, when that one ended
/// well), with the outputs the earlier steps had, as the session's runs ended them.
pub async fn resume(
    state: &AppState,
    actor: &Actor,
    name: &str,
    run_id: elfgate_core::RunId,
) -> Result<CreateSessionResponse, ApiError> {
    let not_ours = || ApiError::NotFound(format!("workflow '{name}' has no run '{run_id}'"));
    let run = state.store.find_run(run_id).await?.ok_or_else(not_ours)?;
    let session = state
        .store
        .get_session(run.session_id)
        .await?
        .ok_or_else(not_ours)?;
    let wref = elfgate_core::EngineConfig::from_json(&session.engine_config)
        .ok()
        .and_then(|c| c.workflow)
        .filter(|w| session.engine == elfgate_core::EngineType::Workflow && w.name == name)
        .ok_or_else(not_ours)?;
    let stored = state
        .store
        .get_workflow(name, Some(wref.version))
        .await?
        .ok_or_else(not_ours)?;
    crate::service::authorize_workflow(
        actor,
        &stored.ownership,
        crate::service::WorkflowAct::Run,
        not_ours,
    )?;
    match run.finish_reason {
        None => {
            return Err(ApiError::Conflict(format!(
                "run '{run_id}' has not ended; interrupt it first"
            )));
        }
        Some(elfgate_core::FinishReason::Stop) => {
            return Err(ApiError::Conflict(format!(
                "run '{run_id}' ended well (stop); there is nothing to resume"
            )));
        }
        Some(_) => {}
    }
    let def: WorkflowDefinition = serde_json::from_value(stored.definition).map_err(|e| {
        ApiError::Internal(format!("stored workflow '{name}' v{}: {e}", wref.version))
    })?;
    // The run's last events must be in the log before it is read.
    state.dispatcher.hub().flush().await;
    // Each step's last end over the session's runs, and the last step the run ended.
    let mut ends: std::collections::HashMap<String, (Value, elfgate_core::StepStatus)> =
        std::collections::HashMap::new();
    let mut touched = None;
    let mut after = 0;
    loop {
        let page = state.store.events_after(session.id, after, 10_000).await?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        for e in &page {
            if e.event_type != elfgate_core::EventType::StepEnd {
                continue;
            }
            let Ok(env) = serde_json::from_str::<elfgate_core::EventEnvelope>(&e.json) else {
                continue;
            };
            if let elfgate_core::EventPayload::StepEnd {
                step_id,
                status,
                output,
                ..
            } = env.payload
            {
                if env.run_id == Some(run_id) {
                    touched = def.steps.iter().position(|s| s.id == step_id);
                }
                ends.insert(step_id, (output, status));
            }
        }
    }
    let from = match touched {
        None => 0,
        Some(i) => match ends.get(&def.steps[i].id) {
            Some((_, elfgate_core::StepStatus::Success | elfgate_core::StepStatus::Skipped)) => {
                i + 1
            }
            _ => i,
        },
    };
    let Some(first) = def.steps.get(from) else {
        return Err(ApiError::Conflict(format!(
            "every step of run '{run_id}' ended; there is nothing to resume"
        )));
    };
    let outputs = def.steps[..from]
        .iter()
        .filter_map(|s| {
            let (output, status) = ends.get(&s.id)?;
            Some((s.id.clone(), json!({"output": output, "status": status})))
        })
        .collect();
    let prompt = format!(
        "Resume run {run_id} of workflow {name} v{} from step {}",
        wref.version, first.id
    );
    let workflow = elfgate_core::WorkflowRef {
        resume: Some(elfgate_core::WorkflowResume {
            run_id,
            from_step: u32::try_from(from).unwrap_or(u32::MAX),
            outputs,
        }),
        ..wref
    };
    let mut spec = PromptSpec {
        prompt,
        on_busy: elfgate_core::OnBusy::Reject,
        parent_id: None,
        run: RunSpec {
            answers: answers(&def),
            ..RunSpec::default()
        },
    };
    // The workflow's budget as it is now (raised since the run paused, say).
    spec.run.engine_config.max_cost_usd = def.max_cost_usd;
    let origin = Origin::Workflow(workflow);
    let resumed = crate::service::send_message(state, actor, session.id, spec, origin).await?;
    Ok(CreateSessionResponse {
        session_id: session.id,
        run_id: resumed.run_id,
        events_url: format!("/v1/sessions/{}/events", session.id),
        duplicate: false,
    })
}

/// Checks a definition: the tools it names are looked up in the registry (built-in and skill
/// tools, and the configured MCP servers), then everything else (see `elfgate_workflow::validate`).
pub async fn check(state: &AppState, def: &WorkflowDefinition) -> Result<(), ApiError> {
    let project = def
        .project_path
        .as_deref()
        .and_then(|p| std::fs::canonicalize(p).ok())
        .filter(|p| p.is_dir());
    let mut named: Vec<&str> = Vec::new();
    for step in &def.steps {
        match step.kind() {
            Ok(StepKind::Tool(t, _)) => named.push(t),
            Ok(StepKind::Agent(a)) => {
                named.extend(a.enabled_tools.iter().flatten().map(String::as_str));
            }
            _ => {}
        }
    }
    let mut known = HashSet::new();
    for name in named {
        if state.tool_runs.knows_tool(project.as_deref(), name).await {
            known.insert(name.to_string());
        }
    }
    elfgate_workflow::validate(def, |t| known.contains(t))
        .map_err(|e| ApiError::Unprocessable(e.to_string()))
}

/// Loads the definitions of `[workflows] dir` (`*.yaml`, `*.yml`, `*.json`, one workflow each):
/// each checked as a POST's body is, stored as version 1 or as a new version when it differs
/// from the stored one, left alone when it is the same; a file that is not a valid definition is
/// logged and skipped.
pub async fn load_dir(state: &AppState) {
    let Some(dir) = state.config.workflows.dir.clone() else {
        return;
    };
    let mut files: Vec<std::path::PathBuf> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
            })
            .collect(),
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot read the workflows' folder");
            return;
        }
    };
    files.sort();
    for file in files {
        match load_file(state, &file).await {
            Ok(Some(version)) => {
                tracing::info!(file = %file.display(), version, "workflow stored from its file");
            }
            Ok(None) => {}
            Err(why) => {
                tracing::warn!(file = %file.display(), "workflow file skipped: {why}");
            }
        }
    }
    refresh_triggers(state).await;
}

/// One definition file: the version stored, or None when the stored one is the same.
async fn load_file(state: &AppState, file: &std::path::Path) -> Result<Option<u32>, String> {
    let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    let def: WorkflowDefinition = if file.extension().is_some_and(|e| e == "json") {
        serde_json::from_str(&text).map_err(|e| e.to_string())?
    } else {
        serde_yaml_ng::from_str(&text).map_err(|e| e.to_string())?
    };
    check(state, &def).await.map_err(|e| e.to_string())?;
    let json = serde_json::to_value(&def).map_err(|e| e.to_string())?;
    let write = match state
        .store
        .get_workflow(&def.name, None)
        .await
        .map_err(|e| e.report())?
    {
        Some(w) if w.deleted_at.is_none() && w.definition == json => return Ok(None),
        Some(w) if w.deleted_at.is_none() => elfgate_store::WorkflowWrite::Replace,
        _ => elfgate_store::WorkflowWrite::Create,
    };
    // The daemon's own folder: its workflows are the root key's.
    match state
        .store
        .put_workflow(&def.name, &json, write, &Ownership::root())
        .await
    {
        Ok(Some(stored)) => Ok(Some(stored.version)),
        Ok(None) => Err("another writer changed it meanwhile".into()),
        Err(e) => Err(e.report()),
    }
}

/// The inputs of a run: each one declared and of its type, the missing ones from their
/// defaults; else the 422 naming the input.
fn resolve_inputs(
    def: &WorkflowDefinition,
    given: Map<String, Value>,
) -> Result<Map<String, Value>, ApiError> {
    if let Some(unknown) = given.keys().find(|k| !def.inputs.contains_key(*k)) {
        return Err(ApiError::Unprocessable(format!(
            "inputs.{unknown}: workflow '{}' has no such input",
            def.name
        )));
    }
    let mut inputs = Map::new();
    for (name, spec) in &def.inputs {
        let value = match given.get(name).or(spec.default.as_ref()) {
            Some(v) => v.clone(),
            None => {
                return Err(ApiError::Unprocessable(format!(
                    "inputs.{name}: required (a {})",
                    spec.kind.as_str()
                )));
            }
        };
        if !spec.kind.admits(&value) {
            return Err(ApiError::Unprocessable(format!(
                "inputs.{name}: {value} is not of type {}",
                spec.kind.as_str()
            )));
        }
        inputs.insert(name.clone(), value);
    }
    Ok(inputs)
}

/// Reads the run-end triggers again (after this node changed a workflow).
pub async fn refresh_triggers(state: &AppState) {
    match state.store.list_workflows().await {
        Ok(w) => state.run_end_triggers.set(&w),
        Err(e) => {
            tracing::warn!(error = %e.report(), "cannot read the workflows' run-end triggers");
        }
    }
}

/// For each ended run, until the daemon stops: starts the workflows it triggers (its record as
/// their `run` input). Its webhook deliveries are not queued here but from the store's outbox of
/// run ends (see webhooks/mod.rs), which every way a run ends writes to.
pub async fn on_run_ends(state: AppState, mut ends: tokio::sync::mpsc::Receiver<RunEnded>) {
    while let Some(ended) = ends.recv().await {
        // The run's concurrent-runs slots, if it held any, are free.
        state.rate_limits.run_ended(ended.run_id).await;
        if state.is_shutting_down() {
            return;
        }
        for name in state.run_end_triggers.matching(&ended) {
            let stored = match state.store.get_workflow(&name, None).await {
                Ok(Some(w)) if w.deleted_at.is_none() => w,
                Ok(_) => continue,
                Err(e) => {
                    tracing::warn!(workflow = %name, error = %e.report(), "cannot read a triggered workflow");
                    continue;
                }
            };
            // A workflow hears the ends of its own team's runs only.
            let same_team = match state.store.get_session(ended.session_id).await {
                Ok(Some(s)) => s.ownership.team == stored.ownership.team,
                Ok(None) => false,
                Err(e) => {
                    tracing::warn!(workflow = %name, error = %e.report(), "cannot read the ended run's session");
                    continue;
                }
            };
            if !same_team {
                continue;
            }
            let run = serde_json::to_value(&ended).unwrap_or(Value::Null);
            let inputs = Map::from_iter([("run".to_string(), run)]);
            match start(&state, stored, inputs, Trigger::RunEnd(ended.run_id)).await {
                Ok(started) => tracing::info!(
                    workflow = %name,
                    run_id = %ended.run_id,
                    session_id = %started.session_id,
                    "started a run triggered by a run's end"
                ),
                Err(e) => {
                    tracing::warn!(workflow = %name, run_id = %ended.run_id, error = %e, "a triggered run could not start");
                }
            }
        }
    }
}
