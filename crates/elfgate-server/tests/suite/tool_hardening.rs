//! Tools and hooks that never fail open, never read without bounds and never block a run past its
//! interrupt: the kernel's pseudo-file systems are deny zones, the file tools read regular files
//! only and at most their cap, a FIFO in the project wedges nothing, and a PreToolUse hook's
//! answer that does not read as allow denies the call.

use crate::common;
use crate::scripted;

use common::{Daemon, Ev, Opts};
use elfgate_mockllm::MockServer;
use scripted::{call, ends_by_id, finish_of, processing_notes, run, script, session};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// The daemon's address-space limit in these tests: far above what it needs (a few hundred MB of
/// mostly reserved memory), far below what an unbounded read of /dev/zero or of a multi-GB file
/// would take, so that such a read ends the daemon instead of filling the machine.
const ADDRESS_SPACE: u64 = 2 * 1024 * 1024 * 1024;

fn limited(opts: Opts) -> Opts {
    Opts {
        address_space_bytes: Some(ADDRESS_SPACE),
        ..opts
    }
}

/// Every event's JSON and the stored messages, as one text.
async fn everything_seen(d: &Daemon, sid: &str, evs: &[Ev]) -> String {
    let mut all: Vec<String> = evs.iter().map(|e| e.data.to_string()).collect();
    let (s, msgs) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    assert_eq!(s, 200);
    all.push(msgs.to_string());
    all.join("\n")
}

/// The daemon still answers (it was not killed by a read it could not hold).
async fn still_up(d: &mut Daemon) {
    assert!(d.child.try_wait().unwrap().is_none(), "the daemon exited");
    let (s, _) = d.get("/v1/sessions").await;
    assert_eq!(s, 200);
}

fn project() -> PathBuf {
    std::fs::canonicalize(scripted::project()).unwrap()
}

/// Runs one turn of `calls` (id, tool, arguments) in a new session on `project` in permission
/// `mode`, then "done"; the session id and the events up to the run's `complete`, which must end
/// with `stop`.
async fn run_calls(
    d: &Daemon,
    mock: &MockServer,
    project: &Path,
    mode: &str,
    calls: &[(&str, &str, Value)],
) -> (String, Vec<Ev>) {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, t, a)| call(id, t, a.clone()))
        .collect();
    script(mock, mode, json!([{"toolCalls": calls}, {"text": "done"}]));
    let (sid, _, evs) = run(
        d,
        session(
            "go",
            &format!("mock:script={mode}"),
            project,
            json!({"permissionMode": mode}),
        ),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop");
    (sid, evs)
}

fn mkfifo(path: &Path) {
    let ok = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap()
        .success();
    assert!(ok, "mkfifo {}", path.display());
}

#[tokio::test]
async fn the_pseudo_file_systems_are_refused_even_with_the_root_as_project() {
    const TOKEN: &str = "tok-pseudo-fs-7c1e0b9a2d";
    let mock = MockServer::start().await.unwrap();
    let mut d = Daemon::start(
        &mock,
        limited(Opts {
            token: Some(TOKEN.into()),
            ..Opts::default()
        }),
    );
    let calls = [
        ("z", "read_file", json!({"path": "/dev/zero"})),
        ("p", "read_file", json!({"path": "proc/self/pagemap"})),
        ("e", "read_file", json!({"path": "proc/self/environ"})),
        (
            "g",
            "grep",
            json!({"pattern": "ELFGATE", "path": "proc/self"}),
        ),
        ("s", "list_dir", json!({"path": "sys"})),
        ("l", "glob", json!({"pattern": "*", "path": "/dev"})),
    ];
    // Plan mode: read-only tools run without asking anyone.
    let (sid, evs) = run_calls(&d, &mock, Path::new("/"), "plan", &calls).await;
    let ends = ends_by_id(&evs);
    for (id, tool, _) in &calls {
        let (status, content) = &ends[*id];
        assert_eq!(status, "denied", "{id} ({tool}): {content}");
        assert!(
            content.contains("protected location"),
            "{id} ({tool}): {content}"
        );
    }
    // The daemon's environment (its token among it) reached neither the events nor the store.
    assert!(!everything_seen(&d, &sid, &evs).await.contains(TOKEN));
    still_up(&mut d).await;
}

