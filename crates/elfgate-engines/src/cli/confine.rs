//! The sandbox profile of a supervised CLI or ACP agent: the shell tool's sandbox (its mode and
//! deny zones), writable in its project and in its own home under the data directory (which
//! confined processes otherwise never see: the home is bound back after the data directory is
//! hidden), with the run's private files (its MCP servers' file) shown read-only. Its binary's
//! installation is readable, as the whole file system is. Its network is the daemon's: it must
//! reach its provider and the daemon's doors over loopback.

use elfgate_tools::sandbox::Confinement;
use elfgate_tools::terminal::ShellRules;
use std::path::{Path, PathBuf};

/// The profile of a CLI working in `project` with `home` (and the run's files in `run_files`);
/// None without a sandbox.
pub(super) fn cli_confinement(
    rules: &ShellRules,
    project: &Path,
    home: PathBuf,
    run_files: Option<&Path>,
) -> Option<Confinement> {
    let mut c = rules.sandbox.as_ref()?.confine(Some(project));
    c.writable.push(home);
    c.readable.extend(run_files.map(Path::to_path_buf));
    Some(c)
}
