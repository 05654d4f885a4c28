//! The sandbox profile of a supervised CLI or ACP agent: the shell tool's sandbox, writable in
//! its project and its home under the data directory (which confined processes otherwise never
//! see), with the run's own files shown again. Its binary's installation is readable, as the
//! whole file system is; its network is the daemon's (it must reach its provider and the
//! daemon's doors).

use elfgate_tools::sandbox::Confinement;
use elfgate_tools::terminal::ShellRules;
use std::path::{Path, PathBuf};

/// The profile of a CLI working in `project` with `home`; None without a sandbox.
pub(super) fn cli_confinement(
    rules: &ShellRules,
    project: &Path,
    home: PathBuf,
    run_files: Option<&Path>,
) -> Option<Confinement> {
    let mut c = rules.sandbox.as_ref()?.confine(Some(project));
    c.writable.push(home);
    c.writable.extend(run_files.map(Path::to_path_buf));
    Some(c)
}
