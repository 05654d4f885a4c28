//! Decoding rows into domain records.

use crate::codec::{parse, parse_opt, parse_ts};
use crate::deltas;
use crate::{StoreError, StoreResult, StoredEvent};
use elfgate_core::{Message, Run, Session, TokenUsage};
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
        // Checked when stored since cliBackend became typed; before, a non-cli session kept any
        // text here unread, so such a value reads as none rather than making the row unreadable.
        cli_backend: r
            .try_get::<Option<String>, _>("cli_backend")?
            .and_then(|b| b.parse().ok()),
        project_path: r.try_get("project_path")?,
        agent_id: r.try_get("agent_id")?,
        system_prompt: r.try_get("system_prompt")?,
        permission_mode: parse_opt("permission mode", r.try_get("permission_mode")?)?,
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
        usage: TokenUsage {
            input_tokens: r.try_get::<i64, _>("input_tokens")?.max(0) as u64,
            output_tokens: r.try_get::<i64, _>("output_tokens")?.max(0) as u64,
            cache_read_tokens: r.try_get::<i64, _>("cache_read_tokens")?.max(0) as u64,
            cache_write_tokens: r.try_get::<i64, _>("cache_write_tokens")?.max(0) as u64,
        },
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

/// The highest seq logged for a session (one `?`: the session). A merged row covers
/// `seq..=last_seq` and rows never overlap, so the row with the highest first seq holds it.
pub(super) const LAST_LOGGED_SEQ: &str =
    "SELECT COALESCE(last_seq, seq) FROM events WHERE session_id = ? ORDER BY seq DESC LIMIT 1";

/// Appends the events of one log row (columns `seq, last_seq, type, payload, run_id`) with seq >
/// `after`: the row's own event, or each delta of a
/// merged row (see `deltas`), as it was published.
pub(super) fn push_row_events(
    out: &mut Vec<StoredEvent>,
    session: &str,
    r: &SqliteRow,
    after: u64,
) -> StoreResult<()> {
    let seq = r.try_get::<i64, _>("seq")?.max(0) as u64;
    let event_type: String = r.try_get("type")?;
    let payload: String = r.try_get("payload")?;
    let Some(last) = r.try_get::<Option<i64>, _>("last_seq")? else {
        if seq > after {
            out.push(StoredEvent {
                seq,
                event_type,
                json: payload,
            });
        }
        return Ok(());
    };
    let run: Option<String> = r.try_get("run_id")?;
    let run = run.ok_or_else(|| StoreError::Corrupt(format!("merged row {seq} without a run")))?;
    let events = deltas::expand(session, &run, seq, last.max(0) as u64, &payload, after)?;
    out.extend(events.into_iter().map(|(seq, json)| StoredEvent {
        seq,
        event_type: event_type.clone(),
        json,
    }));
    Ok(())
}
