//! Decoding rows into domain records, for both backends: both schemas store the same values in
//! the same column names (text ids and timestamps, 64-bit integers), read through [`RowRead`].

use crate::codec::{parse, parse_opt, parse_ts};
use crate::deltas;
use crate::{StoreError, StoreResult, StoredEvent};
use elfgate_core::{EventType, Message, Ownership, Run, RunError, Session, TokenUsage};
use sqlx::Row;

/// The column reads the decoders need, for a row of either backend.
pub(crate) trait RowRead {
    fn text(&self, column: &str) -> Result<String, sqlx::Error>;
    fn opt_text(&self, column: &str) -> Result<Option<String>, sqlx::Error>;
    fn int(&self, column: &str) -> Result<i64, sqlx::Error>;
    fn opt_int(&self, column: &str) -> Result<Option<i64>, sqlx::Error>;
}

macro_rules! row_read {
    ($row:ty) => {
        impl RowRead for $row {
            fn text(&self, column: &str) -> Result<String, sqlx::Error> {
                self.try_get(column)
            }
            fn opt_text(&self, column: &str) -> Result<Option<String>, sqlx::Error> {
                self.try_get(column)
            }
            fn int(&self, column: &str) -> Result<i64, sqlx::Error> {
                self.try_get(column)
            }
            fn opt_int(&self, column: &str) -> Result<Option<i64>, sqlx::Error> {
                self.try_get(column)
            }
        }
    };
}
row_read!(sqlx::sqlite::SqliteRow);
row_read!(sqlx::postgres::PgRow);

pub(crate) fn session_from_row(r: &impl RowRead) -> StoreResult<Session> {
    let config: String = r.text("engine_config")?;
    Ok(Session {
        id: parse("session id", &r.text("id")?)?,
        engine: parse("engine", &r.text("engine")?)?,
        title: r.opt_text("title")?,
        provider_id: r.opt_text("provider_id")?,
        model: r.opt_text("model")?,
        // Checked when stored since cliBackend became typed; before, a non-cli session kept any
        // text here unread, so such a value reads as none rather than making the row unreadable.
        cli_backend: r.opt_text("cli_backend")?.and_then(|b| b.parse().ok()),
        project_path: r.opt_text("project_path")?,
        agent_id: r.opt_text("agent_id")?,
        system_prompt: r.opt_text("system_prompt")?,
        permission_mode: parse_opt("permission mode", r.opt_text("permission_mode")?)?,
        engine_config: serde_json::from_str(&config)
            .map_err(|e| StoreError::Corrupt(format!("engine_config: {e}")))?,
        cli_session_id: r.opt_text("cli_session_id")?,
        created_at: parse_ts(&r.text("created_at")?)?,
        updated_at: parse_ts(&r.text("updated_at")?)?,
        ownership: Ownership {
            owner: r.text("owner")?,
            team: r.text("team")?,
            visibility: parse("visibility", &r.text("visibility")?)?,
        },
    })
}

pub(crate) fn run_from_row(r: &impl RowRead) -> StoreResult<Run> {
    Ok(Run {
        id: parse("run id", &r.text("id")?)?,
        session_id: parse("session id", &r.text("session_id")?)?,
        status: parse("run status", &r.text("status")?)?,
        finish_reason: parse_opt("finish reason", r.opt_text("finish_reason")?)?,
        usage: TokenUsage {
            input_tokens: r.int("input_tokens")?.max(0) as u64,
            output_tokens: r.int("output_tokens")?.max(0) as u64,
            cache_read_tokens: r.int("cache_read_tokens")?.max(0) as u64,
            cache_write_tokens: r.int("cache_write_tokens")?.max(0) as u64,
        },
        iterations: r.int("iterations")?.max(0) as u32,
        started_at: parse_ts(&r.text("started_at")?)?,
        ended_at: r.opt_text("ended_at")?.map(|s| parse_ts(&s)).transpose()?,
        error: run_error(r.opt_text("error_code")?, r.opt_text("error_message")?)?,
        client_msg_id: r.opt_text("client_msg_id")?,
        channel: match r.opt_text("channel")? {
            Some(text) => serde_json::from_str(&text)
                .map_err(|e| StoreError::Corrupt(format!("run channel: {e}")))?,
            None => Default::default(),
        },
        // The ledger's, filled in by the reads that show it.
        cost_usd: None,
        trace_id: r.opt_text("trace_id")?,
    })
}

