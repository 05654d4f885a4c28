//! Restart recovery: ends the runs a crash left unfinished and logs the ends that never reached
//! the event log.

use super::SqliteStore;
use super::rows::{LAST_LOGGED_SEQ, message_from_row, push_row_events, run_from_row};
use crate::codec::ts;
use crate::statements::insert_messages_tx;
use crate::{RecoveredRun, StoreResult};
use chrono::Utc;
use elfgate_core::{
    ContentBlock, EventPayload, EventRecord, FinishReason, Message, Role, Run, RunId, RunStats,
    RunStatus, SessionId,
};
use sqlx::sqlite::SqliteRow;
use sqlx::{Sqlite, Transaction};
use std::collections::HashSet;

async fn append_event_tx(
    tx: &mut Transaction<'_, Sqlite>,
    session_id: SessionId,
    run_id: RunId,
    seq: u64,
    payload: &EventPayload,
) -> StoreResult<()> {
    let rec = EventRecord::build(session_id, seq, Some(run_id), payload.clone());
    sqlx::query(
        "INSERT INTO events (session_id, seq, run_id, type, payload, created_at) VALUES (?, ?, ?, ?, ?, ?)",
    )
    .bind(session_id.to_string())
    .bind(seq as i64)
    .bind(run_id.to_string())
    .bind(rec.event_type())
    .bind(&rec.json)
    .bind(ts(&rec.ts))
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Logs a run's end above seq `after`: `result` (when `with_result`; it carries the run's stored
/// tokens and iterations) and `complete`. Returns the last seq used.
async fn append_run_end_tx(
    tx: &mut Transaction<'_, Sqlite>,
    run: &Run,
    after: u64,
    duration_ms: u64,
    finish_reason: FinishReason,
    with_result: bool,
) -> StoreResult<u64> {
    let mut seq = after;
    if with_result {
        seq += 1;
        let stats = RunStats {
            usage: run.usage,
            output_tokens_estimated: false,
            input_tokens_estimated: false,
            iterations: run.iterations,
            duration_ms,
            finish_reason,
            model_finish_reason: None,
            stop_sequence: None,
        };
        append_event_tx(
            tx,
            run.session_id,
            run.id,
            seq,
            &EventPayload::Result { stats },
        )
        .await?;
    }
    seq += 1;
    append_event_tx(
        tx,
        run.session_id,
        run.id,
        seq,
        &EventPayload::Complete { finish_reason },
    )
    .await?;
    Ok(seq)
}

/// The seq a session's next logged event gets after a crash: seqs up to the reservation may have
/// reached clients, so numbering continues above it.
async fn next_seq_tx(tx: &mut Transaction<'_, Sqlite>, sid: &str) -> StoreResult<u64> {
    let last_seq: Option<i64> = sqlx::query_scalar(LAST_LOGGED_SEQ)
        .bind(sid)
        .fetch_optional(&mut **tx)
        .await?;
    let reserved: Option<i64> =
        sqlx::query_scalar("SELECT event_seq_reserved FROM sessions WHERE id = ?")
            .bind(sid)
            .fetch_optional(&mut **tx)
            .await?;
    Ok(last_seq.unwrap_or(0).max(reserved.unwrap_or(0)).max(0) as u64 + 1)
}

impl SqliteStore {
    /// Logs `result` and `complete` for runs that ended but whose last events never reached the
    /// log: the dispatcher records a run's end before it publishes them, and the log is written a
    /// little later, so a crash in between leaves an ended run without its `complete`. Only a
    /// session whose seq reservation was not released (its bus was open at the crash) can have
    /// one. Returns how many runs got their end logged.
    pub(super) async fn log_missing_ends(&self) -> StoreResult<usize> {
        let sessions: Vec<String> = sqlx::query_scalar(
            "SELECT s.id FROM sessions s WHERE s.event_seq_reserved > \
             COALESCE((SELECT COALESCE(e.last_seq, e.seq) FROM events e \
             WHERE e.session_id = s.id ORDER BY e.seq DESC LIMIT 1), 0)",
        )
        .fetch_all(&self.write)
        .await?;
        let mut logged = 0;
        for sid in sessions {
            let runs = sqlx::query(
                "SELECT * FROM runs r WHERE r.session_id = ? \
                 AND r.status NOT IN ('running', 'queued') \
                 AND NOT EXISTS (SELECT 1 FROM events e WHERE e.session_id = r.session_id \
                 AND e.run_id = r.id AND e.type = 'complete') ORDER BY r.started_at, r.rowid",
            )
            .bind(&sid)
            .fetch_all(&self.write)
            .await?
            .iter()
            .map(run_from_row)
            .collect::<StoreResult<Vec<_>>>()?;
            if runs.is_empty() {
                continue;
            }
            let mut tx = self.write.begin().await?;
            // The last seq used; each run's end goes above it.
            let mut seq = next_seq_tx(&mut tx, &sid).await? - 1;
            for run in &runs {
                let finish_reason = run.finish_reason.unwrap_or(FinishReason::Error);
                let duration_ms = run
                    .ended_at
                    .map(|end| (end - run.started_at).num_milliseconds().max(0) as u64)
                    .unwrap_or(0);
                // `result` may have reached the log in an earlier commit than `complete`.
                let has_result: bool = sqlx::query_scalar(
                    "SELECT EXISTS (SELECT 1 FROM events WHERE session_id = ? AND run_id = ? \
                     AND type = 'result')",
                )
                .bind(&sid)
                .bind(run.id.to_string())
                .fetch_one(&mut *tx)
                .await?;
                seq = append_run_end_tx(&mut tx, run, seq, duration_ms, finish_reason, !has_result)
                    .await?;
                logged += 1;
            }
            sqlx::query("UPDATE sessions SET event_seq_reserved = ? WHERE id = ?")
                .bind(seq as i64)
                .bind(&sid)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            tracing::warn!(session = %sid, runs = runs.len(), "logged the end of runs whose last events were lost");
        }
        Ok(logged)
    }

    /// Ends one run left unfinished by a crash: keeps the partial answer found in the event log,
    /// answers dangling tool calls, and logs `result` and `complete`. All in one transaction.
    pub(super) async fn recover_run(&self, run: &Run) -> StoreResult<RecoveredRun> {
        let sid = run.session_id.to_string();
        let rid = run.id.to_string();
        let mut tx = self.write.begin().await?;

        // The answer streamed since the run's last stored assistant message.
        let after_seq: Option<i64> = sqlx::query_scalar(
            "SELECT MAX(seq) FROM events WHERE session_id = ? AND run_id = ? AND type = 'assistantMessage'",
        )
        .bind(&sid)
        .bind(&rid)
        .fetch_one(&mut *tx)
        .await?;
        // No merged row straddles an assistantMessage: it holds consecutive deltas only.
        let rows = sqlx::query(
            "SELECT seq, last_seq, type, payload, run_id FROM events WHERE session_id = ? \
             AND run_id = ? AND type = 'streamDelta' AND seq > ? ORDER BY seq",
        )
        .bind(&sid)
        .bind(&rid)
        .bind(after_seq.unwrap_or(0))
        .fetch_all(&mut *tx)
        .await?;
        let mut deltas = Vec::new();
        for r in &rows {
            push_row_events(&mut deltas, &sid, r, 0)?;
        }
        let (mut text, mut thinking) = (String::new(), String::new());
        for d in &deltas {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&d.json) {
                let piece = v["delta"]["text"].as_str().unwrap_or_default();
                match v["delta"]["kind"].as_str() {
                    Some("thinking") => thinking.push_str(piece),
                    _ => text.push_str(piece),
                }
            }
        }
        let last: Option<SqliteRow> =
            sqlx::query("SELECT * FROM messages WHERE session_id = ? ORDER BY rowid DESC LIMIT 1")
                .bind(&sid)
                .fetch_optional(&mut *tx)
                .await?;
        let last = last.as_ref().map(message_from_row).transpose()?;
        // The answer may be stored already while its assistantMessage event had not reached the
        // log: then the deltas are that answer, not a lost partial one.
        // (The logged deltas may also be only a prefix of it, when the message's commit overtook
        // the tail of the log.)
        let already_stored = last.as_ref().is_some_and(|m| {
            m.run_id == Some(run.id) && m.role == Role::Assistant && m.text().starts_with(&text)
        });
        let mut parent = last.map(|m| m.id);
        if already_stored {
            text.clear();
            thinking.clear();
        }
        let partial_text_chars = text.chars().count();
        if !text.is_empty() || !thinking.is_empty() {
            let mut blocks = Vec::new();
            if !thinking.is_empty() {
                blocks.push(ContentBlock::Thinking {
                    thinking,
                    signature: None,
                });
            }
            if !text.is_empty() {
                blocks.push(ContentBlock::Text { text });
            }
            let m = Message::new(
                run.session_id,
                Some(run.id),
                parent,
                Role::Assistant,
                blocks,
            );
            insert_messages_tx(&mut tx, &[&m]).await?;
            parent = Some(m.id);
        }

        // Tool calls of this run without a result get a synthetic one, so the transcript stays valid.
        let rows = sqlx::query("SELECT * FROM messages WHERE run_id = ? ORDER BY rowid")
            .bind(&rid)
            .fetch_all(&mut *tx)
            .await?;
        let mut calls = Vec::new();
        let mut answered = HashSet::new();
        for r in &rows {
            let m = message_from_row(r)?;
            for b in m.blocks {
                match b {
                    ContentBlock::ToolUse { id, .. } => calls.push(id),
                    ContentBlock::ToolResult { tool_use_id, .. } => {
                        answered.insert(tool_use_id);
                    }
                    _ => {}
                }
            }
        }
        let dangling: Vec<ContentBlock> = calls
            .into_iter()
            .filter(|id| !answered.contains(id))
            .map(|id| ContentBlock::ToolResult {
                tool_use_id: id,
                content: "interrupted: the daemon restarted before this tool call finished"
                    .to_string(),
                is_error: true,
            })
            .collect();
        let synthetic_tool_results = dangling.len();
        if !dangling.is_empty() {
            let m = Message::new(run.session_id, Some(run.id), parent, Role::Tool, dangling);
            insert_messages_tx(&mut tx, &[&m]).await?;
        }

        let now = Utc::now();
        sqlx::query(
            "UPDATE runs SET status = ?, finish_reason = ?, ended_at = ?, error = ? WHERE id = ?",
        )
        .bind(RunStatus::Interrupted.as_str())
        .bind(FinishReason::DaemonRestart.as_str())
        .bind(ts(&now))
        .bind("daemon_restart: the daemon stopped while the run was going")
        .bind(&rid)
        .execute(&mut *tx)
        .await?;

        let seq = next_seq_tx(&mut tx, &sid).await? - 1;
        let duration_ms = (now - run.started_at).num_milliseconds().max(0) as u64;
        let last = append_run_end_tx(
            &mut tx,
            run,
            seq,
            duration_ms,
            FinishReason::DaemonRestart,
            true,
        )
        .await?;
        sqlx::query("UPDATE sessions SET event_seq_reserved = ? WHERE id = ?")
            .bind(last as i64)
            .bind(&sid)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(RecoveredRun {
            session_id: run.session_id,
            run_id: run.id,
            partial_text_chars,
            synthetic_tool_results,
        })
    }
}
