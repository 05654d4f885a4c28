//! The ruleset applied for real to a thread of the test process (Landlock restricts the calling
//! thread only): these tests fail on a kernel without Landlock rather than pass unconfined.

use super::*;
use std::io::ErrorKind;

/// A base directory outside /tmp, under the target directory.
fn base() -> tempfile::TempDir {
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/sandbox-tests");
    std::fs::create_dir_all(&target).unwrap();
    tempfile::tempdir_in(target).unwrap()
}

#[test]
fn a_restricted_thread_reads_no_zone_and_writes_only_beneath_its_directories() {
    let abi = kernel_abi().unwrap();
    let dir = base();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let (project, outside, keys, tmp) = (
        root.join("p"),
        root.join("outside"),
        root.join("keys"),
        root.join("tmp"),
    );
    for d in [&project, &outside, &keys, &tmp] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(keys.join("id_rsa"), "PRIVATE-KEY").unwrap();
    std::fs::write(outside.join("notes"), "readable").unwrap();
    let profile = LandlockProfile {
        abi: abi as i32,
        hidden: vec![keys.clone()],
        writable: vec![project.clone(), tmp.clone()],
        readable: Vec::new(),
        tmp: tmp.clone(),
    };
    let seen = std::thread::spawn(move || {
        restrict(&profile).unwrap();
        let kind = |r: std::io::Result<()>| r.err().map(|e| e.kind());
        (
            kind(std::fs::read(keys.join("id_rsa")).map(drop)),
            kind(std::fs::read_dir(&keys).map(drop)),
            std::fs::read_to_string(outside.join("notes")).ok(),
            kind(std::fs::write(project.join("in"), "x")),
            kind(std::fs::write(tmp.join("t"), "x")),
            kind(std::fs::write(outside.join("x"), "x")),
            kind(std::fs::remove_file(outside.join("notes"))),
            kind(std::fs::write("/dev/null", "x")),
            kind(std::fs::read("/etc/hostname").map(drop)),
        )
    })
    .join()
    .unwrap();
    let denied = Some(ErrorKind::PermissionDenied);
    assert_eq!(seen.0, denied, "the key is unreadable");
    assert_eq!(seen.1, denied, "the zone cannot be listed");
    assert_eq!(seen.2.as_deref(), Some("readable"));
    assert_eq!((seen.3, seen.4), (None, None), "project and tmp writable");
    assert_eq!((seen.5, seen.6), (denied, denied), "outside read-only");
    assert_eq!(seen.7, None, "/dev/null writable");
    assert_ne!(seen.8, denied, "/etc readable");
    assert!(root.join("p/in").exists());
    assert!(root.join("outside/notes").exists());
}

#[test]
fn the_launchers_arguments_carry_the_profile_then_the_command() {
    let profile = LandlockProfile {
        abi: 4,
        hidden: vec!["/home/u/.ssh".into()],
        writable: vec!["/srv/p".into()],
        readable: Vec::new(),
        tmp: "/tmp/t".into(),
    };
    let args = launcher_args(&profile, "bash", &["-c".into(), "true".into()]).unwrap();
    assert_eq!(args[0], LAUNCHER_ARG);
    let back: LandlockProfile = serde_json::from_str(&args[1]).unwrap();
    assert_eq!(back, profile);
    assert_eq!(args[2..], ["--", "bash", "-c", "true"]);
}

#[test]
fn a_call_tmp_is_private_and_gone_when_dropped() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = CallTmp::create().unwrap();
    let path = tmp.path().to_path_buf();
    std::fs::write(path.join("f"), "x").unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    drop(tmp);
    assert!(!path.exists());
}
