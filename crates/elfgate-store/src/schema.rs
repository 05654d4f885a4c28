//! The schema: the repository's migrations, embedded at build time.

pub(crate) static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");
