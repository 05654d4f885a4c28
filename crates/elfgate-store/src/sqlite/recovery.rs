//! Restart recovery: ends the runs a crash left unfinished and logs the ends that never reached
//! the event log. What is written is decided in `recovery_plan`, shared with PostgreSQL.

use super::SqliteStore;
use crate::codec::ts;
use crate::recovery_plan::{
    self, DAEMON_RESTART, dangling_tool_results, partial_answer, run_end_events,
};
use crate::rows::{message_from_row, push_row_events, run_from_row};
use crate::shared::LAST_LOGGED_SEQ;
use crate::statements::insert_messages_tx;
use crate::{RecoveredRun, StoreResult};
use chrono::Utc;
use elfgate_core::{EventRecord, FinishReason, Message, Run, RunStatus};
use sqlx::{Sqlite, Transaction};

async fn append_events_tx(
    tx: &mut Transaction<'_, Sqlite>,
    events: &[EventRecord],
) -> StoreResult<u64> {
    let mut last = 0;
    for rec in events {
        sqlx::query(
            "INSERT INTO events (session_id, seq, run_id, type, payload, created_at) VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(rec.session_id.to_string())
        .bind(rec.seq as i64)
        .bind(rec.run_id.map(|r| r.to_string()))
        .bind(rec.event_type())
        .bind(&rec.json)
        .bind(ts(&rec.ts))
        .execute(&mut **tx)
        .await?;
        last = rec.seq;
    }
    Ok(last)
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
                // `result` may have reached the log in an earlier commit than `complete`.
                let has_result: bool = sqlx::query_scalar(
                    "SELECT EXISTS (SELECT 1 FROM events WHERE session_id = ? AND run_id = ? \
                     AND type = 'result')",
                )
                .bind(&sid)
                .bind(run.id.to_string())
                .fetch_one(&mut *tx)
                .await?;
                let events = run_end_events(
                    run,
                    seq,
                    recovery_plan::stored_duration_ms(run),
                    finish_reason,
                    !has_result,
                );
                seq = append_events_tx(&mut tx, &events).await?;
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
        let ending = DAEMON_RESTART;
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
        // A workflow's run: the step it was in, for its stored error.
        let step_rows = sqlx::query(
            "SELECT seq, last_seq, type, payload, run_id FROM events WHERE session_id = ? \
             AND run_id = ? AND type IN ('stepStart', 'stepEnd') ORDER BY seq",
        )
        .bind(&sid)
        .bind(&rid)
        .fetch_all(&mut *tx)
        .await?;
        let mut steps = Vec::new();
        for r in &step_rows {
            push_row_events(&mut steps, &sid, r, 0)?;
        }
        let step = recovery_plan::step_in_progress(&steps);
        let last =
            sqlx::query("SELECT * FROM messages WHERE session_id = ? ORDER BY rowid DESC LIMIT 1")
                .bind(&sid)
                .fetch_optional(&mut *tx)
                .await?;
        let last = last.as_ref().map(message_from_row).transpose()?;
        let (answer, partial_text_chars) = partial_answer(run, &deltas, last.as_ref());
        let mut parent = last.map(|m| m.id);
        if let Some(m) = &answer {
            insert_messages_tx(&mut tx, &[m]).await?;
            parent = Some(m.id);
        }

        let run_messages = sqlx::query("SELECT * FROM messages WHERE run_id = ? ORDER BY rowid")
            .bind(&rid)
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(message_from_row)
            .collect::<StoreResult<Vec<Message>>>()?;
        let dangling = dangling_tool_results(run, &run_messages, parent, ending);
        let synthetic_tool_results = dangling.as_ref().map_or(0, |m| m.blocks.len());
        if let Some(m) = &dangling {
            insert_messages_tx(&mut tx, &[m]).await?;
        }

        let now = Utc::now();
        let error = recovery_plan::run_error(&ending, step.as_deref());
        sqlx::query(
            "UPDATE runs SET status = ?, finish_reason = ?, ended_at = ?, error_code = ?, \
             error_message = ? WHERE id = ?",
        )
        .bind(RunStatus::Interrupted.as_str())
        .bind(ending.finish_reason.as_str())
        .bind(ts(&now))
        .bind(error.code)
        .bind(error.message)
        .bind(&rid)
        .execute(&mut *tx)
        .await?;
        if self.record_run_ends {
            sqlx::query(
                "INSERT INTO run_end_outbox (run_id, session_id, ended_at) VALUES (?, ?, ?) \
                 ON CONFLICT (run_id) DO NOTHING",
            )
            .bind(&rid)
            .bind(&sid)
            .bind(ts(&now))
            .execute(&mut *tx)
            .await?;
        }

        let seq = next_seq_tx(&mut tx, &sid).await? - 1;
        let events = run_end_events(
            run,
            seq,
            recovery_plan::millis_between(run.started_at, now),
            ending.finish_reason,
            true,
        );
        let last = append_events_tx(&mut tx, &events).await?;
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
            finish_reason: ending.finish_reason,
        })
    }
}
