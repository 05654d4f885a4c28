//! What a shell command did to its project: a listing of the project's files (size, modification
//! time, inode) before and after the command, compared. Cheap and bounded: a project with more
//! files than [`MAX_SCANNED`] is not listed (the result says so), `.git` is not walked, and at
//! most `max_listed` changes are named.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Most entries a listing walks before it gives up.
pub const MAX_SCANNED: usize = 50_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    mtime_ns: i128,
    ino: u64,
}

/// The project's files at one moment; None when there were too many to list.
#[derive(Debug, Clone)]
pub struct Listing(Option<BTreeMap<PathBuf, Stamp>>);

impl Listing {
    /// Lists the regular files and symbolic links under `project`.
    pub fn take(project: &Path) -> Listing {
        let mut files = BTreeMap::new();
        let walk = walkdir::WalkDir::new(project)
            .follow_links(false)
            .into_iter()
            .filter_entry(|e| e.depth() == 0 || e.file_name() != ".git");
        for (seen, entry) in walk.enumerate() {
            if seen >= MAX_SCANNED {
                return Listing(None);
            }
            let Ok(entry) = entry else { continue };
            if entry.file_type().is_dir() {
                continue;
            }
            let Ok(meta) = entry.metadata() else { continue };
            let rel = entry
                .path()
                .strip_prefix(project)
                .unwrap_or(entry.path())
                .to_path_buf();
            let mtime_ns = i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec());
            files.insert(
                rel,
                Stamp {
                    len: meta.len(),
                    mtime_ns,
                    ino: meta.ino(),
                },
            );
        }
        Listing(Some(files))
    }

    /// What changed from `self` to `after`, as lines for the tool result (`created: PATH`,
    /// `changed: PATH`, `deleted: PATH`), at most `max_listed` of them plus a count of the rest;
    /// empty when nothing changed.
    pub fn changes(&self, after: &Listing, max_listed: usize) -> Vec<String> {
        let (Some(before), Some(now)) = (&self.0, &after.0) else {
            return vec![format!(
                "(not listed: the project has more than {MAX_SCANNED} files)"
            )];
        };
        let mut lines: Vec<String> = Vec::new();
        for (path, stamp) in now {
            match before.get(path) {
                None => lines.push(format!("created: {}", path.display())),
                Some(old) if old != stamp => lines.push(format!("changed: {}", path.display())),
                Some(_) => {}
            }
        }
        lines.extend(
            before
                .keys()
                .filter(|p| !now.contains_key(*p))
                .map(|p| format!("deleted: {}", p.display())),
        );
        if lines.len() > max_listed {
            let rest = lines.len() - max_listed;
            lines.truncate(max_listed);
            lines.push(format!("... and {rest} more"));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_changed_and_deleted_files_are_named_up_to_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::create_dir_all(p.join("src")).unwrap();
        std::fs::create_dir_all(p.join(".git")).unwrap();
        std::fs::write(p.join("src/main.rs"), "fn main() {}").unwrap();
        std::fs::write(p.join("old.txt"), "old").unwrap();
        std::fs::write(p.join("same.txt"), "same").unwrap();
        let before = Listing::take(p);
        std::fs::write(p.join("src/main.rs"), "fn main() { println!(); }").unwrap();
        std::fs::remove_file(p.join("old.txt")).unwrap();
        std::fs::write(p.join("new.txt"), "new").unwrap();
        std::fs::write(p.join(".git/index"), "x").unwrap();
        let after = Listing::take(p);
        assert_eq!(
            before.changes(&after, 10),
            [
                "created: new.txt",
                "changed: src/main.rs",
                "deleted: old.txt"
            ]
        );
        assert_eq!(
            before.changes(&after, 1),
            ["created: new.txt", "... and 2 more"]
        );
        assert!(before.changes(&before, 10).is_empty());
    }
}
