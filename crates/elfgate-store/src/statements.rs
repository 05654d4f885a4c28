//! The statements that store sessions, runs and messages and record a run's start and end, shared
//! by the group-commit writer and the store's own transactions.

use crate::codec::ts;
use crate::script::Script;
use crate::{StoreError, StoreResult};
use elfgate_core::{Message, Run, RunId, RunOutcome, SEQ_RESERVE_BLOCK, Session, SessionId};
use sqlx::{Sqlite, Transaction};

fn json_text(v: &impl serde::Serialize) -> StoreResult<String> {
    serde_json::to_string(v).map_err(|e| StoreError::Corrupt(format!("serialize: {e}")))
}

/// Largest power of two not above `n` (n > 0), capped: statement sizes stay few and cached.
fn chunk_len(n: usize) -> usize {
    1usize << n.min(64).ilog2()
}

/// Appends the statements storing sessions (with their first seq reservation), many rows per
/// statement.
pub(crate) fn push_insert_sessions(script: &mut Script, sessions: &[&Session]) -> StoreResult<()> {
    let configs = sessions
        .iter()
        .map(|s| json_text(&s.engine_config))
        .collect::<StoreResult<Vec<_>>>()?;
    let rows: Vec<(&Session, String)> = sessions.iter().copied().zip(configs).collect();
    let mut rest = &rows[..];
    while !rest.is_empty() {
        let (chunk, tail) = rest.split_at(chunk_len(rest.len()));
        rest = tail;
        script
            .statement(
                "INSERT INTO sessions (id, engine, title, provider_id, model, cli_backend, \
                 project_path, agent_id, system_prompt, permission_mode, engine_config, \
                 cli_session_id, event_seq_reserved, created_at, updated_at, owner, team, \
                 visibility) ",
            )
            .push_values(chunk, |mut row, (s, config)| {
                row.push_bind(s.id.to_string())
                    .push_bind(s.engine.as_str())
                    .push_bind(s.title.clone())
                    .push_bind(s.provider_id.clone())
                    .push_bind(s.model.clone())
                    .push_bind(s.cli_backend.map(elfgate_core::CliBackend::as_str))
                    .push_bind(s.project_path.clone())
                    .push_bind(s.agent_id.clone())
                    .push_bind(s.system_prompt.clone())
                    .push_bind(s.permission_mode.map(elfgate_core::PermissionMode::as_str))
                    .push_bind(config.clone())
                    .push_bind(s.cli_session_id.clone())
                    // A new session's bus starts at 0 inside this first reservation.
                    .push_bind(SEQ_RESERVE_BLOCK as i64)
                    .push_bind(ts(&s.created_at))
                    .push_bind(ts(&s.updated_at))
                    .push_bind(s.ownership.owner.clone())
                    .push_bind(s.ownership.team.clone())
                    .push_bind(s.ownership.visibility.as_str());
            });
    }
    Ok(())
}

/// Appends the statements storing runs, many rows per statement.
pub(crate) fn push_insert_runs(script: &mut Script, runs: &[&Run]) {
    let mut rest = runs;
    while !rest.is_empty() {
        let (chunk, tail) = rest.split_at(chunk_len(rest.len()));
        rest = tail;
        script
            .statement(
                "INSERT INTO runs (id, session_id, status, finish_reason, input_tokens, \
                 output_tokens, iterations, started_at, ended_at, error_code, error_message, \
                 client_msg_id, channel) ",
            )
            .push_values(chunk, |mut row, run| {
                row.push_bind(run.id.to_string())
                    .push_bind(run.session_id.to_string())
                    .push_bind(run.status.as_str())
                    .push_bind(run.finish_reason.map(elfgate_core::FinishReason::as_str))
                    .push_bind(run.usage.input_tokens as i64)
                    .push_bind(run.usage.output_tokens as i64)
                    .push_bind(run.iterations as i64)
                    .push_bind(ts(&run.started_at))
                    .push_bind(run.ended_at.as_ref().map(ts))
                    .push_bind(run.error.as_ref().map(|e| e.code.clone()))
                    .push_bind(run.error.as_ref().map(|e| e.message.clone()))
                    .push_bind(run.client_msg_id.clone())
                    .push_bind(crate::codec::channel_text(&run.channel));
            });
    }
}

/// Appends the statements storing messages, many rows per statement, in the order given (their
/// rowid order).
pub(crate) fn push_insert_messages(script: &mut Script, messages: &[&Message]) -> StoreResult<()> {
    let blocks = messages
        .iter()
        .map(|m| json_text(&m.blocks))
        .collect::<StoreResult<Vec<_>>>()?;
    let rows: Vec<(&Message, String)> = messages.iter().copied().zip(blocks).collect();
    let mut rest = &rows[..];
    while !rest.is_empty() {
        let (chunk, tail) = rest.split_at(chunk_len(rest.len()));
        rest = tail;
        script
            .statement(
                "INSERT INTO messages (id, session_id, run_id, parent_id, role, blocks, model, \
                 input_tokens, output_tokens, created_at) ",
            )
            .push_values(chunk, |mut row, (m, blocks)| {
                row.push_bind(m.id.to_string())
                    .push_bind(m.session_id.to_string())
                    .push_bind(m.run_id.map(|r| r.to_string()))
                    .push_bind(m.parent_id.map(|p| p.to_string()))
                    .push_bind(m.role.as_str())
                    .push_bind(blocks.clone())
                    .push_bind(m.model.clone())
                    .push_bind(m.input_tokens.map(|v| v as i64))
                    .push_bind(m.output_tokens.map(|v| v as i64))
                    .push_bind(ts(&m.created_at));
            });
    }
    Ok(())
}

