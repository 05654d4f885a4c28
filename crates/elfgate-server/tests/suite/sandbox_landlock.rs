//! The sandbox with Landlock as its mechanism (docs/security.md, "Landlock, where bubblewrap
//! cannot run"): the attacker's commands of the bubblewrap tests read no deny zone, copy nothing
//! of the daemon's database, write nothing outside the project and see no other project under
//! the projects root, while the project and a build-like command work and the call's private
//! TMPDIR is gone after it; every engine's runs say the mechanism in their `init`.

use super::sandbox::{attack, hook_confined, mcp_server_confined};
use super::workflows::{create, start_run};
use crate::common::{Daemon, Opts};
use crate::scripted::of;

use elfgate_mockllm::MockServer;
use serde_json::json;
use std::path::Path;

#[tokio::test]
async fn under_landlock_an_attackers_commands_reach_no_secret_and_write_only_in_the_project() {
    let mock = MockServer::start().await.unwrap();
    let tmp_call = (
        "tmp",
        "echo scratch > \"$TMPDIR/t\" && cat \"$TMPDIR/t\" && echo \"tmpdir=$TMPDIR\"".to_string(),
    );
    // The kernel refuses, where bubblewrap's read-only mounts would say "Read-only file system".
    let attack = attack(
        &mock,
        "mechanism = \"landlock\"\n",
        &[tmp_call],
        "Permission denied",
    )
    .await;
    // Reading a deny zone is refused too (with bubblewrap it would be empty).
    assert!(
        attack.by("ssh").contains("Permission denied"),
        "{}",
        attack.by("ssh")
    );
    // The projects root cannot be listed: only the session's own project is granted in it.
    assert_eq!(
        attack.stdout_of("theirs").trim(),
        "",
        "{}",
        attack.by("theirs")
    );
    // Its private TMPDIR was writable, and is gone after the call.
    let tmp = attack.by("tmp");
    assert!(tmp.starts_with("exit code: 0"), "{tmp}");
    assert!(tmp.contains("scratch"), "{tmp}");
    let tmpdir = tmp
        .lines()
        .find_map(|l| l.strip_prefix("tmpdir="))
        .unwrap_or_else(|| panic!("{tmp}"));
    assert!(!tmpdir.is_empty() && tmpdir != "/tmp", "{tmp}");
    assert!(!Path::new(tmpdir).exists(), "{tmp}");
    attack.assert_mechanism("landlock").await;
}

#[tokio::test]
async fn the_init_of_chat_and_workflow_runs_says_the_sandbox_too() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: "[sandbox]\nmechanism = \"landlock\"\n".into(),
            ..Opts::default()
        },
    );
    let said = json!({"mode": "required", "mechanism": "landlock"});
    let (sid, run) = d
        .create(json!({"engine": "chat", "prompt": "hi", "model": "mock:tokens=2"}))
        .await;
    let evs = d.all_events_until_complete_of(&sid, &run).await;
    assert_eq!(of(&evs, "init")[0].data["systemInfo"]["sandbox"], said);
    let project = tempfile::tempdir().unwrap();
    create(
        &d,
        json!({"name": "stamp", "projectPath": project.path().display().to_string(),
         "permissionMode": "bypassPermissions",
         "steps": [{"id": "ls", "tool": "shell", "arguments": {"command": "echo ran"}}]}),
    )
    .await;
    let (sid, run) = start_run(&d, "stamp", json!({})).await;
    let evs = d.all_events_until_complete_of(&sid, &run).await;
    let init = of(&evs, "init")[0].data.clone();
    assert_eq!(init["systemInfo"]["engine"], "workflow", "{init}");
    assert_eq!(init["systemInfo"]["sandbox"], said, "{init}");
}

#[tokio::test]
async fn under_landlock_an_mcp_stdio_server_works_and_reads_no_deny_zone() {
    mcp_server_confined("mechanism = \"landlock\"\n").await;
}

#[tokio::test]
async fn under_landlock_a_hook_reads_no_key_and_writes_nothing_in_the_home() {
    hook_confined("mechanism = \"landlock\"\n").await;
}
