//! How the file tools open a project file: never through a symlink in the last component (the
//! firewall resolved the path already, so one found there now was swapped in since) and never a
//! regular file with several hard links, judged on the open handle so that no rename can slip
//! between the check and the use. Opening for writing does not truncate: a refused file is left
//! as it was.
//!
//! Only regular files (and directories, which callers turn away themselves) are opened: a FIFO
//! blocks open(2) until a writer comes, a device such as /dev/zero never ends, and a socket cannot
//! be read at all. The type is checked before opening (so that no device's open has side effects)
//! and again on the handle; the open itself is non-blocking, so that a regular file swapped for a
//! FIFO in between still cannot hold a thread.

use crate::firewall::{FirewallError, check_single_link};
use crate::tool::ToolError;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use tokio::io::AsyncReadExt;

/// What the file is opened for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Reading.
    Read,
    /// Reading and writing an existing file.
    Update,
    /// Writing, creating it if needed.
    Create,
}

fn options(access: Access) -> std::fs::OpenOptions {
    let mut o = std::fs::OpenOptions::new();
    o.read(true)
        .write(access != Access::Read)
        .create(access == Access::Create)
        // O_NONBLOCK only changes how FIFOs and devices open and read; on a regular file it
        // does nothing. O_NOCTTY: a terminal device never becomes the daemon's.
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY);
    o
}

/// What kind of special file `t` is, or None for a regular file, a directory or a symlink.
fn special_kind(t: std::fs::FileType) -> Option<&'static str> {
    if t.is_fifo() {
        Some("a FIFO (named pipe)")
    } else if t.is_char_device() {
        Some("a character device")
    } else if t.is_block_device() {
        Some("a block device")
    } else if t.is_socket() {
        Some("a socket")
    } else {
        None
    }
}

/// Refuses anything but a regular file, a directory or (before opening) a symlink, which the
/// open then refuses by O_NOFOLLOW.
fn check_kind(shown: &str, t: std::fs::FileType) -> Result<(), ToolError> {
    match special_kind(t) {
        Some(kind) => Err(ToolError::Failed(format!(
            "{shown} is {kind}, not a regular file; the file tools read and write regular files only"
        ))),
        None => Ok(()),
    }
}

/// The type check made before opening: a path that does not exist yet passes (Create makes it).
fn check_before_open(path: &Path, shown: &str) -> Result<(), ToolError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) => check_kind(shown, meta.file_type()),
        Err(_) => Ok(()),
    }
}

/// Why an open failed: ELOOP under O_NOFOLLOW means the last component is a symlink now, where
/// the firewall resolved none, so a firewall refusal (audited as such), not an I/O error.
fn open_error(e: std::io::Error, shown: &str) -> ToolError {
    if e.raw_os_error() == Some(libc::ELOOP) {
        ToolError::Firewall(FirewallError::SwappedForSymlink {
            path: shown.to_string(),
        })
    } else {
        ToolError::Io(e)
    }
}

/// Opens `path` (resolved by the firewall; `shown` is the path as the model gave it) and checks
/// the handle's link count.
pub(crate) async fn open(
    path: &Path,
    shown: &str,
    access: Access,
) -> Result<(tokio::fs::File, std::fs::Metadata), ToolError> {
    check_before_open(path, shown)?;
    let file = tokio::fs::OpenOptions::from(options(access))
        .open(path)
        .await
        .map_err(|e| open_error(e, shown))?;
    let meta = file.metadata().await?;
    check_kind(shown, meta.file_type())?;
    check_single_link(shown, &meta)?;
    Ok((file, meta))
}

/// [`open`] for code that already runs on a blocking thread.
pub(crate) fn open_blocking(
    path: &Path,
    access: Access,
) -> Result<(std::fs::File, std::fs::Metadata), ToolError> {
    let shown = path.display().to_string();
    check_before_open(path, &shown)?;
    let file = options(access)
        .open(path)
        .map_err(|e| open_error(e, &shown))?;
    let meta = file.metadata()?;
    check_kind(&shown, meta.file_type())?;
    check_single_link(&shown, &meta)?;
    Ok((file, meta))
}

