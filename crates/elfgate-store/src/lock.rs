//! One process per database. A second daemon on the same database would run restart recovery
//! and end the first one's live runs as `interrupted/daemon_restart` while they still stream; so
//! whoever opens the database first takes an exclusive advisory lock on a file next to it and
//! keeps it until it exits, and anyone else refuses to start.
//!
//! The lock file stays after the process ends (removing it would race with a process taking it);
//! its existence means nothing, only the lock on it does, and the kernel drops that lock with the
//! process, whatever way it ends.

use crate::{StoreError, StoreResult};
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// The lock on `<database>.lock`, held as long as this value lives.
#[derive(Debug)]
pub struct DatabaseLock {
    _file: File,
}

/// `<database>.lock`.
pub fn lock_path(database: &Path) -> PathBuf {
    let mut name = database.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

impl DatabaseLock {
    /// Takes the lock of `database`, or fails with [`StoreError::Locked`] when another process
    /// (or another open store in this one) holds it.
    pub fn acquire(database: &Path) -> StoreResult<DatabaseLock> {
        // Absolute, so that the message names the file whatever the reader's directory.
        let database = std::path::absolute(database)?;
        let path = lock_path(&database);
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|source| StoreError::Lock {
                path: path.clone(),
                source,
            })?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(StoreError::Locked {
                    holder: holder(&mut file),
                    lock: path,
                    database,
                });
            }
            Err(TryLockError::Error(source)) => return Err(StoreError::Lock { path, source }),
        }
        // For the message of whoever comes next; the lock, not this, is what counts.
        let pid = std::process::id().to_string();
        if let Err(e) = file
            .set_len(0)
            .and_then(|()| file.write_all(pid.as_bytes()))
        {
            tracing::debug!(error = %e, lock = %path.display(), "cannot write the pid into the lock file");
        }
        Ok(DatabaseLock { _file: file })
    }
}

/// Whether `url` names an in-memory database (no file, nothing to lock).
pub(crate) fn in_memory(url: &str) -> bool {
    let rest = url.trim_start_matches("sqlite:").trim_start_matches("//");
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    path.is_empty() || path == ":memory:" || query.split('&').any(|kv| kv == "mode=memory")
}

/// " (pid N)" when the lock file names its holder.
fn holder(file: &mut File) -> String {
    let mut text = String::new();
    match file.read_to_string(&mut text) {
        Ok(_) => match text.trim().parse::<u32>() {
            Ok(pid) => format!(" (pid {pid})"),
            Err(_) => String::new(),
        },
        Err(_) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_memory_urls_are_told_apart_from_files() {
        for url in [
            "sqlite::memory:",
            "sqlite://:memory:",
            "sqlite://?mode=memory",
            "sqlite://x.db?mode=memory&cache=shared",
        ] {
            assert!(in_memory(url), "{url}");
        }
        for url in [
            "sqlite://data/elfgate.db",
            "sqlite:///var/lib/e.db?mode=rwc",
            "sqlite:e.db",
        ] {
            assert!(!in_memory(url), "{url}");
        }
    }

    #[test]
    fn a_second_lock_on_one_database_is_refused_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("e.db");
        let first = DatabaseLock::acquire(&db).unwrap();
        let err = DatabaseLock::acquire(&db).unwrap_err().to_string();
        assert!(
            err.contains(&dir.path().join("e.db.lock").display().to_string()),
            "{err}"
        );
        assert!(
            err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        drop(first);
        DatabaseLock::acquire(&db).unwrap();
    }
}
