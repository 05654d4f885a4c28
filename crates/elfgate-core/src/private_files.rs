//! Directories and files only the daemon's user can read: the data directory, the CLIs' homes
//! (the CLIs keep transcripts there) and the files written into them, as the database is.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Owner-only directory mode.
pub const PRIVATE_DIR_MODE: u32 = 0o700;
/// Owner-only file mode.
pub const PRIVATE_FILE_MODE: u32 = 0o600;

/// Creates `dir` and any missing parent, each new one owner-only (0700). Directories that exist
/// are left as they are: a parent may be shared on purpose.
pub fn create_private_dir_all(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(PRIVATE_DIR_MODE)
        .create(dir)
}

/// [`create_private_dir_all`], then `dir` itself made owner-only if it was not: for directories
/// the daemon owns alone (a CLI's home), which an older version created readable by others.
pub fn ensure_private_dir(dir: &Path) -> std::io::Result<()> {
    create_private_dir_all(dir)?;
    restrict(dir, PRIVATE_DIR_MODE)
}

/// Warns when `dir` exists and other users may list or enter it. An existing directory's mode
/// is never changed (it may be shared on purpose, or be the working directory), so the operator
/// is told instead.
pub fn warn_if_open_to_others(dir: &Path, what: &str) {
    let Ok(meta) = std::fs::metadata(dir) else {
        return;
    };
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        tracing::warn!(
            dir = %dir.display(),
            mode = format!("{mode:o}"),
            "{what} can be read by other users: give it mode 0700 (the daemon does not change \
             the mode of a directory it did not create)"
        );
    }
}

/// Writes `content` to `path` (created 0600; an existing file is made 0600 before it is
/// rewritten, so the content is never readable by others, not even for a moment).
pub fn write_private(path: &Path, content: &[u8]) -> std::io::Result<()> {
    if path.exists() {
        restrict(path, PRIVATE_FILE_MODE)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(PRIVATE_FILE_MODE)
        .open(path)?;
    file.write_all(content)
}

/// Clears the group and other bits of `path`'s mode (`mask` is what the owner may keep).
fn restrict(path: &Path, mask: u32) -> std::io::Result<()> {
    let mode = std::fs::metadata(path)?.permissions().mode() & 0o7777;
    if mode & !mask & 0o077 == 0 {
        return Ok(());
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & mask))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn new_directories_and_files_are_owner_only_and_old_ones_are_made_so() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("a").join("b");
        create_private_dir_all(&home).unwrap();
        assert_eq!(mode(&home), 0o700);
        assert_eq!(mode(&dir.path().join("a")), 0o700);
        let file = home.join("config.toml");
        std::fs::write(&file, "old").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).unwrap();
        ensure_private_dir(&home).unwrap();
        write_private(&file, b"new").unwrap();
        assert_eq!(mode(&home), 0o700);
        assert_eq!(mode(&file), 0o600);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "new");
    }
}
