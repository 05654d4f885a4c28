//! The writes on a run's path, in PostgreSQL's SQL: each in a transaction of the caller's, so
//! that a session and its first run and prompt, or a run's end and its answer, land together.
//! The same columns and values as SQLite's `statements`.

use crate::codec::ts;
use crate::{StoreError, StoreResult};
use elfgate_core::{Message, Run, RunId, RunOutcome, SEQ_RESERVE_BLOCK, Session, SessionId};
use sqlx::PgConnection;

fn json_text(v: &impl serde::Serialize) -> StoreResult<String> {
    serde_json::to_string(v).map_err(|e| StoreError::Corrupt(format!("serialize: {e}")))
}

pub(super) async fn insert_session(conn: &mut PgConnection, s: &Session) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO sessions (id, engine, title, provider_id, model, cli_backend, project_path, \
         agent_id, system_prompt, permission_mode, engine_config, cli_session_id, \
         event_seq_reserved, created_at, updated_at, owner, team, visibility) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)",
    )
    .bind(s.id.to_string())
    .bind(s.engine.as_str())
    .bind(&s.title)
    .bind(&s.provider_id)
    .bind(&s.model)
    .bind(s.cli_backend.map(elfgate_core::CliBackend::as_str))
    .bind(&s.project_path)
    .bind(&s.agent_id)
    .bind(&s.system_prompt)
    .bind(s.permission_mode.map(elfgate_core::PermissionMode::as_str))
    .bind(json_text(&s.engine_config)?)
    .bind(&s.cli_session_id)
    // A new session's bus starts at 0 inside this first reservation.
    .bind(SEQ_RESERVE_BLOCK as i64)
    .bind(ts(&s.created_at))
    .bind(ts(&s.updated_at))
    .bind(&s.ownership.owner)
    .bind(&s.ownership.team)
    .bind(s.ownership.visibility.as_str())
    .execute(conn)
    .await?;
    Ok(())
}

pub(super) async fn insert_run(conn: &mut PgConnection, run: &Run) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO runs (id, session_id, status, finish_reason, input_tokens, output_tokens, \
         iterations, started_at, ended_at, error_code, error_message, client_msg_id, channel) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
    )
    .bind(run.id.to_string())
    .bind(run.session_id.to_string())
    .bind(run.status.as_str())
    .bind(run.finish_reason.map(elfgate_core::FinishReason::as_str))
    .bind(run.usage.input_tokens as i64)
    .bind(run.usage.output_tokens as i64)
    .bind(run.iterations as i64)
    .bind(ts(&run.started_at))
    .bind(run.ended_at.as_ref().map(ts))
    .bind(run.error.as_ref().map(|e| &e.code))
    .bind(run.error.as_ref().map(|e| &e.message))
    .bind(&run.client_msg_id)
    .bind(crate::codec::channel_text(&run.channel))
    .execute(conn)
    .await?;
    Ok(())
}

pub(super) async fn insert_message(conn: &mut PgConnection, m: &Message) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO messages (id, session_id, run_id, parent_id, role, blocks, model, \
         input_tokens, output_tokens, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
    )
    .bind(m.id.to_string())
    .bind(m.session_id.to_string())
    .bind(m.run_id.map(|r| r.to_string()))
    .bind(m.parent_id.map(|p| p.to_string()))
    .bind(m.role.as_str())
    .bind(json_text(&m.blocks)?)
    .bind(&m.model)
    .bind(m.input_tokens.map(|v| v as i64))
    .bind(m.output_tokens.map(|v| v as i64))
    .bind(ts(&m.created_at))
    .execute(conn)
    .await?;
    Ok(())
}

pub(super) async fn touch_session(
    conn: &mut PgConnection,
    session_id: SessionId,
    at: &str,
) -> StoreResult<()> {
    sqlx::query("UPDATE sessions SET updated_at = $1 WHERE id = $2")
        .bind(at)
        .bind(session_id.to_string())
        .execute(conn)
        .await?;
    Ok(())
}

