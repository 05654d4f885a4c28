//! How the file tools open a project file: never through a symlink in the last component (the
//! firewall resolved the path already, so one found there now was swapped in since) and never a
//! regular file with several hard links, judged on the open handle so that no rename can slip
//! between the check and the use. Opening for writing does not truncate: a refused file is left
//! as it was.

use crate::firewall::check_single_link;
use crate::tool::ToolError;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

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
        .custom_flags(libc::O_NOFOLLOW);
    o
}

/// Opens `path` (resolved by the firewall; `shown` is the path as the model gave it) and checks
/// the handle's link count.
pub(crate) async fn open(
    path: &Path,
    shown: &str,
    access: Access,
) -> Result<(tokio::fs::File, std::fs::Metadata), ToolError> {
    let file = tokio::fs::OpenOptions::from(options(access))
        .open(path)
        .await?;
    let meta = file.metadata().await?;
    check_single_link(shown, &meta)?;
    Ok((file, meta))
}

/// [`open`] for code that already runs on a blocking thread.
pub(crate) fn open_blocking(
    path: &Path,
    access: Access,
) -> Result<(std::fs::File, std::fs::Metadata), ToolError> {
    let file = options(access).open(path)?;
    let meta = file.metadata()?;
    check_single_link(&path.display().to_string(), &meta)?;
    Ok((file, meta))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
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
