//! Decoding rows into domain records.

use crate::codec::{parse, parse_opt, parse_ts};
use crate::{StoreError, StoreResult};
use elfgate_core::{Message, Run, Session};
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

pub(super) fn session_from_row(r: &SqliteRow) -> StoreResult<Session> {
    let config: String = r.try_get("engine_config")?;
    Ok(Session {
        id: parse("session id", &r.try_get::<String, _>("id")?)?,
        engine: parse("engine", &r.try_get::<String, _>("engine")?)?,
        title: r.try_get("title")?,
        provider_id: r.try_get("provider_id")?,
        model: r.try_get("model")?,
        cli_backend: r.try_get("cli_backend")?,
        project_path: r.try_get("project_path")?,
        agent_id: r.try_get("agent_id")?,
        system_prompt: r.try_get("system_prompt")?,
        permission_mode: r.try_get("permission_mode")?,
        engine_config: serde_json::from_str(&config)
            .map_err(|e| StoreError::Corrupt(format!("engine_config: {e}")))?,
        cli_session_id: r.try_get("cli_session_id")?,
        created_at: parse_ts(&r.try_get::<String, _>("created_at")?)?,
        updated_at: parse_ts(&r.try_get::<String, _>("updated_at")?)?,
    })
}

pub(super) fn run_from_row(r: &SqliteRow) -> StoreResult<Run> {
    Ok(Run {
        id: parse("run id", &r.try_get::<String, _>("id")?)?,
        session_id: parse("session id", &r.try_get::<String, _>("session_id")?)?,
        status: parse("run status", &r.try_get::<String, _>("status")?)?,
        finish_reason: parse_opt("finish reason", r.try_get("finish_reason")?)?,
        input_tokens: r.try_get::<i64, _>("input_tokens")?.max(0) as u64,
        output_tokens: r.try_get::<i64, _>("output_tokens")?.max(0) as u64,
        cache_read_tokens: r.try_get::<i64, _>("cache_read_tokens")?.max(0) as u64,
        cache_write_tokens: r.try_get::<i64, _>("cache_write_tokens")?.max(0) as u64,
        iterations: r.try_get::<i64, _>("iterations")?.max(0) as u32,
        started_at: parse_ts(&r.try_get::<String, _>("started_at")?)?,
        ended_at: r
            .try_get::<Option<String>, _>("ended_at")?
            .map(|s| parse_ts(&s))
            .transpose()?,
        error: r.try_get("error")?,
        client_msg_id: r.try_get("client_msg_id")?,
    })
}

pub(super) fn message_from_row(r: &SqliteRow) -> StoreResult<Message> {
    let blocks: String = r.try_get("blocks")?;
    Ok(Message {
        id: parse("message id", &r.try_get::<String, _>("id")?)?,
        session_id: parse("session id", &r.try_get::<String, _>("session_id")?)?,
        run_id: parse_opt("run id", r.try_get("run_id")?)?,
        parent_id: parse_opt("parent id", r.try_get("parent_id")?)?,
        role: parse("role", &r.try_get::<String, _>("role")?)?,
        blocks: serde_json::from_str(&blocks)
            .map_err(|e| StoreError::Corrupt(format!("message blocks: {e}")))?,
        model: r.try_get("model")?,
        input_tokens: r
            .try_get::<Option<i64>, _>("input_tokens")?
            .map(|v| v.max(0) as u64),
        output_tokens: r
            .try_get::<Option<i64>, _>("output_tokens")?
            .map(|v| v.max(0) as u64),
        created_at: parse_ts(&r.try_get::<String, _>("created_at")?)?,
    })
}
