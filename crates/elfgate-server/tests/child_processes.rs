//! What the commands tinyelf runs (shell calls, hooks) can see and reach, and what they leave
//! behind: a clean environment, a network of their own, no survivors, usable hook timeouts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::GUARD;
use elfgate_mockllm::MockServer;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn project() -> PathBuf {
    tempfile::tempdir().unwrap().keep()
}

/// Runs `elfgate ARGS --config FILE` and waits (bounded) for it to exit; returns its exit status
/// and stderr, or None if it was still running (it is killed then).
fn elfgate_exits(args: &[&str], config: &Path) -> Option<(std::process::ExitStatus, String)> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_elfgate"))
        .args(args)
        .arg("--config")
        .arg(config)
        .env_remove("ELFGATE_TOKEN")
        .env_remove("ELFGATE_BIND")
        .env_remove("ELFGATE_DATABASE_URL")
        .env("ELFGATE_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + GUARD;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            return Some((status, err));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[tokio::test]
async fn a_hook_timeout_that_is_not_a_number_of_seconds_is_refused_at_load() {
    let mock = MockServer::start().await.unwrap();
    for bad in ["inf", "nan", "-inf"] {
        let dir = project();
        let config = common::write_config(
            &dir,
            &mock,
            &format!(
                "[[engines.tinyelf.hooks]]\nevent = \"PreToolUse\"\ncommand = \"true\"\n\
                 timeout_secs = 5\n\n[[engines.tinyelf.hooks]]\nevent = \"PostToolUse\"\n\
                 command = \"true\"\ntimeout_secs = {bad}\n"
            ),
        );
        for args in [&["serve"][..], &["config", "check"][..]] {
            let (status, err) = elfgate_exits(args, &config)
                .unwrap_or_else(|| panic!("elfgate {args:?} accepted timeout_secs = {bad}"));
            assert!(!status.success(), "{args:?} {bad}");
            assert!(
                err.contains("engines.tinyelf.hooks[1].timeout_secs"),
                "{args:?} {bad}: {err}"
            );
        }
    }
}
