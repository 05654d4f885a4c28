//! The SQLite store: WAL journal, a busy timeout, a bounded pool, migrations applied at open.

use crate::codec::{parse, parse_opt, parse_ts, ts};
use crate::lock::{DatabaseLock, in_memory};
use crate::script::Script;
use crate::writer::{StoreOp, Writer};
use crate::{RecoveredRun, SessionPage, Store, StoreError, StoreResult, StoredEvent};
use async_trait::async_trait;
use chrono::Utc;
use elfgate_core::{
    ContentBlock, EventPayload, EventRecord, FinishReason, LedgerError, LogSender, Message,
    MessageId, Role, Run, RunId, RunLedger, RunOutcome, RunStats, RunStatus, SEQ_RESERVE_BLOCK,
    Session, SessionId,
};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{Row, Sqlite, Transaction};
use std::collections::HashSet;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// The embedded SQLite store.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    /// One connection: SQLite allows one writer at a time, and queueing writers here (async, in
    /// order) is much faster than letting them sleep in SQLite's busy handler.
    write: SqlitePool,
    /// Readers run concurrently with the writer (WAL).
    read: SqlitePool,
    /// The group-commit writer: the event log and the writes on a run's path.
    writer: Writer,
    /// This process's claim on the database file (none in memory), released with the last clone.
    _lock: Option<Arc<DatabaseLock>>,
}

/// How a store is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreOptions {
    /// How many published events may wait for the log writer before publishers wait.
    pub log_queue_events: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            log_queue_events: elfgate_core::LOG_QUEUE_EVENTS,
        }
    }
}

pub(crate) static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

impl SqliteStore {
    /// Opens (creating if needed) the database at `url` (`sqlite://path` or `sqlite::memory:`) and
    /// applies pending migrations. A database file is locked first (see `lock.rs`): while this
    /// store or a clone lives, opening the same file again fails with [`StoreError::Locked`].
    pub async fn open(url: &str) -> StoreResult<Self> {
        Self::open_with(url, StoreOptions::default()).await
    }

    /// [`SqliteStore::open`] with options.
    pub async fn open_with(url: &str, opts: StoreOptions) -> StoreResult<Self> {
        if !url.starts_with("sqlite:") {
            return Err(StoreError::UnsupportedUrl(url.to_string()));
        }
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // NORMAL in WAL mode stays consistent after a crash; only the last commits may be lost on
            // power failure, never on a process kill.
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        let file = options.get_filename();
        if let Some(dir) = file.parent()
            && !dir.as_os_str().is_empty()
            && file.as_os_str() != ":memory:"
        {
            std::fs::create_dir_all(dir)?;
        }
        // Before migrations and before anyone reads or ends a run.
        let lock = if in_memory(url) {
            None
        } else {
            Some(Arc::new(DatabaseLock::acquire(file)?))
        };
        // No automatic checkpoint: it runs inside whichever commit crosses the threshold (5-15 ms
        // under load), often one that a new session waits for. The writer has checkpoints run
        // on a reader connection instead (see `WalTracker` in writer.rs).
        let write_options = options
            .clone()
            .pragma("wal_autocheckpoint", "0")
            // After a burst, the WAL file is cut back to 64 MB when it restarts.
            .pragma("journal_size_limit", "67108864")
            // 16 MB of page cache (default 2 MB): with many sessions logging at once, a commit
            // touches one log page per session, and a small cache spilled dirty pages to the WAL
            // mid-transaction and read pages back (docs/benchmarks.md, item 11).
            .pragma("cache_size", "-16384");
        let write = SqlitePoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(30))
            // A local file does not go stale like a network connection: no ping (one more round
            // trip to SQLite's thread) before each use.
            .test_before_acquire(false)
            .connect_with(write_options)
            .await?;
        MIGRATOR.run(&write).await?;
        let read = SqlitePoolOptions::new()
            .max_connections(8)
            .min_connections(1)
            .test_before_acquire(false)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await?;
        let writer = Writer::spawn(write.clone(), read.clone(), opts.log_queue_events);
        Ok(SqliteStore {
            write,
            read,
            writer,
            _lock: lock,
        })
    }

    /// Where the event hub sends published events.
    pub fn log_sender(&self) -> LogSender {
        self.writer.log_sender()
    }

    /// Applies pending migrations without keeping the store (the `migrate` command).
    pub async fn migrate(url: &str) -> StoreResult<()> {
        let store = Self::open(url).await?;
        store.close().await;
        Ok(())
    }

    /// Writes what the writer holds, stops it, and closes the pools.
    pub async fn close(&self) {
        self.writer.shutdown().await;
        self.write.close().await;
        self.read.close().await;
    }
}

