//! A tool run outside a turn (`POST /v1/sessions/{id}/tools/{name}`): one tool call of a tinyelf
//! session, as a run of its own, answered once the run has ended.

use super::bus::open_run_bus;
use super::checks::{check_project_here, check_serving, check_settings};
use super::command::Actor;
use super::prompt::{check_run_scopes, enter_session};
use super::run_context::{Prompt, build_ctx, new_run};
use super::spec::RunSpec;
use crate::error::ApiError;
use crate::state::AppState;
use elfgate_core::{EngineType, OnBusy, RunId, SessionId};

/// Runs a tool outside a turn (`POST /v1/sessions/{id}/tools/{name}`): checks the session (404,
/// 422 when it is not a tinyelf session), the tool (404) and its arguments (422), refuses a busy
/// session (409), then stores and dispatches the run and returns its id and answer once the run
/// has ended.
pub async fn run_tool(
    state: &AppState,
    actor: &Actor,
    session_id: SessionId,
    name: String,
    arguments: serde_json::Value,
) -> Result<(RunId, elfgate_tools::gate::ToolRunAnswer), ApiError> {
    use elfgate_tools::gate::ToolRunError;
    tracing::debug!(%actor, %session_id, tool = %name, "run tool");
    check_serving(state)?;
    let (_pass, session) = enter_session(state, actor, session_id).await?;
    if session.engine != EngineType::TinyElf {
        return Err(ApiError::Unprocessable(format!(
            "tool runs need a tinyelf session; this one is {}",
            session.engine.as_str()
        )));
    }
    check_project_here(state, &session)?;
    let project = session
        .project_path
        .as_deref()
        .and_then(|p| std::fs::canonicalize(p).ok())
        .filter(|p| p.is_dir());
    let run_spec = RunSpec::default();
    check_settings(state, session.engine, &run_spec)?;
    let run_spec = run_spec.over_session(&session)?;
    check_run_scopes(
        state,
        actor,
        &session,
        &run_spec,
        "the session's projectPath",
    )?;
    state
        .tool_runs
        .check_tool_run(
            project.as_deref(),
            session_id,
            run_spec.engine_config.mcp_config.as_ref(),
            run_spec.engine_config.enabled_tools.as_deref(),
            &name,
            &arguments,
        )
        .await
        .map_err(|e| match e {
            ToolRunError::UnknownTool(_) => ApiError::NotFound(e.to_string()),
            ToolRunError::NotEnabled { .. } | ToolRunError::BadArguments { .. } => {
                ApiError::Unprocessable(e.to_string())
            }
        })?;
    if let Some(active) = state.dispatcher.active().get(session_id) {
        return Err(ApiError::Busy {
            active_run_id: active.run_id,
        });
    }
    let run = new_run(session_id, None, Default::default());
    state.store.create_run(&run).await?;
    let bus = open_run_bus(state, session_id).await?;
    let answer = state.tool_runs.await_tool_run(run.id);
    let prompt = Prompt {
        run_id: run.id,
        text: String::new(),
        is_resume: true,
        parent_id: None,
    };
    let mut ctx = build_ctx(state, &session, prompt, run_spec, bus, actor);
    ctx.tool_run = Some(elfgate_core::ToolRun { name, arguments });
    let refused: ApiError = match state.dispatcher.dispatch(ctx, OnBusy::Reject) {
        Ok(_) => {
            // Taken before the answer: once the run has ended there is no entry to take.
            let done = state
                .dispatcher
                .active()
                .get(session_id)
                .filter(|a| a.run_id == run.id)
                .map(|a| a.done);
            let answer = answer.await;
            // The answer waits for the run's end (`complete`, the session freed), so that a
            // client's next request after it never finds the session still busy with it.
            if let Some(done) = done {
                done.cancelled().await;
            }
            return match answer {
                Ok(a) => Ok((run.id, a)),
                // The run ended without an answer: it could not start or store its result. Its
                // error is on the run and in the event stream.
                Err(_) => {
                    let why = state
                        .store
                        .get_run(session_id, run.id)
                        .await?
                        .and_then(|r| r.error.map(|e| e.to_string()))
                        .unwrap_or_else(|| "the run ended without a result".into());
                    Err(ApiError::Unprocessable(format!(
                        "tool run {}: {why}",
                        run.id
                    )))
                }
            };
        }
        Err(e) => e.into(),
    };
    // Not admitted: the run never started.
    state.tool_runs.forget_tool_run(run.id);
    state.store.delete_run(run.id).await?;
    Err(refused)
}