/// A run's error from its two columns: both set or neither.
fn run_error(code: Option<String>, message: Option<String>) -> StoreResult<Option<RunError>> {
    match (code, message) {
        (Some(code), Some(message)) => Ok(Some(RunError { code, message })),
        (None, None) => Ok(None),
        (code, _) => Err(StoreError::Corrupt(format!(
            "run error: {} without {}",
            if code.is_some() {
                "a code"
            } else {
                "a message"
            },
            if code.is_some() {
                "a message"
            } else {
                "a code"
            },
        ))),
    }
}

pub(crate) fn audit_from_row(r: &impl RowRead) -> StoreResult<elfgate_core::AuditRecord> {
    let input: String = r.text("input")?;
    Ok(elfgate_core::AuditRecord {
        session_id: parse("session id", &r.text("session_id")?)?,
        run_id: parse("run id", &r.text("run_id")?)?,
        call: elfgate_core::BlockedCall {
            tool_use_id: r.text("tool_use_id")?,
            tool_name: r.text("tool_name")?,
            gate: parse("gate", &r.text("gate")?)?,
            reason: r.text("reason")?,
        },
        input: serde_json::from_str(&input)
            .map_err(|e| StoreError::Corrupt(format!("audit input: {e}")))?,
        created_at: parse_ts(&r.text("created_at")?)?,
    })
}

pub(crate) fn workflow_from_row(r: &impl RowRead) -> StoreResult<crate::StoredWorkflow> {
    let definition: String = r.text("definition")?;
    let version = r.int("version")?;
    Ok(crate::StoredWorkflow {
        name: r.text("name")?,
        version: u32::try_from(version)
            .map_err(|_| StoreError::Corrupt(format!("workflow version {version}")))?,
        definition: serde_json::from_str(&definition)
            .map_err(|e| StoreError::Corrupt(format!("workflow definition: {e}")))?,
        created_at: parse_ts(&r.text("created_at")?)?,
        deleted_at: r
            .opt_text("deleted_at")?
            .map(|s| parse_ts(&s))
            .transpose()?,
        ownership: Ownership {
            owner: r.text("owner")?,
            team: r.text("team")?,
            visibility: elfgate_core::Visibility::Team,
        },
    })
}

pub(crate) fn run_end_notice_from_row(r: &impl RowRead) -> StoreResult<crate::RunEndNotice> {
    Ok(crate::RunEndNotice {
        run_id: parse("run id", &r.text("run_id")?)?,
        session_id: parse("session id", &r.text("session_id")?)?,
        ended_at: parse_ts(&r.text("ended_at")?)?,
    })
}

pub(crate) fn delivery_from_row(r: &impl RowRead) -> StoreResult<crate::WebhookDelivery> {
    let body: String = r.text("body")?;
    let status = match r.text("status")?.as_str() {
        "pending" => crate::DeliveryStatus::Pending,
        "delivered" => crate::DeliveryStatus::Delivered,
        "failed" => crate::DeliveryStatus::Failed,
        other => return Err(StoreError::Corrupt(format!("delivery status '{other}'"))),
    };
    Ok(crate::WebhookDelivery {
        id: r.text("id")?,
        target: r.text("target")?,
        url: r.text("url")?,
        body: serde_json::from_str(&body)
            .map_err(|e| StoreError::Corrupt(format!("delivery body: {e}")))?,
        status,
        attempts: u32::try_from(r.int("attempts")?).unwrap_or(u32::MAX),
        next_attempt_at: parse_ts(&r.text("next_attempt_at")?)?,
        last_status: r
            .opt_int("last_status")?
            .and_then(|s| u16::try_from(s).ok()),
        last_error: r.opt_text("last_error")?,
        created_at: parse_ts(&r.text("created_at")?)?,
        updated_at: parse_ts(&r.text("updated_at")?)?,
    })
}

