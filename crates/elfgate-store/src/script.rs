//! Several statements sent to SQLite as one query.
//!
//! sqlx runs SQLite on its own thread and every query is a round trip to it (a channel send and
//! two thread wake-ups). A group commit used to send one query per table and per run update;
//! gathered into one multi-statement query, it costs one round trip whatever it holds. sqlx binds
//! the parameters of consecutive statements in order, so each statement keeps its own `?`s.

use sqlx::{QueryBuilder, Sqlite, SqliteConnection};

/// Scripts of at most this many statements stay prepared. A group commit of a few sessions'
/// operations (a run's end is three statements, a session's creation three more, with BEGIN and
/// COMMIT around them) often passes six, and preparing such a script again for every commit is
/// a large share of a short session's cost (measured in docs/benchmarks.md). The write
/// connection keeps at most
/// `WRITE_STATEMENT_CACHE` (sqlite/setup.rs) scripts, so at most that many times this many
/// statements stay prepared.
pub(crate) const MAX_CACHED_STATEMENTS: usize = 16;

/// Statements gathered for one round trip.
pub(crate) struct Script {
    qb: QueryBuilder<Sqlite>,
    statements: usize,
}

impl Script {
    /// An empty script.
    pub(crate) fn new() -> Self {
        Script {
            qb: QueryBuilder::new(""),
            statements: 0,
        }
    }

    /// A script that opens a write transaction (the caller ends it with COMMIT). IMMEDIATE takes
    /// the write lock at once, so that no statement inside can fail on a lock upgrade.
    pub(crate) fn transaction() -> Self {
        let mut script = Script::new();
        script.statement("BEGIN IMMEDIATE");
        script
    }

    /// Starts a statement with `sql`; the caller appends the rest (values, binds) to the builder.
    pub(crate) fn statement(&mut self, sql: &str) -> &mut QueryBuilder<Sqlite> {
        if self.statements > 0 {
            self.qb.push(";\n");
        }
        self.statements += 1;
        self.qb.push(sql);
        &mut self.qb
    }

    /// Whether nothing was added.
    pub(crate) fn is_empty(&self) -> bool {
        self.statements == 0
    }

    /// Runs every statement, in order, on `conn`; nothing when empty.
    ///
    /// Small scripts — the common shapes, such as one session's creation or one run's end — are
    /// kept prepared in the connection's statement cache; larger ones, whose shapes vary with the
    /// load, are prepared each time rather than crowding the cache out.
    pub(crate) async fn execute(mut self, conn: &mut SqliteConnection) -> Result<(), sqlx::Error> {
        if self.statements == 0 {
            return Ok(());
        }
        let cached = self.statements <= MAX_CACHED_STATEMENTS;
        self.qb.build().persistent(cached).execute(conn).await?;
        Ok(())
    }
}
