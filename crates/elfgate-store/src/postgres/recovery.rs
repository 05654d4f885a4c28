//! Restart recovery on PostgreSQL: ends the runs a crash left unfinished and logs the ends that
//! never reached the event log, as the SQLite store does (what is written is decided in
//! `recovery_plan`). Each run in one transaction that first locks its session's row, so that two
//! nodes recovering at once take turns and the second finds the run already ended. A fleet
//! node's recovery is the adoption of expired sessions (`fleet`), which uses the same steps.

use super::PgStore;
use super::statements;
use crate::codec::ts;
use crate::recovery_plan::{
    self, DAEMON_RESTART, Ending, dangling_tool_results, partial_answer, run_end_events,
};
use crate::rows::{message_from_row, push_row_events, run_from_row};
use crate::shared::LAST_LOGGED_SEQ;
use crate::{RecoveredRun, StoreResult};
use chrono::Utc;
use elfgate_core::{EventRecord, FinishReason, Message, Run, RunStatus};
use sqlx::PgConnection;

async fn append_events(conn: &mut PgConnection, events: &[EventRecord]) -> StoreResult<u64> {
    let mut last = 0;
    for rec in events {
        sqlx::query(
            "INSERT INTO events (session_id, seq, run_id, type, payload, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(rec.session_id.to_string())
        .bind(rec.seq as i64)
        .bind(rec.run_id.map(|r| r.to_string()))
        .bind(rec.event_type())
        .bind(&rec.json)
        .bind(ts(&rec.ts))
        .execute(&mut *conn)
        .await?;
        last = rec.seq;
    }
    Ok(last)
}

/// Locks the session's row for the transaction and returns the seq its next logged event gets:
/// seqs up to the reservation may have reached clients, so numbering continues above it.
async fn lock_next_seq(conn: &mut PgConnection, sid: &str) -> StoreResult<u64> {
    let reserved: Option<i64> =
        sqlx::query_scalar("SELECT event_seq_reserved FROM sessions WHERE id = $1 FOR UPDATE")
            .bind(sid)
            .fetch_optional(&mut *conn)
            .await?;
    let last_seq: Option<i64> = sqlx::query_scalar(LAST_LOGGED_SEQ)
        .bind(sid)
        .fetch_optional(&mut *conn)
        .await?;
    Ok(last_seq.unwrap_or(0).max(reserved.unwrap_or(0)).max(0) as u64 + 1)
}

async fn set_reserved(conn: &mut PgConnection, sid: &str, last: u64) -> StoreResult<()> {
    sqlx::query("UPDATE sessions SET event_seq_reserved = $1 WHERE id = $2")
        .bind(last as i64)
        .bind(sid)
        .execute(conn)
        .await?;
    Ok(())
}

impl PgStore {
    pub(super) async fn recover_unfinished_runs_now(&self) -> StoreResult<Vec<RecoveredRun>> {
        let runs = sqlx::query(
            "SELECT * FROM runs WHERE status IN ('running', 'queued') ORDER BY started_at, rid",
        )
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(run_from_row)
        .collect::<StoreResult<Vec<_>>>()?;
        if self.fleet.is_some() {
            return self.adopt_expired().await;
        }
        // First the runs that did end: their `complete` must come before anything logged now.
        self.log_missing_ends_of(None).await?;
        let mut recovered = Vec::with_capacity(runs.len());
        for run in runs {
            if let Some(r) = self.end_unfinished_run(&run, DAEMON_RESTART).await? {
                recovered.push(r);
            }
        }
        Ok(recovered)
    }

    /// Logs `result` and `complete` for runs that ended but whose last events never reached the
    /// log (see the SQLite store's `log_missing_ends`). Returns how many runs got their end
    /// logged. `only`: that session alone (a fleet node adopting it), else every session.
    pub(super) async fn log_missing_ends_of(&self, only: Option<&str>) -> StoreResult<usize> {
        let sessions: Vec<String> = sqlx::query_scalar(
            "SELECT s.id FROM sessions s WHERE ($1::text IS NULL OR s.id = $1) \
             AND s.event_seq_reserved > \
             COALESCE((SELECT COALESCE(e.last_seq, e.seq) FROM events e \
             WHERE e.session_id = s.id ORDER BY e.seq DESC LIMIT 1), 0)",
        )
        .bind(only)
        .fetch_all(&self.pool)
        .await?;
        let mut logged = 0;
        for sid in sessions {
            let mut tx = self.pool.begin().await?;
            // The last seq used; each run's end goes above it.
            let mut seq = lock_next_seq(&mut tx, &sid).await? - 1;
            let runs = sqlx::query(
                "SELECT * FROM runs r WHERE r.session_id = $1 \
                 AND r.status NOT IN ('running', 'queued') \
                 AND NOT EXISTS (SELECT 1 FROM events e WHERE e.session_id = r.session_id \
                 AND e.run_id = r.id AND e.type = 'complete') ORDER BY r.started_at, r.rid",
            )
            .bind(&sid)
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(run_from_row)
            .collect::<StoreResult<Vec<_>>>()?;
            if runs.is_empty() {
                continue;
            }
            for run in &runs {
                let finish_reason = run.finish_reason.unwrap_or(FinishReason::Error);
                // `result` may have reached the log in an earlier commit than `complete`.
                let has_result: bool = sqlx::query_scalar(
                    "SELECT EXISTS (SELECT 1 FROM events WHERE session_id = $1 AND run_id = $2 \
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
                seq = append_events(&mut tx, &events).await?;
                logged += 1;
            }
            set_reserved(&mut tx, &sid, seq).await?;
            tx.commit().await?;
            tracing::warn!(session = %sid, runs = runs.len(), "logged the end of runs whose last events were lost");
        }
        Ok(logged)
    }

    /// Ends one unfinished run: keeps the partial answer found in the event log, answers
    /// dangling tool calls, and logs `result` and `complete`, all in one transaction. None when
    /// the run had ended meanwhile (another node ended it first).
    pub(super) async fn end_unfinished_run(
        &self,
        run: &Run,
        ending: Ending,
    ) -> StoreResult<Option<RecoveredRun>> {
        let sid = run.session_id.to_string();
        let rid = run.id.to_string();
        let mut tx = self.pool.begin().await?;
        let seq = lock_next_seq(&mut tx, &sid).await? - 1;
        let status: Option<String> = sqlx::query_scalar("SELECT status FROM runs WHERE id = $1")
            .bind(&rid)
            .fetch_optional(&mut *tx)
            .await?;
        if !matches!(status.as_deref(), Some("running" | "queued")) {
            return Ok(None);
        }

        // The answer streamed since the run's last stored assistant message.
        let after_seq: Option<i64> = sqlx::query_scalar(
            "SELECT MAX(seq) FROM events WHERE session_id = $1 AND run_id = $2 \
             AND type = 'assistantMessage'",
        )
        .bind(&sid)
        .bind(&rid)
        .fetch_one(&mut *tx)
        .await?;
        // No merged row straddles an assistantMessage: it holds consecutive deltas only.
        let rows = sqlx::query(
            "SELECT seq, last_seq, type, payload, run_id FROM events WHERE session_id = $1 \
             AND run_id = $2 AND type = 'streamDelta' AND seq > $3 ORDER BY seq",
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
            "SELECT seq, last_seq, type, payload, run_id FROM events WHERE session_id = $1 \
             AND run_id = $2 AND type IN ('stepStart', 'stepEnd') ORDER BY seq",
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
            sqlx::query("SELECT * FROM messages WHERE session_id = $1 ORDER BY rid DESC LIMIT 1")
                .bind(&sid)
                .fetch_optional(&mut *tx)
                .await?;
        let last = last.as_ref().map(message_from_row).transpose()?;
        let (answer, partial_text_chars) = partial_answer(run, &deltas, last.as_ref());
        let mut parent = last.map(|m| m.id);
        if let Some(m) = &answer {
            statements::insert_message(&mut tx, m).await?;
            parent = Some(m.id);
        }

        let run_messages = sqlx::query("SELECT * FROM messages WHERE run_id = $1 ORDER BY rid")
            .bind(&rid)
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(message_from_row)
            .collect::<StoreResult<Vec<Message>>>()?;
        let dangling = dangling_tool_results(run, &run_messages, parent, ending);
        let synthetic_tool_results = dangling.as_ref().map_or(0, |m| m.blocks.len());
        if let Some(m) = &dangling {
            statements::insert_message(&mut tx, m).await?;
        }

        let now = Utc::now();
        let error = recovery_plan::run_error(&ending, step.as_deref());
        sqlx::query(
            "UPDATE runs SET status = $1, finish_reason = $2, ended_at = $3, error_code = $4, \
             error_message = $5 WHERE id = $6",
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
            statements::run_end_notice(&mut tx, run.session_id, run.id, &ts(&now)).await?;
        }
        let events = run_end_events(
            run,
            seq,
            recovery_plan::millis_between(run.started_at, now),
            ending.finish_reason,
            true,
        );
        let last = append_events(&mut tx, &events).await?;
        set_reserved(&mut tx, &sid, last).await?;
        tx.commit().await?;
        Ok(Some(RecoveredRun {
            session_id: run.session_id,
            run_id: run.id,
            partial_text_chars,
            synthetic_tool_results,
            finish_reason: ending.finish_reason,
        }))
    }
}