fn session_from_row(r: &SqliteRow) -> StoreResult<Session> {
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

fn run_from_row(r: &SqliteRow) -> StoreResult<Run> {
    Ok(Run {
        id: parse("run id", &r.try_get::<String, _>("id")?)?,
        session_id: parse("session id", &r.try_get::<String, _>("session_id")?)?,
        status: parse("run status", &r.try_get::<String, _>("status")?)?,
        finish_reason: parse_opt("finish reason", r.try_get("finish_reason")?)?,
        input_tokens: r.try_get::<i64, _>("input_tokens")?.max(0) as u64,
        output_tokens: r.try_get::<i64, _>("output_tokens")?.max(0) as u64,
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

fn message_from_row(r: &SqliteRow) -> StoreResult<Message> {
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
                 cli_session_id, event_seq_reserved, created_at, updated_at) ",
            )
            .push_values(chunk, |mut row, (s, config)| {
                row.push_bind(s.id.to_string())
                    .push_bind(s.engine.as_str())
                    .push_bind(s.title.clone())
                    .push_bind(s.provider_id.clone())
                    .push_bind(s.model.clone())
                    .push_bind(s.cli_backend.clone())
                    .push_bind(s.project_path.clone())
                    .push_bind(s.agent_id.clone())
                    .push_bind(s.system_prompt.clone())
                    .push_bind(s.permission_mode.clone())
                    .push_bind(config.clone())
                    .push_bind(s.cli_session_id.clone())
                    // A new session's bus starts at 0 inside this first reservation.
                    .push_bind(SEQ_RESERVE_BLOCK as i64)
                    .push_bind(ts(&s.created_at))
                    .push_bind(ts(&s.updated_at));
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
                 output_tokens, iterations, started_at, ended_at, error, client_msg_id) ",
            )
            .push_values(chunk, |mut row, run| {
                row.push_bind(run.id.to_string())
                    .push_bind(run.session_id.to_string())
                    .push_bind(run.status.as_str())
                    .push_bind(run.finish_reason.map(|f| f.as_str()))
                    .push_bind(run.input_tokens as i64)
                    .push_bind(run.output_tokens as i64)
                    .push_bind(run.iterations as i64)
                    .push_bind(ts(&run.started_at))
                    .push_bind(run.ended_at.as_ref().map(ts))
                    .push_bind(run.error.clone())
                    .push_bind(run.client_msg_id.clone());
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
async fn insert_messages_tx(
    tx: &mut Transaction<'_, Sqlite>,
    messages: &[&Message],
) -> StoreResult<()> {
    let mut script = Script::new();
    push_insert_messages(&mut script, messages)?;
    script.execute(tx).await?;
    Ok(())
}

async fn append_event_tx(
    tx: &mut Transaction<'_, Sqlite>,
    session_id: SessionId,
    run_id: RunId,
    seq: u64,
    payload: &EventPayload,
) -> StoreResult<()> {
    let rec = EventRecord::build(session_id, seq, Some(run_id), payload);
    sqlx::query(
        "INSERT INTO events (session_id, seq, run_id, type, payload, created_at) VALUES (?, ?, ?, ?, ?, ?)",
    )
    .bind(session_id.to_string())
    .bind(seq as i64)
    .bind(run_id.to_string())
    .bind(rec.event_type.as_ref())
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
            input_tokens: run.input_tokens,
            output_tokens: run.output_tokens,
            iterations: run.iterations,
            duration_ms,
            finish_reason,
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
    let last_seq: Option<i64> =
        sqlx::query_scalar("SELECT MAX(seq) FROM events WHERE session_id = ?")
            .bind(sid)
            .fetch_one(&mut **tx)
            .await?;
    let reserved: Option<i64> =
        sqlx::query_scalar("SELECT event_seq_reserved FROM sessions WHERE id = ?")
            .bind(sid)
            .fetch_optional(&mut **tx)
            .await?;
    Ok(last_seq.unwrap_or(0).max(reserved.unwrap_or(0)).max(0) as u64 + 1)
}

#[async_trait]
impl RunLedger for SqliteStore {
    async fn run_started(&self, session_id: SessionId, run_id: RunId) -> Result<(), LedgerError> {
        self.writer
            .run(StoreOp::RunStarted {
                session_id,
                run_id,
                at: ts(&Utc::now()),
            })
            .await
            .map_err(|e| LedgerError(e.report()))
    }

    async fn run_finished(
        &self,
        session_id: SessionId,
        run_id: RunId,
        outcome: &RunOutcome,
        answer: Option<&Message>,
    ) -> Result<(), LedgerError> {
        self.writer
            .run(StoreOp::RunFinished {
                session_id,
                run_id,
                outcome: Box::new(outcome.clone()),
                answer: answer.cloned().map(Box::new),
                at: ts(&Utc::now()),
            })
            .await
            .map_err(|e| LedgerError(e.report()))
    }

    async fn message_added(&self, message: &Message) -> Result<(), LedgerError> {
        self.insert_message(message)
            .await
            .map_err(|e| LedgerError(e.report()))
    }
}

/// Appends the statements marking a run as running.
pub(crate) fn push_run_started(
    script: &mut Script,
    session_id: SessionId,
    run_id: RunId,
    at: &str,
) {
    script
        .statement("UPDATE runs SET status = 'running', started_at = ")
        .push_bind(at.to_string())
        .push(" WHERE id = ")
        .push_bind(run_id.to_string());
    script
        .statement("UPDATE sessions SET updated_at = ")
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
    let error = outcome
        .error
        .as_ref()
        .map(|e| format!("{}: {}", e.code, e.message));
    script
        .statement("UPDATE runs SET status = ")
        .push_bind(outcome.finish_reason.run_status().as_str())
        .push(", finish_reason = ")
        .push_bind(outcome.finish_reason.as_str())
        .push(", input_tokens = ")
        .push_bind(outcome.input_tokens as i64)
        .push(", output_tokens = ")
        .push_bind(outcome.output_tokens as i64)
        .push(", iterations = ")
        .push_bind(outcome.iterations as i64)
        .push(", ended_at = ")
        .push_bind(at.to_string())
        .push(", error = ")
        .push_bind(error)
        .push(" WHERE id = ")
        .push_bind(run_id.to_string());
    script
        .statement("UPDATE sessions SET updated_at = ")
        .push_bind(at.to_string())
        .push(" WHERE id = ")
        .push_bind(session_id.to_string());
}

#[async_trait]
impl Store for SqliteStore {
    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.read).await?;
        Ok(())
    }

    async fn create_session(
        &self,
        s: &Session,
        first_run: &Run,
        first_message: Option<&Message>,
    ) -> StoreResult<()> {
        // Group commit: sessions created at the same moment share one transaction.
        self.writer
            .run(StoreOp::CreateSession(
                Box::new(s.clone()),
                Box::new(first_run.clone()),
                first_message.map(|m| Box::new(m.clone())),
            ))
            .await
    }

    async fn get_session(&self, id: SessionId) -> StoreResult<Option<Session>> {
        let row = sqlx::query("SELECT * FROM sessions WHERE id = ?")
            .bind(id.to_string())
            .fetch_optional(&self.read)
            .await?;
        row.as_ref().map(session_from_row).transpose()
    }

    async fn list_sessions(
        &self,
        limit: u32,
        cursor: Option<SessionId>,
    ) -> StoreResult<SessionPage> {
        let limit = limit.clamp(1, 500);
        // Ids are UUIDv7: their text order is creation order.
        let rows = match cursor {
            Some(c) => {
                sqlx::query("SELECT * FROM sessions WHERE id < ? ORDER BY id DESC LIMIT ?")
                    .bind(c.to_string())
                    .bind(limit as i64 + 1)
                    .fetch_all(&self.read)
                    .await?
            }
            None => {
                sqlx::query("SELECT * FROM sessions ORDER BY id DESC LIMIT ?")
                    .bind(limit as i64 + 1)
                    .fetch_all(&self.read)
                    .await?
            }
        };
        let mut sessions = rows
            .iter()
            .map(session_from_row)
            .collect::<StoreResult<Vec<_>>>()?;
        let next_cursor = if sessions.len() > limit as usize {
            sessions.truncate(limit as usize);
            sessions.last().map(|s| s.id)
        } else {
            None
        };
        Ok(SessionPage {
            sessions,
            next_cursor,
        })
    }

    async fn delete_session(&self, id: SessionId) -> StoreResult<bool> {
        let mut tx = self.write.begin().await?;
        let sid = id.to_string();
        sqlx::query("DELETE FROM events WHERE session_id = ?")
            .bind(&sid)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM messages WHERE session_id = ?")
            .bind(&sid)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM runs WHERE session_id = ?")
            .bind(&sid)
            .execute(&mut *tx)
            .await?;
        let gone = sqlx::query("DELETE FROM sessions WHERE id = ?")
            .bind(&sid)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(gone > 0)
    }

    async fn create_run(&self, run: &Run) -> StoreResult<()> {
        self.writer
            .run(StoreOp::CreateRun(Box::new(run.clone())))
            .await
    }

    async fn run_by_client_msg_id(
        &self,
        session_id: Option<SessionId>,
        client_msg_id: &str,
    ) -> StoreResult<Option<Run>> {
        let row = match session_id {
            Some(s) => {
                sqlx::query("SELECT * FROM runs WHERE session_id = ? AND client_msg_id = ?")
                    .bind(s.to_string())
                    .bind(client_msg_id)
                    .fetch_optional(&self.read)
                    .await?
            }
            // A session's first run: its key identifies the session too.
            None => {
                sqlx::query(
                    "SELECT runs.* FROM runs JOIN sessions ON sessions.id = runs.session_id \
                     WHERE runs.client_msg_id = ? AND runs.id = ( \
                       SELECT r2.id FROM runs r2 WHERE r2.session_id = runs.session_id \
                       ORDER BY r2.rowid LIMIT 1) \
                     ORDER BY runs.rowid DESC LIMIT 1",
                )
                .bind(client_msg_id)
                .fetch_optional(&self.read)
                .await?
            }
        };
        row.as_ref().map(run_from_row).transpose()
    }

    async fn delete_run(&self, run_id: RunId) -> StoreResult<()> {
        self.writer.run(StoreOp::DeleteRun(run_id)).await
    }

    async fn get_run(&self, session_id: SessionId, run_id: RunId) -> StoreResult<Option<Run>> {
        let row = sqlx::query("SELECT * FROM runs WHERE id = ? AND session_id = ?")
            .bind(run_id.to_string())
            .bind(session_id.to_string())
            .fetch_optional(&self.read)
            .await?;
        row.as_ref().map(run_from_row).transpose()
    }

    async fn insert_message(&self, m: &Message) -> StoreResult<()> {
        // Group commit: messages stored at the same moment by many runs share one transaction.
        self.writer.run(StoreOp::InsertMessage(m.clone())).await
    }

    async fn list_messages(&self, session_id: SessionId, limit: u32) -> StoreResult<Vec<Message>> {
        let rows = sqlx::query(
            "SELECT * FROM (SELECT rowid AS rid, * FROM messages WHERE session_id = ? \
             ORDER BY rowid DESC LIMIT ?) ORDER BY rid ASC",
        )
        .bind(session_id.to_string())
        .bind(limit.max(1) as i64)
        .fetch_all(&self.read)
        .await?;
        rows.iter().map(message_from_row).collect()
    }

    async fn latest_message(&self, session_id: SessionId) -> StoreResult<Option<Message>> {
        let row =
            sqlx::query("SELECT * FROM messages WHERE session_id = ? ORDER BY rowid DESC LIMIT 1")
                .bind(session_id.to_string())
                .fetch_optional(&self.read)
                .await?;
        row.as_ref().map(message_from_row).transpose()
    }

    async fn get_message(
        &self,
        session_id: SessionId,
        id: MessageId,
    ) -> StoreResult<Option<Message>> {
        let row = sqlx::query("SELECT * FROM messages WHERE id = ? AND session_id = ?")
            .bind(id.to_string())
            .bind(session_id.to_string())
            .fetch_optional(&self.read)
            .await?;
        row.as_ref().map(message_from_row).transpose()
    }

    async fn branch(
        &self,
        session_id: SessionId,
        leaf: MessageId,
        limit: u32,
    ) -> StoreResult<Vec<Message>> {
        let rows = sqlx::query(
            "WITH RECURSIVE chain(id, parent_id, depth) AS ( \
               SELECT id, parent_id, 0 FROM messages WHERE id = ? AND session_id = ? \
               UNION ALL \
               SELECT m.id, m.parent_id, c.depth + 1 FROM messages m JOIN chain c ON m.id = c.parent_id \
               WHERE c.depth + 1 < ? AND m.session_id = ? \
             ) \
             SELECT messages.* FROM chain JOIN messages ON messages.id = chain.id ORDER BY chain.depth DESC",
        )
        .bind(leaf.to_string())
        .bind(session_id.to_string())
        .bind(limit as i64)
        .bind(session_id.to_string())
        .fetch_all(&self.read)
        .await?;
        rows.iter().map(message_from_row).collect()
    }

    async fn last_seq(&self, session_id: SessionId) -> StoreResult<u64> {
        let seq: Option<i64> =
            sqlx::query_scalar("SELECT MAX(seq) FROM events WHERE session_id = ?")
                .bind(session_id.to_string())
                .fetch_one(&self.read)
                .await?;
        Ok(seq.unwrap_or(0).max(0) as u64)
    }

    async fn open_seq_range(&self, session_id: SessionId) -> StoreResult<(u64, u64)> {
        let sid = session_id.to_string();
        let mut tx = self.write.begin().await?;
        let logged: Option<i64> =
            sqlx::query_scalar("SELECT MAX(seq) FROM events WHERE session_id = ?")
                .bind(&sid)
                .fetch_one(&mut *tx)
                .await?;
        let reserved: Option<i64> =
            sqlx::query_scalar("SELECT event_seq_reserved FROM sessions WHERE id = ?")
                .bind(&sid)
                .fetch_optional(&mut *tx)
                .await?;
        let last = logged.unwrap_or(0).max(reserved.unwrap_or(0)).max(0) as u64;
        let upto = last + SEQ_RESERVE_BLOCK;
        sqlx::query("UPDATE sessions SET event_seq_reserved = ? WHERE id = ?")
            .bind(upto as i64)
            .bind(&sid)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok((last, upto))
    }

    async fn events_after(
        &self,
        session_id: SessionId,
        after: u64,
        limit: u32,
    ) -> StoreResult<Vec<StoredEvent>> {
        let rows = sqlx::query(
            "SELECT seq, type, payload FROM events WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        )
        .bind(session_id.to_string())
        .bind(after.min(i64::MAX as u64) as i64)
        .bind(limit as i64)
        .fetch_all(&self.read)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(StoredEvent {
                    seq: r.try_get::<i64, _>("seq")?.max(0) as u64,
                    event_type: r.try_get("type")?,
                    json: r.try_get("payload")?,
                })
            })
            .collect()
    }

    async fn recover_unfinished_runs(&self) -> StoreResult<Vec<RecoveredRun>> {
        let runs = sqlx::query(
            "SELECT * FROM runs WHERE status IN ('running', 'queued') ORDER BY started_at",
        )
        .fetch_all(&self.write)
        .await?
        .iter()
        .map(run_from_row)
        .collect::<StoreResult<Vec<_>>>()?;
        // First the runs that did end: their `complete` must come before anything logged now.
        self.log_missing_ends().await?;
        let mut recovered = Vec::with_capacity(runs.len());
        for run in runs {
            recovered.push(self.recover_run(&run).await?);
        }
        Ok(recovered)
    }
}

impl SqliteStore {
    /// Logs `result` and `complete` for runs that ended but whose last events never reached the
    /// log: the dispatcher records a run's end before it publishes them, and the log is written a
    /// little later, so a crash in between leaves an ended run without its `complete`. Only a
    /// session whose seq reservation was not released (its bus was open at the crash) can have
    /// one. Returns how many runs got their end logged.
    async fn log_missing_ends(&self) -> StoreResult<usize> {
        let sessions: Vec<String> = sqlx::query_scalar(
            "SELECT s.id FROM sessions s WHERE s.event_seq_reserved > \
             COALESCE((SELECT MAX(e.seq) FROM events e WHERE e.session_id = s.id), 0)",
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
    async fn recover_run(&self, run: &Run) -> StoreResult<RecoveredRun> {
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
        let deltas: Vec<String> = sqlx::query_scalar(
            "SELECT payload FROM events WHERE session_id = ? AND run_id = ? AND type = 'streamDelta' \
             AND seq > ? ORDER BY seq",
        )
        .bind(&sid)
        .bind(&rid)
        .bind(after_seq.unwrap_or(0))
        .fetch_all(&mut *tx)
        .await?;
        let (mut text, mut thinking) = (String::new(), String::new());
        for d in &deltas {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(d) {
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