#[tokio::test]
async fn devices_fifos_and_oversized_files_are_refused_by_the_file_tools() {
    let mock = MockServer::start().await.unwrap();
    let mut d = Daemon::start(&mock, limited(Opts::default()));
    let dir = project();
    mkfifo(&dir.join("pipe"));
    // A device node in the project, outside /dev's deny zone (making one needs root).
    let device = std::process::Command::new("mknod")
        .args([dir.join("zero").to_str().unwrap(), "c", "1", "5"])
        .status()
        .is_ok_and(|s| s.success());
    // A sparse 3 GiB file: cheap on disk, more than the daemon's whole address space.
    let big = std::fs::File::create(dir.join("big.txt")).unwrap();
    big.set_len(3 << 30).unwrap();
    drop(big);
    std::fs::write(dir.join("small.txt"), "needle\n").unwrap();

    let mut calls = vec![
        ("f1", "read_file", json!({"path": "pipe"})),
        ("f2", "write_file", json!({"path": "pipe", "content": "x"})),
        (
            "f3",
            "edit_file",
            json!({"path": "pipe", "old_string": "a", "new_string": "b"}),
        ),
        (
            "b1",
            "edit_file",
            json!({"path": "big.txt", "old_string": "a", "new_string": "b"}),
        ),
        ("b2", "read_file", json!({"path": "big.txt"})),
        ("w1", "grep", json!({"pattern": "needle|x"})),
        ("w2", "list_dir", json!({})),
        ("w3", "glob", json!({"pattern": "*"})),
    ];
    if device {
        calls.push(("d1", "read_file", json!({"path": "zero"})));
    }
    let (_, evs) = run_calls(&d, &mock, &dir, "bypassPermissions", &calls).await;
    let ends = ends_by_id(&evs);
    for id in ["f1", "f2", "f3"] {
        let (status, content) = &ends[id];
        assert_eq!(status, "error", "{id}: {content}");
        assert!(
            content.contains("is a FIFO (named pipe), not a regular file"),
            "{id}: {content}"
        );
    }
    for (id, tool) in [("b1", "edit_file"), ("b2", "read_file")] {
        let (status, content) = &ends[id];
        assert_eq!(status, "error", "{id}: {content}");
        assert!(
            content.contains(&format!("{tool}'s limit of 10485760 bytes")),
            "{id}: {content}"
        );
    }
    assert_eq!(
        std::fs::metadata(dir.join("big.txt")).unwrap().len(),
        3 << 30
    );
    // The walkers leave the FIFO and the device out, and still see the rest.
    assert_eq!(ends["w1"], ("success".into(), "small.txt:1: needle".into()));
    for id in ["w2", "w3"] {
        let listed: Vec<&str> = ends[id].1.lines().collect();
        assert_eq!(listed, ["a.txt", "big.txt", "small.txt"], "{id}");
    }
    if device {
        let (status, content) = &ends["d1"];
        assert_eq!(status, "error", "{content}");
        assert!(content.contains("is a character device"), "{content}");
    }
    // No thread of the daemon is left waiting for a writer on the FIFO.
    let pid = d.child.id();
    let stuck: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("wchan")).ok())
        .filter(|w| w.trim() == "fifo_open")
        .collect();
    assert!(
        stuck.is_empty(),
        "threads stuck opening the FIFO: {stuck:?}"
    );
    still_up(&mut d).await;
}

#[tokio::test]
async fn a_fifo_agents_md_wedges_no_run_and_interrupt_and_delete_work() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();
    mkfifo(&dir.join("AGENTS.md"));
    let (sid, _, evs) = run(&d, session("hi", "mock:tokens=3", &dir, json!({}))).await;
    assert_eq!(finish_of(&evs), "stop");
    let notes = processing_notes(&evs);
    assert!(
        notes
            .iter()
            .any(|n| n.contains("AGENTS.md not read") && n.contains("FIFO")),
        "{notes:?}"
    );
    // A second run, held mid-stream, stops on an interrupt; then the session can be deleted.
    let run2 = d
        .send(
            &sid,
            json!({"prompt": "more", "model": "mock:tokens=100,stall_after=3"}),
        )
        .await;
    let mut sse = d.events(&sid, None).await;
    sse.until_text("tok0 tok1 tok2 ").await;
    let (status, v) = d.interrupt_and_wait(&sid).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["status"], "interrupted", "{v}");
    let rest = sse.until_complete(&run2).await;
    assert_eq!(rest.last().unwrap().data["finishReason"], "interrupted");
    assert_eq!(d.delete(&format!("/v1/sessions/{sid}")).await, 204);
    let (s, _) = d.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(s, 404);
}

