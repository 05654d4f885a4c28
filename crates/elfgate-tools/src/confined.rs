//! Reading a file for the engine itself (not for a tool call) under the same rules as the file
//! tools: the path is resolved by the firewall inside a root directory and outside the deny zones,
//! and the file is opened without following a last-component symlink and refused when it has
//! several hard links. The agent's prompt is built from such files (a project's AGENTS.md, a
//! skill's SKILL.md), so they must not become a way around the firewall. An agent the daemon
//! serves files to (an ACP agent's fs/* requests) reads and writes through the same rules.

use crate::file_access::{self, Access};
use crate::firewall::ExecutionFirewall;
use crate::tool::ToolError;
use std::path::Path;

/// A text file read up to a byte cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CappedText {
    /// The text (invalid UTF-8 replaced), at most the cap's bytes of the file.
    pub text: String,
    /// The file's whole size in bytes.
    pub total_bytes: u64,
}

impl CappedText {
    /// Whether the file was longer than what was read.
    pub fn truncated(&self) -> bool {
        (self.text.len() as u64) < self.total_bytes
    }
}

/// Writes `content` as the whole of `path` (relative to `root`, or absolute) through the
/// firewall, creating it and its directories when missing, as the write_file tool does.
pub async fn write_confined(
    firewall: &ExecutionFirewall,
    root: &Path,
    path: &str,
    content: &str,
) -> Result<(), ToolError> {
    let resolved = firewall.resolve_path(root, path)?;
    if let Some(parent) = resolved.parent() {
        tokio::fs::create_dir_all(parent).await?;
    }
    let (mut file, _) = file_access::open(&resolved, path, Access::Create).await?;
    crate::fs_tools::replace_contents(&mut file, content.as_bytes()).await?;
    Ok(())
}

/// Reads `path` (relative to `root`, or absolute) through the firewall, at most `max_bytes` of it.
pub async fn read_capped(
    firewall: &ExecutionFirewall,
    root: &Path,
    path: &str,
    max_bytes: usize,
) -> Result<CappedText, ToolError> {
    let resolved = firewall.resolve_path(root, path)?;
    let (file, meta) = file_access::open(&resolved, path, Access::Read).await?;
    if meta.is_dir() {
        return Err(ToolError::Failed(format!("{path} is a directory")));
    }
    let (bytes, more) = file_access::read_at_most(file, max_bytes as u64).await?;
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    // A cut inside a character leaves a replacement character at the end: drop it.
    if more && text.ends_with('\u{FFFD}') {
        text.pop();
    }
    // The reported size can be wrong (0 for /proc files, stale for a growing file): a file read
    // past the cap is at least one byte longer than what was kept.
    let total_bytes = if more {
        meta.len().max(bytes.len() as u64 + 1)
    } else {
        bytes.len() as u64
    };
    Ok(CappedText { text, total_bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_inside_the_root_only_and_caps() {
        let root = tempfile::tempdir().unwrap();
        let fw = ExecutionFirewall::new(Vec::new(), &[]).unwrap();
        std::fs::write(root.path().join("a.md"), "héllo world").unwrap();
        let t = read_capped(&fw, root.path(), "a.md", 100).await.unwrap();
        assert_eq!(t.text, "héllo world");
        assert!(!t.truncated());
        // Cut inside the two-byte é: the half character is dropped.
        let t = read_capped(&fw, root.path(), "a.md", 2).await.unwrap();
        assert_eq!(t.text, "h");
        assert!(t.truncated());
        let e = read_capped(&fw, root.path(), "../x", 10).await.unwrap_err();
        assert!(e.to_string().contains("outside"), "{e}");
        let e = read_capped(&fw, root.path(), ".", 10).await.unwrap_err();
        assert!(e.to_string().contains("directory"), "{e}");
    }
}
