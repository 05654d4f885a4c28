//! One process per database. A second daemon on the same database would run restart recovery
//! and end the first one's live runs as `interrupted/daemon_restart` while they still stream; so
//! whoever opens the database first takes an exclusive advisory lock on a file next to it and
//! keeps it until it exits, and anyone else refuses to start.
//!
//! A hard link is another name for the same file, with its own `.lock` beside it (and its own
//! `-wal`, so two daemons on one file through two names end with a malformed database): the
//! database file itself is locked too, and that lock belongs to the file (its device and inode),
//! whatever name it was opened by. SQLite's own locks are POSIX record locks, which do not meet
//! this whole-file (`flock`) lock on a local file system.
//!
//! The lock file stays after the process ends (removing it would race with a process taking it);
//! its existence means nothing, only the lock on it does, and the kernel drops that lock with the
//! process, whatever way it ends.

use crate::{StoreError, StoreResult};
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The lock on `<database>.lock` and on the database file, held as long as this value lives.
#[derive(Debug)]
pub struct DatabaseLock {
    _file: File,
    /// The database file itself, locked: the lock of its identity, whatever its name.
    _database: File,
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
        // The real file, not the name it was given: two daemons reaching one database through a
        // symlink, `..` or another spelling of the path must meet at the same lock. Absolute, so
        // that the message names the file whatever the reader's directory.
        let database = real_file(database)?;
        let path = lock_path(&database);
        let mut file = OpenOptions::new()
            .mode(0o600)
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
        let identity = lock_identity(&database)?;
        // For the message of whoever comes next; the lock, not this, is what counts.
        let pid = std::process::id().to_string();
        if let Err(e) = file
            .set_len(0)
            .and_then(|()| file.write_all(pid.as_bytes()))
        {
            tracing::debug!(error = %e, lock = %path.display(), "cannot write the pid into the lock file");
        }
        Ok(DatabaseLock {
            _file: file,
            _database: identity,
        })
    }
}

/// Locks the database file itself (created owner-only when missing, as the store does before
/// it locks). Another process holding it reached the same file by another name, a hard link:
/// its `.lock` is not ours, so the message names the file's device and inode.
fn lock_identity(database: &Path) -> StoreResult<File> {
    use std::os::unix::fs::MetadataExt;
    let lock_error = |source| StoreError::Lock {
        path: database.to_path_buf(),
        source,
    };
    let file = OpenOptions::new()
        .mode(0o600)
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(database)
        .map_err(lock_error)?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => {
            let meta = file.metadata().map_err(lock_error)?;
            Err(StoreError::LockedByAnotherName {
                database: database.to_path_buf(),
                device: meta.dev(),
                inode: meta.ino(),
            })
        }
        Err(TryLockError::Error(source)) => Err(lock_error(source)),
    }
}

/// The file `database` names, symlinks followed (also a dangling one: SQLite creates its
/// target) and the directory canonical, so that every spelling of one file gives one path.
fn real_file(database: &Path) -> std::io::Result<PathBuf> {
    let mut path = std::path::absolute(database)?;
    // A bound on the chain, as the kernel has (ELOOP past 40).
    for _ in 0..40 {
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let target = std::fs::read_link(&path)?;
                path = match path.parent() {
                    Some(dir) => dir.join(target),
                    None => target,
                };
            }
            _ => break,
        }
    }
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => Ok(std::fs::canonicalize(dir)?.join(name)),
        _ => Ok(path),
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

    #[test]
    fn a_symlink_or_another_spelling_of_the_database_meets_the_same_lock() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        let db = data.join("e.db");
        std::fs::write(&db, b"").unwrap();
        let _first = DatabaseLock::acquire(&db).unwrap();
        let link = dir.path().join("link.db");
        std::os::unix::fs::symlink(&db, &link).unwrap();
        let dir_link = dir.path().join("elsewhere");
        std::os::unix::fs::symlink(&data, &dir_link).unwrap();
        for other in [
            link,
            dir_link.join("e.db"),
            data.join("..").join("data").join("e.db"),
        ] {
            let err = DatabaseLock::acquire(&other).unwrap_err();
            assert!(matches!(err, StoreError::Locked { .. }), "{other:?}: {err}");
        }
    }

    #[test]
    fn a_hard_link_to_the_database_meets_the_lock_of_the_same_file() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("e.db");
        std::fs::write(&db, b"").unwrap();
        let first = DatabaseLock::acquire(&db).unwrap();
        let link = dir.path().join("hard.db");
        std::fs::hard_link(&db, &link).unwrap();
        let err = DatabaseLock::acquire(&link).unwrap_err();
        assert!(
            matches!(err, StoreError::LockedByAnotherName { .. }),
            "{err}"
        );
        assert!(
            err.to_string()
                .contains("in use by another elfgate process"),
            "{err}"
        );
        drop(first);
        DatabaseLock::acquire(&link).unwrap();
    }
}