/// A daemon with one PreToolUse hook per tool, each answering in another shape.
fn hooked_daemon(mock: &MockServer) -> Daemon {
    let hook = |matcher: &str, command: &str| {
        format!(
            "[[engines.tinyelf.hooks]]\nevent = \"PreToolUse\"\nmatcher = \"{matcher}\"\ncommand = '''cat > /dev/null; {command}'''\n"
        )
    };
    let extra = [
        hook(
            "write_file",
            r#"echo '{"behavior":"deny","message":"the specification says no"}'"#,
        ),
        hook(
            "list_dir",
            r#"echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"claude code says no"}}'"#,
        ),
        hook("glob", "echo 'sure, go ahead'"),
        hook("edit_file", "echo 'exit two says no' >&2; exit 2"),
        hook("shell", r#"echo '{"decision":"maybe"}'"#),
        hook(
            "read_file",
            r#"echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow"}}'"#,
        ),
        hook("grep", r#"echo '{"behavior":"allow"}'"#),
        "[[engines.tinyelf.hooks]]\nevent = \"SessionStart\"\ncommand = \"echo not an answer\"\n"
            .to_string(),
    ]
    .join("\n");
    Daemon::start(
        mock,
        Opts {
            extra_toml: extra,
            ..Opts::default()
        },
    )
}

#[tokio::test]
async fn pre_tool_use_hooks_deny_whatever_does_not_read_as_allow() {
    let mock = MockServer::start().await.unwrap();
    let d = hooked_daemon(&mock);
    let dir = project();
    let calls = [
        ("w", "write_file", json!({"path": "b.txt", "content": "x"})),
        ("l", "list_dir", json!({})),
        ("g", "glob", json!({"pattern": "*"})),
        (
            "e",
            "edit_file",
            json!({"path": "a.txt", "old_string": "hello", "new_string": "bye"}),
        ),
        ("s", "shell", json!({"command": "touch c.txt"})),
        ("r", "read_file", json!({"path": "a.txt"})),
        ("q", "grep", json!({"pattern": "second"})),
    ];
    let (_, evs) = run_calls(&d, &mock, &dir, "bypassPermissions", &calls).await;
    let ends = ends_by_id(&evs);
    for (id, why) in [
        ("w", "the specification says no"),
        ("l", "claude code says no"),
        ("g", "its answer is not JSON: 'sure, go ahead'"),
        ("e", "exit two says no"),
        ("s", "its answer's decision is \"maybe\""),
    ] {
        let (status, content) = &ends[id];
        assert_eq!(status, "denied", "{id}: {content}");
        assert!(content.contains("PreToolUse hook"), "{id}: {content}");
        assert!(content.contains(why), "{id}: {content}");
    }
    assert!(!dir.join("b.txt").exists());
    assert!(!dir.join("c.txt").exists());
    assert!(
        std::fs::read_to_string(dir.join("a.txt"))
            .unwrap()
            .starts_with("hello")
    );
    // The allow shapes let their calls run.
    assert_eq!(ends["r"].0, "success", "{}", ends["r"].1);
    assert!(ends["r"].1.contains("hello world"));
    assert_eq!(ends["q"], ("success".into(), "a.txt:2: second line".into()));
    // A SessionStart hook cannot stop the run: its unreadable answer is reported.
    let notes = processing_notes(&evs);
    assert!(
        notes.iter().any(|n| n.starts_with("SessionStart hook:")
            && n.contains("not JSON")
            && n.contains("cannot stop the run")),
        "{notes:?}"
    );
}
