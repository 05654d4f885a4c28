//! With ELFGATE_LOG_FORMAT=json the daemon logs one JSON object a line, and the lines about a run
//! carry its session and run ids.

use crate::common;
use crate::scripted;

use common::{Daemon, Opts, chat, poll_until};
use elfgate_mockllm::MockServer;
use scripted::{call, project, script, session};
use serde_json::{Value, json};
use std::path::Path;

/// The whole JSON lines of the log once one of them satisfies `found`.
async fn log_lines_once(log: &Path, what: &str, found: impl Fn(&Value) -> bool) -> Vec<Value> {
    poll_until(what, || {
        let text = std::fs::read_to_string(log).ok()?;
        // Only whole lines: the daemon may be writing the next one.
        let whole = &text[..text.rfind('\n')? + 1];
        let lines: Vec<Value> = whole
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}")))
            .collect();
        lines.iter().any(&found).then_some(lines)
    })
    .await
}

fn json_log_daemon(mock: &MockServer, log: &Path, extra_toml: &str) -> Daemon {
    Daemon::start(
        mock,
        Opts {
            env: vec![
                ("ELFGATE_LOG_FORMAT".into(), "json".into()),
                ("ELFGATE_LOG".into(), "info".into()),
            ],
            log_file: Some(log.to_path_buf()),
            extra_toml: extra_toml.into(),
            ..Opts::default()
        },
    )
}

#[tokio::test]
async fn json_log_lines_about_a_run_carry_its_session_and_run_ids() {
    let mock = MockServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("daemon.log");
    let d = json_log_daemon(&mock, &log, "");
    // The provider fails once: the chat engine logs a retry, then the run ends normally.
    let (sid, rid) = d.create(chat("hi", "mock:fail=500x1,id=logs")).await;
    let evs = d.all_events_until_complete_of(&sid, &rid).await;
    assert!(evs.iter().any(|e| e.event == "retry"), "{evs:?}");

    let lines = log_lines_once(&log, "a retry line in the log", |l| {
        l["message"] == "retrying LLM call"
    })
    .await;

    // The provider's retry is logged inside the run, by the LLM client the engine called.
    let retries: Vec<&Value> = lines
        .iter()
        .filter(|l| l["message"] == "retrying LLM call")
        .collect();
    assert_eq!(retries.len(), 1, "{lines:?}");
    assert_eq!(retries[0]["level"], "WARN");
    assert_eq!(retries[0]["target"], "elfgate_llm::retry");
    assert!(retries[0]["span"].is_object(), "{}", retries[0]);
    // Every line logged inside a run (this one, the only one) names it.
    for line in lines.iter().filter(|l| l.get("span").is_some()) {
        assert_eq!(line["span"]["name"], "run", "{line}");
        assert_eq!(line["span"]["session_id"], sid.as_str(), "{line}");
        assert_eq!(line["span"]["run_id"], rid.as_str(), "{line}");
    }
    // The daemon's own lines outside runs are JSON too, without a run's span.
    assert!(
        lines
            .iter()
            .any(|l| l["message"] == "elfgate listening" && l.get("span").is_none()),
        "{lines:?}"
    );
}

/// Work a run leaves to a task of its own (here a PostToolUse hook, which runs after the fact)
/// still logs under the run's span.
#[tokio::test]
async fn lines_from_a_runs_background_tasks_carry_its_ids() {
    let mock = MockServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("daemon.log");
    let extra = r#"
[[engines.tinyelf.hooks]]
event = "PostToolUse"
matcher = "read_file"
command = "cat > /dev/null; exit 3"
"#;
    let d = json_log_daemon(&mock, &log, extra);
    let project = project();
    script(
        &mock,
        "hooklog",
        json!([{"toolCalls": [call("h1", "read_file", json!({"path": "a.txt"}))]}, {"text": "ok"}]),
    );
    let (sid, rid) = d
        .create(session("read", "mock:script=hooklog", &project, json!({})))
        .await;
    d.all_events_until_complete_of(&sid, &rid).await;
    let lines = log_lines_once(&log, "the failed hook's line", |l| {
        l["message"] == "hook failed"
    })
    .await;
    let hook = lines
        .iter()
        .find(|l| l["message"] == "hook failed")
        .unwrap();
    assert_eq!(hook["span"]["name"], "run", "{hook}");
    assert_eq!(hook["span"]["session_id"], sid.as_str(), "{hook}");
    assert_eq!(hook["span"]["run_id"], rid.as_str(), "{hook}");
}
