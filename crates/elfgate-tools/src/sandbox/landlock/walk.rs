//! Which paths a Landlock ruleset grants. Landlock only adds access (a rule on a directory
//! grants its whole subtree), so a subtree that holds a deny zone is never granted as a whole:
//! its entries are, walking down along the zone's ancestors, every one but the zone itself.

use std::path::{Path, PathBuf};

/// The paths whose subtrees together cover `root` without reaching any of `hidden` (real,
/// absolute paths): `root` itself when no zone lies strictly inside it (even when it lies inside
/// a zone: a writable directory shown again), nothing when it is a zone, else its entries,
/// walked down along the zones' ancestors. An entry whose real path lies in a zone or holds one
/// (a symbolic link to it) is left out; the ancestors themselves get nothing, so they cannot be
/// listed.
pub(crate) fn beneath(root: &Path, hidden: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if !hidden.iter().any(|z| z == root) {
        walk(root, hidden, &mut out);
    }
    out
}

/// Whether a zone lies strictly inside `dir`.
fn holds_a_zone(dir: &Path, hidden: &[PathBuf]) -> bool {
    hidden.iter().any(|z| z != dir && z.starts_with(dir))
}

fn walk(dir: &Path, hidden: &[PathBuf], out: &mut Vec<PathBuf>) {
    if !holds_a_zone(dir, hidden) {
        out.push(dir.to_path_buf());
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
    paths.sort();
    for path in paths {
        if hidden.contains(&path) {
            continue;
        }
        let is_dir = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir());
        if is_dir && holds_a_zone(&path, hidden) {
            walk(&path, hidden, out);
            continue;
        }
        // A rule follows symbolic links: one to a zone, or to a directory holding one, would
        // grant the zone. A dangling one grants nothing.
        let Ok(real) = std::fs::canonicalize(&path) else {
            continue;
        };
        if hidden
            .iter()
            .any(|z| real.starts_with(z) || z.starts_with(&real))
        {
            continue;
        }
        out.push(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(paths: &[PathBuf], base: &Path) -> Vec<String> {
        paths
            .iter()
            .map(|p| p.strip_prefix(base).unwrap().display().to_string())
            .collect()
    }

    #[test]
    fn every_sibling_along_the_way_to_a_zone_is_granted_but_not_the_zone_nor_its_ancestors() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        for d in [
            "home/.ssh",
            "home/src",
            "home/.config/gcloud",
            "etc",
            "data",
        ] {
            std::fs::create_dir_all(base.join(d)).unwrap();
        }
        std::fs::write(base.join("home/.bashrc"), "").unwrap();
        std::fs::write(base.join("home/.config/gcloud/key"), "").unwrap();
        std::fs::write(base.join("home/.config/app.toml"), "").unwrap();
        // Links that would open a zone, or a directory holding one, from outside the walk.
        std::os::unix::fs::symlink(base.join("home/.ssh"), base.join("etc/keys")).unwrap();
        std::os::unix::fs::symlink(base.join("home"), base.join("home/self")).unwrap();
        std::os::unix::fs::symlink(base.join("home/src"), base.join("home/code")).unwrap();
        std::os::unix::fs::symlink(base.join("gone"), base.join("home/dangling")).unwrap();
        let hidden = vec![
            base.join("home/.ssh"),
            base.join("home/.config/gcloud"),
            base.join("data"),
        ];
        let granted = beneath(&base, &hidden);
        assert_eq!(
            names(&granted, &base),
            [
                "etc",
                "home/.bashrc",
                "home/.config/app.toml",
                "home/code",
                "home/src"
            ]
        );
        // A subtree holding no zone is granted whole; a zone itself gets nothing, a directory
        // inside a zone (shown again) gets itself.
        assert_eq!(beneath(&base.join("etc"), &hidden), [base.join("etc")]);
        assert!(beneath(&base.join("data"), &hidden).is_empty());
        let inside = base.join("data/cli");
        assert_eq!(beneath(&inside, &hidden), std::slice::from_ref(&inside));
    }

    #[test]
    fn without_zones_the_root_is_granted_whole() {
        assert_eq!(beneath(Path::new("/"), &[]), [PathBuf::from("/")]);
    }
}
