//! What the writer commits: its operations and log events made into scripts (many rows per
//! statement), and a script run as one transaction in one round trip to SQLite's thread.

use super::StoreOp;
use crate::StoreError;
use crate::log_batch::SeqUpdate;
use crate::logrows::{self, SharedText};
use crate::script::Script;
use crate::statements::{
    push_cli_session_id, push_insert_messages, push_insert_runs, push_insert_sessions,
    push_run_end_notice, push_run_finished, push_run_started, push_session_engine_config,
};
use elfgate_core::EventRecord;
use sqlx::SqlitePool;
use std::sync::Arc;

/// Most rows per INSERT statement (7 parameters each, far under SQLite's limit).
const ROWS_PER_STATEMENT: usize = 128;

/// Runs the script as one transaction in a single round trip to SQLite's thread (BEGIN IMMEDIATE,
/// the statements, COMMIT, sent as one query). On failure the transaction is rolled back; a
/// connection whose state is then unknown is closed rather than reused.
pub(super) async fn commit(pool: &SqlitePool, script: Script) -> Result<(), StoreError> {
    commit_scripts(pool, vec![script]).await
}

/// Runs scripts as one transaction, one round trip each: the first opens it
/// ([`Script::transaction`]), COMMIT is appended to the last.
pub(super) async fn commit_scripts(
    pool: &SqlitePool,
    mut scripts: Vec<Script>,
) -> Result<(), StoreError> {
    match scripts.last_mut() {
        Some(last) => {
            last.statement("COMMIT");
        }
        None => return Ok(()),
    }
    let mut tx = OpenTransaction {
        conn: pool.acquire().await?,
        open: true,
    };
    let run = async {
        for script in scripts {
            script.execute(&mut tx.conn).await?;
        }
        Ok::<(), sqlx::Error>(())
    };
    match run.await {
        Ok(()) => {
            tx.open = false;
            Ok(())
        }
        Err(e) => {
            let rollback = sqlx::query("ROLLBACK").execute(&mut *tx.conn).await;
            match &rollback {
                Ok(_) => tx.open = false,
                // Nothing was left open.
                Err(sqlx::Error::Database(d))
                    if d.message().contains("no transaction is active") =>
                {
                    tx.open = false;
                }
                // Unknown state: the connection is closed when dropped, not reused.
                Err(_) => {}
            }
            Err(e.into())
        }
    }
}

/// A pooled connection on which this module sent a raw `BEGIN`, which sqlx does not track: if it
/// is dropped before the transaction is known to be closed (an error whose rollback failed, or the
/// future dropped mid-way), it is closed instead of going back to the pool with a transaction open.
struct OpenTransaction {
    conn: sqlx::pool::PoolConnection<sqlx::Sqlite>,
    open: bool,
}

impl Drop for OpenTransaction {
    fn drop(&mut self) {
        if self.open {
            self.conn.close_on_drop();
        }
    }
}

/// Appends a group's operations: one statement per table for the inserts (sessions, then runs,
/// then messages in arrival order, so references hold), then the run updates in order.
pub(super) fn push_ops(script: &mut Script, ops: &[&StoreOp]) -> Result<(), StoreError> {
    let (mut sessions, mut runs, mut messages, mut updates) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for op in ops {
        match op {
            StoreOp::CreateSession(s, r, m) => {
                sessions.push(&**s);
                runs.push(&**r);
                if let Some(m) = m {
                    messages.push(&**m);
                }
            }
            StoreOp::InsertMessage(m) => messages.push(m),
            StoreOp::CreateRun(r) => runs.push(&**r),
            StoreOp::RunFinished {
                answer: Some(m), ..
            } => {
                messages.push(m);
                updates.push(op);
            }
            other => updates.push(other),
        }
    }
    push_insert_sessions(script, &sessions)?;
    push_insert_runs(script, &runs);
    push_insert_messages(script, &messages)?;
    for op in updates {
        match op {
            StoreOp::CreateSession(..) | StoreOp::InsertMessage(_) | StoreOp::CreateRun(_) => {}
            StoreOp::DeleteRun(run_id) => {
                script
                    .statement("DELETE FROM runs WHERE id = ")
                    .push_bind(run_id.to_string());
            }
            StoreOp::RunStarted {
                session_id,
                run_id,
                trace_id,
                at,
            } => push_run_started(script, *session_id, *run_id, trace_id.as_deref(), at),
            StoreOp::RunFinished {
                session_id,
                run_id,
                outcome,
                record_end,
                at,
                ..
            } => {
                push_run_finished(script, *session_id, *run_id, outcome, at);
                if *record_end {
                    push_run_end_notice(script, *session_id, *run_id, at);
                }
            }
            StoreOp::RunTraced { run_id, trace_id } => {
                script
                    .statement("UPDATE runs SET trace_id = ")
                    .push_bind(trace_id.clone())
                    .push(" WHERE id = ")
                    .push_bind(run_id.to_string());
            }
            StoreOp::CliSessionId {
                session_id,
                cli_session_id,
                at,
            } => push_cli_session_id(script, *session_id, cli_session_id, at),
            StoreOp::SessionEngineConfig {
                session_id,
                engine_config,
                at,
            } => push_session_engine_config(script, *session_id, engine_config, at),
        }
    }
    Ok(())
}

/// The batch's events and seq reservation changes as a transaction: the events as rows
/// ([`logrows::group`]: a run's consecutive deltas share one), one INSERT of up to
/// `ROWS_PER_STATEMENT` rows per round trip, each statement of a power-of-two size so that only a
/// handful of them exist and all stay prepared (a log commit is rare: every `linger` at most).
pub(super) fn log_scripts(events: &[Arc<EventRecord>], seq_updates: &[SeqUpdate]) -> Vec<Script> {
    let mut scripts = Vec::new();
    let mut current = Script::transaction();
    let mut shared = SharedText::default();
    let mut rows = logrows::group(events);
    while !rows.is_empty() {
        let n = 1usize << rows.len().min(ROWS_PER_STATEMENT).ilog2();
        // OR IGNORE: a retried batch may have been half applied before a failed commit (a retry
        // groups the same events into the same rows).
        current
            .statement(
                "INSERT OR IGNORE INTO events \
                 (session_id, seq, run_id, type, created_at, last_seq, payload) ",
            )
            .push_values(rows.drain(..n), |mut row, r| {
                let e = r.first();
                row.push_bind(shared.session(e.session_id))
                    .push_bind(e.seq as i64)
                    .push_bind(e.run_id.map(|id| shared.run(id)))
                    .push_bind(shared.event_type(e.event_type()))
                    .push_bind(shared.ts(&e.ts))
                    .push_bind(r.last_seq().map(|s| s as i64))
                    .push_bind(r.into_payload());
            });
        scripts.push(std::mem::replace(&mut current, Script::new()));
    }
    for u in seq_updates {
        match *u {
            SeqUpdate::Reserve(s, upto) => {
                current
                    .statement("UPDATE sessions SET event_seq_reserved = MAX(event_seq_reserved, ")
                    .push_bind(upto as i64)
                    .push(") WHERE id = ")
                    .push_bind(s.to_string());
            }
            SeqUpdate::Release(s, last) => {
                current
                    .statement("UPDATE sessions SET event_seq_reserved = ")
                    .push_bind(last as i64)
                    .push(" WHERE id = ")
                    .push_bind(s.to_string());
            }
        }
    }
    if !current.is_empty() || scripts.is_empty() {
        scripts.push(current);
    }
    scripts
}
