//! Files a CLI run reads secrets from (claude-code's MCP servers, with their `headers` and
//! `env`): never its command line, which every local user reads in `ps` and /proc/PID/cmdline.
//! Each run gets an owner-only directory of its own under the state directory, removed when
//! the run ends.

use elfgate_core::RunId;
use elfgate_core::private_files::{ensure_private_dir, write_private};
use std::path::{Path, PathBuf};

/// The directory under the state directory that holds the runs' directories.
const RUN_FILES: &str = "run-files";

/// One run's private directory; removed with everything in it when this value is dropped.
pub(crate) struct RunFiles {
    dir: PathBuf,
}

impl RunFiles {
    /// Creates `state_dir/run-files/RUN` (0700, as is its parent).
    pub(crate) fn create(state_dir: &Path, run: &RunId) -> std::io::Result<RunFiles> {
        let parent = state_dir.join(RUN_FILES);
        ensure_private_dir(&parent)?;
        let dir = parent.join(run.to_string());
        ensure_private_dir(&dir)?;
        Ok(RunFiles { dir })
    }

    /// Its directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes `content` into the file `name` (0600); returns its path.
    pub(crate) fn write(&self, name: &str, content: &str) -> std::io::Result<PathBuf> {
        let path = self.dir.join(name);
        write_private(&path, content.as_bytes())?;
        Ok(path)
    }
}

impl Drop for RunFiles {
    fn drop(&mut self) {
        match std::fs::remove_dir_all(&self.dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(
                error = %e,
                dir = %self.dir.display(),
                "cannot remove a CLI run's private files"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_runs_files_are_owner_only_and_gone_with_it() {
        let state = tempfile::tempdir().unwrap();
        let run = RunId::new();
        let files = RunFiles::create(state.path(), &run).unwrap();
        let path = files.write("mcp.json", "{}").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        assert_eq!(mode(&state.path().join(RUN_FILES)), 0o700);
        drop(files);
        assert!(!path.exists());
        assert!(!state.path().join(RUN_FILES).join(run.to_string()).exists());
    }
}
