//! The one directory walker of the file tools (grep, glob, list_dir): it never follows symlinks and
//! drops, without a word, every entry the firewall's [`Confinement`] refuses (deny zones, the
//! daemon's data directory, symlinks that lead out of the project or into a deny zone), and does not
//! descend into refused directories. Saying nothing keeps even the names in a deny zone hidden.
//! Devices, FIFOs and sockets are dropped too: no file tool can read them, and grep opening one
//! could block or never end.

use crate::firewall::Confinement;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// Directories grep and glob skip: large, generated, rarely what the model looks for.
const BULKY_DIRS: &[&str] = &[".git", "node_modules", "target"];

/// How far a walk goes and what it skips.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WalkOptions {
    /// Deepest level returned (the root is level 0).
    pub max_depth: usize,
    /// Skip [`BULKY_DIRS`] below the root.
    pub skip_bulky: bool,
}

/// The entries under `root` (a path the firewall resolved), the root itself first, that the
/// confinement admits. Unreadable entries are skipped.
pub(crate) fn walk(
    root: &Path,
    confinement: Confinement,
    opts: WalkOptions,
) -> impl Iterator<Item = walkdir::DirEntry> + use<> {
    walkdir::WalkDir::new(root)
        .follow_links(false)
        .max_depth(opts.max_depth)
        .into_iter()
        .filter_entry(move |e| {
            if e.depth() == 0 {
                return true;
            }
            let t = e.file_type();
            if t.is_fifo() || t.is_char_device() || t.is_block_device() || t.is_socket() {
                return false;
            }
            if opts.skip_bulky {
                let n = e.file_name().to_string_lossy();
                if BULKY_DIRS.iter().any(|b| n == *b) {
                    return false;
                }
            }
            confinement.admits(e.path(), e.path_is_symlink())
        })
        .filter_map(Result::ok)
}
