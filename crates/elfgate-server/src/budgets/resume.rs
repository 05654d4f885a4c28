//! `POST /v1/sessions/{id}/resume`: a session paused at a spent budget goes on, once every
//! budget that paused it has room again (raised, reset, or its period rolled over). The resumed
//! run is a prompt of the session like any other (its history, pending tool results and the cli
//! engine's own session kept), prompted with the request's `prompt` or a fixed one.

use super::account::notice_of;
use super::meter::session_account_id;
use crate::error::ApiError;
use crate::service::{self, Actor, Origin, PromptSpec};
use crate::state::AppState;
use chrono::Utc;
use elfgate_api::budgets::{RESUME_PROMPT, ResumeRequest};
use elfgate_api::{SendMessageRequest, SendMessageResponse};
use elfgate_core::budget::usd_to_nanos;
use elfgate_core::{
    Access, BudgetHolder, BudgetNotice, EngineConfig, EngineType, FinishReason, Payer, SessionId,
};
use serde_json::json;

/// Resumes paused session `session_id` as `req` asks.
pub async fn resume(
    state: &AppState,
    actor: &Actor,
    session_id: SessionId,
    req: ResumeRequest,
) -> Result<SendMessageResponse, ApiError> {
    let session = service::authorize_session(state, actor, session_id, Access::Steer).await?;
    if session.engine == EngineType::Workflow {
        return Err(ApiError::Conflict(format!(
            "session '{session_id}' is a workflow's run: resume it with POST \
             /v1/workflows/{{name}}/runs/{{runId}}/resume, from the step it paused in"
        )));
    }
    let last = state.store.last_run_finish(&session_id.to_string()).await?;
    if last.as_deref() != Some(FinishReason::BudgetPaused.as_str())
        || state.dispatcher.active().get(session_id).is_some()
    {
        return Err(ApiError::Conflict(format!(
            "session '{session_id}' is not paused at a budget"
        )));
    }
    let mut body = json!({"prompt": req.prompt.unwrap_or_else(|| RESUME_PROMPT.to_string())});
    if let Some(config) = &req.engine_config {
        body["engineConfig"] = config.clone();
    }
    let message: SendMessageRequest = serde_json::from_value(body)
        .map_err(|e| ApiError::Unprocessable(format!("{e} (at `engineConfig`)")))?;
    let spec = PromptSpec::try_from(message)?;
    // The run's own limit: the request's, else the session's.
    let stored = EngineConfig::from_json(&session.engine_config).unwrap_or_default();
    let max_cost_usd = spec.run.engine_config.max_cost_usd.or(stored.max_cost_usd);
    let payer = match actor {
        Actor::Principal(p) => Payer::of(p),
        Actor::Daemon => Payer::owner(&session.ownership),
    };
    if let Some(over) = still_spent(state, &payer, session_id, max_cost_usd).await? {
        return Err(ApiError::Conflict(format!(
            "session '{session_id}' stays paused: {over}"
        )));
    }
    service::send_message(state, actor, session_id, spec, Origin::Api).await
}

/// The first budget of the session's calls that still has no room, if any.
async fn still_spent(
    state: &AppState,
    payer: &Payer,
    session_id: SessionId,
    max_cost_usd: Option<f64>,
) -> Result<Option<BudgetNotice>, ApiError> {
    let now = Utc::now();
    for budget in state.budgets.applicable(payer) {
        let Some(row) = state.store.get_budget(&budget.id).await? else {
            continue;
        };
        if row.spent_at(now) >= row.max_nusd {
            return Ok(Some(notice_of(&row, now)));
        }
    }
    let Some(max_usd) = max_cost_usd else {
        return Ok(None);
    };
    let account = state
        .store
        .get_budget(&session_account_id(&session_id.to_string()))
        .await?;
    Ok(account
        .filter(|a| a.spent_nusd >= usd_to_nanos(max_usd))
        .map(|a| BudgetNotice {
            budget_id: None,
            scope: BudgetHolder::Session(session_id.to_string()),
            limit_usd: max_usd,
            spent_usd: elfgate_core::budget::nanos_to_usd(a.spent_nusd),
            period: None,
        }))
}
