//! `[storage]`: the database, the log writer's batching, and where local state lives.

use super::{ConfigError, redact_url};
use serde::Deserialize;

/// The longest `[storage] log_linger_ms`: events a crash can lose are those of the last linger.
pub const MAX_LOG_LINGER_MS: u64 = 10_000;

/// `[storage]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageConfig {
    /// Database URL.
    pub url: String,
    /// Published events that may wait for the log writer before publishers wait for room.
    pub log_queue_events: usize,
    /// How long a published event may wait for others before the log writer commits it.
    pub log_linger_ms: u64,
    /// A file holding the PostgreSQL user's password (over the URL's and `PGPASSWORD`).
    #[serde(default)]
    pub password_file: Option<std::path::PathBuf>,
    /// Where the token file and the daemon's other local state live; by default the SQLite
    /// database's directory, or `data` (under the working directory) with PostgreSQL.
    #[serde(default)]
    pub data_dir: Option<std::path::PathBuf>,
}

impl StorageConfig {
    /// Whether the store is a PostgreSQL server.
    pub fn is_postgres(&self) -> bool {
        elfgate_store::is_postgres_url(&self.url)
    }

    /// The password in `password_file` (its first line), if one is named.
    pub fn password(&self) -> Result<Option<String>, ConfigError> {
        let Some(file) = &self.password_file else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(file).map_err(|e| {
            ConfigError::Invalid(format!(
                "storage.password_file: cannot read {}: {e}",
                file.display()
            ))
        })?;
        match text.lines().next().map(str::trim_end) {
            Some(p) if !p.is_empty() => Ok(Some(p.to_string())),
            _ => Err(ConfigError::Invalid(format!(
                "storage.password_file: {} holds no password",
                file.display()
            ))),
        }
    }
}

impl StorageConfig {
    /// The URL names a supported database, and a password file is readable and fits it.
    pub(super) fn check_database(&self) -> Result<(), ConfigError> {
        let url = &self.url;
        if !self.is_sqlite() && !self.is_postgres() {
            return Err(ConfigError::Invalid(format!(
                "storage.url must start with sqlite:// or postgres:// (have '{}')",
                redact_url(url)
            )));
        }
        if self.password_file.is_some() {
            if self.is_sqlite() {
                return Err(ConfigError::Invalid(
                    "storage.password_file is for a postgres:// storage.url".into(),
                ));
            }
            self.password()?;
        }
        Ok(())
    }

    /// Whether the store is a SQLite database file.
    pub(super) fn is_sqlite(&self) -> bool {
        self.url.starts_with("sqlite:")
    }

    /// The log writer's queue and linger are within bounds.
    pub(super) fn check_log_writer(&self) -> Result<(), ConfigError> {
        if self.log_queue_events == 0 {
            return Err(ConfigError::Invalid(
                "storage.log_queue_events must be positive".into(),
            ));
        }
        if self.log_linger_ms > MAX_LOG_LINGER_MS {
            return Err(ConfigError::Invalid(format!(
                "storage.log_linger_ms must be at most {MAX_LOG_LINGER_MS}"
            )));
        }
        Ok(())
    }
}