pub(crate) fn message_from_row(r: &impl RowRead) -> StoreResult<Message> {
    let blocks: String = r.text("blocks")?;
    Ok(Message {
        id: parse("message id", &r.text("id")?)?,
        session_id: parse("session id", &r.text("session_id")?)?,
        run_id: parse_opt("run id", r.opt_text("run_id")?)?,
        parent_id: parse_opt("parent id", r.opt_text("parent_id")?)?,
        role: parse("role", &r.text("role")?)?,
        blocks: serde_json::from_str(&blocks)
            .map_err(|e| StoreError::Corrupt(format!("message blocks: {e}")))?,
        model: r.opt_text("model")?,
        input_tokens: r.opt_int("input_tokens")?.map(|v| v.max(0) as u64),
        output_tokens: r.opt_int("output_tokens")?.map(|v| v.max(0) as u64),
        created_at: parse_ts(&r.text("created_at")?)?,
    })
}

/// Appends the events of one log row (columns `seq, last_seq, type, payload, run_id`) with seq >
/// `after`: the row's own event, or each delta of a
/// merged row (see `deltas`), as it was published.
pub(crate) fn push_row_events(
    out: &mut Vec<StoredEvent>,
    session: &str,
    r: &impl RowRead,
    after: u64,
) -> StoreResult<()> {
    let seq = r.int("seq")?.max(0) as u64;
    let name: String = r.text("type")?;
    // A type this version does not know was written by a newer one (a fleet in a rolling
    // upgrade, or a downgrade): the event is left out of what this node replays, with a warning,
    // rather than the whole log refused for it.
    let Some(event_type) = EventType::from_name(&name) else {
        tracing::warn!(
            session = %session,
            seq,
            event_type = %name,
            "an event of a type this version does not know was left out of a replay"
        );
        return Ok(());
    };
    let payload: String = r.text("payload")?;
    let Some(last) = r.opt_int("last_seq")? else {
        if seq > after {
            out.push(StoredEvent {
                seq,
                event_type,
                json: payload,
            });
        }
        return Ok(());
    };
    let run: Option<String> = r.opt_text("run_id")?;
    let run = run.ok_or_else(|| StoreError::Corrupt(format!("merged row {seq} without a run")))?;
    let events = deltas::expand(session, &run, seq, last.max(0) as u64, &payload, after)?;
    out.extend(events.into_iter().map(|(seq, json)| StoredEvent {
        seq,
        event_type,
        json,
    }));
    Ok(())
}

/// The first text block of stored `blocks`, cut to [`crate::FIRST_PROMPT_CHARS`] characters.
pub(crate) fn first_text(blocks: &str) -> Option<String> {
    let blocks: Vec<elfgate_core::ContentBlock> = serde_json::from_str(blocks).ok()?;
    blocks.into_iter().find_map(|b| match b {
        elfgate_core::ContentBlock::Text { text } if !text.trim().is_empty() => {
            Some(text.chars().take(crate::FIRST_PROMPT_CHARS).collect())
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a test fails loudly")]
    use super::*;
    use std::collections::HashMap;

    /// A row of the events table, as the decoders read it.
    struct FakeRow(HashMap<&'static str, String>);

    impl RowRead for FakeRow {
        fn text(&self, column: &str) -> Result<String, sqlx::Error> {
            self.0
                .get(column)
                .cloned()
                .ok_or_else(|| sqlx::Error::ColumnNotFound(column.into()))
        }
        fn opt_text(&self, column: &str) -> Result<Option<String>, sqlx::Error> {
            Ok(self.0.get(column).cloned())
        }
        fn int(&self, column: &str) -> Result<i64, sqlx::Error> {
            Ok(self.text(column)?.parse().unwrap())
        }
        fn opt_int(&self, column: &str) -> Result<Option<i64>, sqlx::Error> {
            Ok(self.opt_text(column)?.map(|v| v.parse().unwrap()))
        }
    }

    fn row(seq: u64, event_type: &str) -> FakeRow {
        FakeRow(HashMap::from([
            ("seq", seq.to_string()),
            ("type", event_type.to_string()),
            (
                "payload",
                format!(r#"{{"seq":{seq},"type":"{event_type}"}}"#),
            ),
        ]))
    }

    #[test]
    fn an_event_of_a_type_from_a_newer_version_is_left_out_of_a_replay() {
        let mut out = Vec::new();
        for (seq, t) in [(1, "processing"), (2, "somethingNewer"), (3, "processing")] {
            push_row_events(&mut out, "s1", &row(seq, t), 0).unwrap();
        }
        let seqs: Vec<u64> = out.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [1, 3]);
        assert!(out.iter().all(|e| e.event_type == EventType::Processing));
    }
}
