//! The store the configuration names (SQLite or PostgreSQL), opened, and its migrations.

use super::StartError;
use crate::config::Config;
use elfgate_store::{NodeMode, PgStore, SqliteStore, Store, StoreOptions};
use std::sync::Arc;

/// The store the configuration names, opened.
#[derive(Clone)]
pub(super) enum OpenStore {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

impl OpenStore {
    pub(super) async fn open(config: &Config) -> Result<OpenStore, StartError> {
        let opts = StoreOptions {
            log_queue_events: config.storage.log_queue_events,
            log_linger: std::time::Duration::from_millis(config.storage.log_linger_ms),
            password: config.storage.password()?,
            record_run_ends: config.webhooks.delivers_run_ends(),
        };
        if config.storage.is_postgres() {
            let mode = match config.fleet_member()? {
                Some(member) => {
                    tracing::info!(fleet_node = %member.node_id, "running as a node of a fleet");
                    NodeMode::Fleet(member)
                }
                None => NodeMode::Single,
            };
            let store = PgStore::open_with(&config.storage.url, mode, opts).await?;
            return Ok(OpenStore::Postgres(store));
        }
        Ok(OpenStore::Sqlite(
            SqliteStore::open_with(&config.storage.url, opts).await?,
        ))
    }

    pub(super) fn shared(&self) -> Arc<dyn Store> {
        match self {
            OpenStore::Sqlite(s) => Arc::new(s.clone()),
            OpenStore::Postgres(s) => Arc::new(s.clone()),
        }
    }

    /// The sessions whose lease this node lost (a fleet node on PostgreSQL).
    pub(super) fn fenced_sessions(
        &self,
    ) -> Option<tokio::sync::broadcast::Receiver<elfgate_core::SessionId>> {
        match self {
            OpenStore::Sqlite(_) => None,
            OpenStore::Postgres(s) => s.fenced_sessions(),
        }
    }

    pub(super) fn log_sender(&self) -> elfgate_core::LogSender {
        match self {
            OpenStore::Sqlite(s) => s.log_sender(),
            OpenStore::Postgres(s) => s.log_sender(),
        }
    }

    pub(super) async fn close(&self) {
        match self {
            OpenStore::Sqlite(s) => s.close().await,
            OpenStore::Postgres(s) => s.close().await,
        }
    }
}

/// Applies pending migrations to the configured database (the `migrate` command).
pub async fn migrate(config: &Config) -> Result<(), StartError> {
    if config.storage.is_postgres() {
        let password = config.storage.password()?;
        Ok(PgStore::migrate(&config.storage.url, password.as_deref()).await?)
    } else {
        Ok(SqliteStore::migrate(&config.storage.url).await?)
    }
}