/// Stores messages (in a transaction of the caller's).
pub(crate) async fn insert_messages_tx(
    tx: &mut Transaction<'_, Sqlite>,
    messages: &[&Message],
) -> StoreResult<()> {
    let mut script = Script::new();
    push_insert_messages(&mut script, messages)?;
    script.execute(tx).await?;
    Ok(())
}

/// Appends the statements marking a run as running.
pub(crate) fn push_run_started(
    script: &mut Script,
    session_id: SessionId,
    run_id: RunId,
    trace_id: Option<&str>,
    at: &str,
) {
    script
        .statement("UPDATE runs SET status = 'running', started_at = ")
        .push_bind(at.to_string())
        .push(", trace_id = ")
        .push_bind(trace_id.map(str::to_string))
        .push(" WHERE id = ")
        .push_bind(run_id.to_string());
    script
        .statement("UPDATE sessions SET updated_at = ")
        .push_bind(at.to_string())
        .push(" WHERE id = ")
        .push_bind(session_id.to_string());
}

/// Appends the statement storing a session's CLI session id.
pub(crate) fn push_cli_session_id(
    script: &mut Script,
    session_id: SessionId,
    cli_session_id: &str,
    at: &str,
) {
    push_session_column(script, session_id, "cli_session_id", cli_session_id, at);
}

/// Appends the statement replacing a session's engineConfig (a JSON object).
pub(crate) fn push_session_engine_config(
    script: &mut Script,
    session_id: SessionId,
    engine_config: &str,
    at: &str,
) {
    push_session_column(script, session_id, "engine_config", engine_config, at);
}

/// Appends `UPDATE sessions SET <column> = value, updated_at = at` for one session; `column` is
/// one of the callers' constants, never input.
fn push_session_column(
    script: &mut Script,
    session_id: SessionId,
    column: &'static str,
    value: &str,
    at: &str,
) {
    script
        .statement("UPDATE sessions SET ")
        .push(column)
        .push(" = ")
        .push_bind(value.to_string())
        .push(", updated_at = ")
        .push_bind(at.to_string())
        .push(" WHERE id = ")
        .push_bind(session_id.to_string());
}

/// Appends the statements recording a run's end.
pub(crate) fn push_run_finished(
    script: &mut Script,
    session_id: SessionId,
    run_id: RunId,
    outcome: &RunOutcome,
    at: &str,
) {
    let error = outcome.error.as_ref();
    script
        .statement("UPDATE runs SET status = ")
        .push_bind(outcome.finish_reason.run_status().as_str())
        .push(", finish_reason = ")
        .push_bind(outcome.finish_reason.as_str())
        .push(", input_tokens = ")
        .push_bind(outcome.usage.input_tokens as i64)
        .push(", output_tokens = ")
        .push_bind(outcome.usage.output_tokens as i64)
        .push(", cache_read_tokens = ")
        .push_bind(outcome.usage.cache_read_tokens as i64)
        .push(", cache_write_tokens = ")
        .push_bind(outcome.usage.cache_write_tokens as i64)
        .push(", iterations = ")
        .push_bind(outcome.iterations as i64)
        .push(", ended_at = ")
        .push_bind(at.to_string())
        .push(", error_code = ")
        .push_bind(error.map(|e| e.code.as_str()))
        .push(", error_message = ")
        .push_bind(error.map(|e| e.message.clone()))
        .push(" WHERE id = ")
        .push_bind(run_id.to_string());
    script
        .statement("UPDATE sessions SET updated_at = ")
        .push_bind(at.to_string())
        .push(" WHERE id = ")
        .push_bind(session_id.to_string());
    // The run's ledger rows; OR IGNORE: a retried end may follow a commit that went through.
    if !outcome.model_calls.is_empty() {
        let qb = script.statement(&crate::ledger_rows::MODEL_CALL_COLUMNS.replacen(
            "INSERT",
            "INSERT OR IGNORE",
            1,
        ));
        crate::ledger_rows::push_call_values(qb, &outcome.model_calls);
    }
}

/// Appends the statement writing a run's end to the outbox of run-end webhooks, in the
/// transaction that ends the run (see [`crate::DeliveryStore::pending_run_ends`]).
pub(crate) fn push_run_end_notice(
    script: &mut Script,
    session_id: SessionId,
    run_id: RunId,
    at: &str,
) {
    script
        .statement("INSERT INTO run_end_outbox (run_id, session_id, ended_at) VALUES (")
        .push_bind(run_id.to_string())
        .push(", ")
        .push_bind(session_id.to_string())
        .push(", ")
        .push_bind(at.to_string())
        .push(") ON CONFLICT (run_id) DO NOTHING");
}