/// The first bytes of an open file, at most `limit`, and whether the file goes on past them.
/// The size the file system reports is never trusted for this: /proc files report 0 and a file
/// may grow while it is read, so the read itself is bounded.
pub(crate) async fn read_at_most(
    file: tokio::fs::File,
    limit: u64,
) -> std::io::Result<(Vec<u8>, bool)> {
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .await?;
    let more = bytes.len() as u64 > limit;
    bytes.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    Ok((bytes, more))
}

/// [`read_at_most`] for code that already runs on a blocking thread.
pub(crate) fn read_at_most_blocking(
    file: std::fs::File,
    limit: u64,
) -> std::io::Result<(Vec<u8>, bool)> {
    use std::io::Read;
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    let more = bytes.len() as u64 > limit;
    bytes.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    Ok((bytes, more))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn hard_linked_files_are_refused_and_left_untouched() {
        let root = tempfile::tempdir().unwrap();
        let outside = root.path().join("outside.txt");
        std::fs::write(&outside, "keep me").unwrap();
        let inside = root.path().join("inside.txt");
        std::fs::hard_link(&outside, &inside).unwrap();
        for access in [Access::Read, Access::Update, Access::Create] {
            let e = open(&inside, "inside.txt", access).await.unwrap_err();
            assert!(e.to_string().contains("2 hard links"), "{e}");
            assert!(open_blocking(&inside, access).is_err());
        }
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep me");
        // One link is fine.
        std::fs::remove_file(&inside).unwrap();
        assert!(open(&outside, "outside.txt", Access::Update).await.is_ok());
    }

    #[tokio::test]
    async fn a_symlink_found_at_open_is_a_firewall_refusal() {
        let root = tempfile::tempdir().unwrap();
        let outside = root.path().join("outside.txt");
        std::fs::write(&outside, "keep me").unwrap();
        // As if the firewall had resolved `inside.txt` to a plain file that was swapped since.
        let inside = root.path().join("inside.txt");
        std::os::unix::fs::symlink(&outside, &inside).unwrap();
        for access in [Access::Read, Access::Update, Access::Create] {
            let e = open(&inside, "inside.txt", access).await.unwrap_err();
            assert!(
                matches!(
                    e,
                    ToolError::Firewall(FirewallError::SwappedForSymlink { .. })
                ),
                "{e}"
            );
            assert!(matches!(
                open_blocking(&inside, access),
                Err(ToolError::Firewall(_))
            ));
        }
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep me");
    }

    #[tokio::test]
    async fn only_regular_files_and_directories_are_opened() {
        let root = tempfile::tempdir().unwrap();
        let fifo = root.path().join("fifo");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        // Without a writer, a blocking open of the FIFO would never return.
        for access in [Access::Read, Access::Update, Access::Create] {
            let e = open(&fifo, "fifo", access).await.unwrap_err();
            assert!(e.to_string().contains("is a FIFO"), "{e}");
            assert!(open_blocking(&fifo, access).is_err());
        }
        let e = open(Path::new("/dev/zero"), "/dev/zero", Access::Read)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("is a character device"), "{e}");
        assert!(open(root.path(), ".", Access::Read).await.is_ok());
    }

    #[tokio::test]
    async fn reads_stop_at_the_limit_whatever_the_reported_size() {
        // /dev/zero reports size 0 and never ends.
        let zero = tokio::fs::File::open("/dev/zero").await.unwrap();
        let (bytes, more) = read_at_most(zero, 1000).await.unwrap();
        assert_eq!((bytes.len(), more), (1000, true));
        let zero = std::fs::File::open("/dev/zero").unwrap();
        let (bytes, more) = read_at_most_blocking(zero, 10).unwrap();
        assert_eq!((bytes.len(), more), (10, true));
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("f"), "12345").unwrap();
        for (limit, want) in [(5, false), (4, true)] {
            let f = tokio::fs::File::open(root.path().join("f")).await.unwrap();
            let (bytes, more) = read_at_most(f, limit).await.unwrap();
            assert_eq!((bytes.len() as u64, more), (limit, want));
        }
    }

    #[tokio::test]
    async fn a_symlink_in_the_last_component_is_not_followed() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("target.txt"), "t").unwrap();
        std::os::unix::fs::symlink(root.path().join("target.txt"), root.path().join("l")).unwrap();
        assert!(
            open(&root.path().join("l"), "l", Access::Read)
                .await
                .is_err()
        );
        assert!(
            open(&root.path().join("l"), "l", Access::Create)
                .await
                .is_err()
        );
    }
}