pub(super) async fn run_started(
    conn: &mut PgConnection,
    session_id: SessionId,
    run_id: RunId,
    trace_id: Option<&str>,
    at: &str,
) -> StoreResult<()> {
    sqlx::query("UPDATE runs SET status = 'running', started_at = $1, trace_id = $2 WHERE id = $3")
        .bind(at)
        .bind(trace_id)
        .bind(run_id.to_string())
        .execute(&mut *conn)
        .await?;
    touch_session(conn, session_id, at).await
}

pub(super) async fn run_finished(
    conn: &mut PgConnection,
    session_id: SessionId,
    run_id: RunId,
    outcome: &RunOutcome,
    record_end: bool,
    at: &str,
) -> StoreResult<()> {
    let error = outcome.error.as_ref();
    sqlx::query(
        "UPDATE runs SET status = $1, finish_reason = $2, input_tokens = $3, output_tokens = $4, \
         cache_read_tokens = $5, cache_write_tokens = $6, iterations = $7, ended_at = $8, \
         error_code = $9, error_message = $10 WHERE id = $11",
    )
    .bind(outcome.finish_reason.run_status().as_str())
    .bind(outcome.finish_reason.as_str())
    .bind(outcome.usage.input_tokens as i64)
    .bind(outcome.usage.output_tokens as i64)
    .bind(outcome.usage.cache_read_tokens as i64)
    .bind(outcome.usage.cache_write_tokens as i64)
    .bind(outcome.iterations as i64)
    .bind(at)
    .bind(error.map(|e| e.code.as_str()))
    .bind(error.map(|e| e.message.as_str()))
    .bind(run_id.to_string())
    .execute(&mut *conn)
    .await?;
    if !outcome.model_calls.is_empty() {
        // A retried end may follow a commit that went through.
        let mut qb =
            sqlx::QueryBuilder::<sqlx::Postgres>::new(crate::ledger_rows::MODEL_CALL_COLUMNS);
        crate::ledger_rows::push_call_values(&mut qb, &outcome.model_calls);
        qb.push(" ON CONFLICT (run_id, seq) DO NOTHING");
        qb.build().execute(&mut *conn).await?;
    }
    if record_end {
        run_end_notice(conn, session_id, run_id, at).await?;
    }
    touch_session(conn, session_id, at).await
}

/// Writes a run's end to the outbox of run-end webhooks, in the transaction that ends the run
/// (see [`crate::DeliveryStore::pending_run_ends`]).
pub(super) async fn run_end_notice(
    conn: &mut PgConnection,
    session_id: SessionId,
    run_id: RunId,
    at: &str,
) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO run_end_outbox (run_id, session_id, ended_at) VALUES ($1, $2, $3) \
         ON CONFLICT (run_id) DO NOTHING",
    )
    .bind(run_id.to_string())
    .bind(session_id.to_string())
    .bind(at)
    .execute(conn)
    .await?;
    Ok(())
}

/// Which session column [`set_session_column`] writes: never input.
#[derive(Debug, Clone, Copy)]
pub(super) enum SessionColumn {
    CliSessionId,
    EngineConfig,
}

pub(super) async fn set_session_column(
    conn: &mut PgConnection,
    session_id: SessionId,
    column: SessionColumn,
    value: &str,
    at: &str,
) -> StoreResult<()> {
    let sql = match column {
        SessionColumn::CliSessionId => {
            "UPDATE sessions SET cli_session_id = $1, updated_at = $2 WHERE id = $3"
        }
        SessionColumn::EngineConfig => {
            "UPDATE sessions SET engine_config = $1, updated_at = $2 WHERE id = $3"
        }
    };
    sqlx::query(sql)
        .bind(value)
        .bind(at)
        .bind(session_id.to_string())
        .execute(conn)
        .await?;
    Ok(())
}
