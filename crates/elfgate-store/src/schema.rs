//! The schemas: the repository's migrations, one folder per backend, embedded at build time.

/// SQLite's.
pub(crate) static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/sqlite");
/// PostgreSQL's: the same tables and meanings; a change is made in both in the same commit.
pub(crate) static PG_MIGRATOR: sqlx::migrate::Migrator =
    sqlx::migrate!("../../migrations/postgres");
