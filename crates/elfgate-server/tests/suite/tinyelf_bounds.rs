//! What happens past tinyelf's bounds: background sub-agents per run, and permission decisions
//! remembered per session.

use crate::common;
use crate::scripted;

use common::Daemon;
use elfgate_mockllm::MockServer;
use scripted::events::drained_text;
use scripted::{call, daemon_with, ends_by_id, finish_of, resume, script, session, spawn_bg};
use serde_json::json;

fn daemon(mock: &MockServer, tinyelf_toml: &str) -> Daemon {
    daemon_with(mock, &format!("[engines.tinyelf]\n{tinyelf_toml}\n"))
}

/// The drained background results of `evs`, as `userMessage` texts.
fn drained(evs: &[common::Ev]) -> Vec<String> {
    evs.iter().filter_map(drained_text).collect()
}

#[tokio::test]
async fn background_agents_past_the_cap_get_a_tool_error_and_the_run_goes_on() {
    let mock = MockServer::start().await.unwrap();
    let d = daemon(&mock, "max_background_agents = 2");
    let dir = tempfile::tempdir().unwrap().keep();
    script(&mock, "bg-sub", json!([{"text": "sub done"}]));
    // Three at once (one too many), then one more in the next iteration of the same run.
    script(
        &mock,
        "bg-cap",
        json!([
            {"toolCalls": [spawn_bg("b1", "b1"), spawn_bg("b2", "b2"), spawn_bg("b3", "b3")]},
            {"toolCalls": [spawn_bg("b4", "b4")]},
            {"text": "done"}
        ]),
    );
    let cfg = json!({"engineConfig": {"subAgentModel": "mock:script=bg-sub"}});
    let (sid, run1) = d
        .create(session("fan out", "mock:script=bg-cap", &dir, cfg.clone()))
        .await;
    let evs = d.all_events_until_complete_of(&sid, &run1).await;
    assert_eq!(finish_of(&evs), "stop");
    let e = ends_by_id(&evs);
    let started: Vec<&str> = ["b1", "b2", "b3"]
        .into_iter()
        .filter(|id| e[*id].0 == "success")
        .collect();
    assert_eq!(started.len(), 2, "{e:?}");
    for id in ["b1", "b2", "b3", "b4"] {
        let (status, content) = &e[id];
        if started.contains(&id) {
            assert!(content.contains("Background agent"), "{content}");
        } else {
            assert_eq!(status, "error", "{id}: {content}");
            assert!(
                content.contains("background sub-agent limit reached")
                    && content.contains("max_background_agents"),
                "{id}: {content}"
            );
        }
    }
    // The two that started ran to the end and were drained into the run.
    let texts = drained(&evs).join("\n");
    assert_eq!(texts.matches("[Background agent \"").count(), 2, "{texts}");
    for id in &started {
        assert!(
            texts.contains(&format!("[Background agent \"{id}\"")),
            "{texts}"
        );
    }

    // The cap is per run: the next run of the session starts with a fresh allowance.
    script(
        &mock,
        "bg-again",
        json!([{"toolCalls": [spawn_bg("c1", "c1")]}, {"text": "done again"}]),
    );
    let mut body = cfg;
    body["prompt"] = json!("once more");
    body["model"] = json!("mock:script=bg-again");
    let (run2, evs) = resume(&d, &sid, body).await;
    let evs: Vec<common::Ev> = evs.into_iter().filter(|e| e.run() == run2).collect();
    assert_eq!(finish_of(&evs), "stop");
    assert_eq!(ends_by_id(&evs)["c1"].0, "success");
}

#[tokio::test]
async fn past_the_memory_cap_the_oldest_allow_is_forgotten_and_asked_again() {
    let mock = MockServer::start().await.unwrap();
    let d = daemon(&mock, "max_remembered_decisions = 2");
    let dir = tempfile::tempdir().unwrap().keep();
    script(
        &mock,
        "mem",
        json!([
            // Remembered: write_file.
            {"toolCalls": [call("w1", "write_file", json!({"path": "one.txt", "content": "1"}))]},
            // Remembered: write_file, edit_file.
            {"toolCalls": [call("e1", "edit_file", json!({"path": "one.txt", "old_string": "1", "new_string": "2"}))]},
            // Allowed for the session: edit_file, shell (write_file, the oldest, is forgotten).
            {"toolCalls": [call("s1", "shell", json!({"command": "true"}))]},
            // Still remembered: not asked.
            {"toolCalls": [call("e2", "edit_file", json!({"path": "one.txt", "old_string": "2", "new_string": "3"}))]},
            // Forgotten: asked again.
            {"toolCalls": [call("w2", "write_file", json!({"path": "two.txt", "content": "2"}))]},
            {"text": "done"}
        ]),
    );
    let (sid, run) = d
        .create(session("edit", "mock:script=mem", &dir, json!({})))
        .await;
    let mut sse = d.events(&sid, None).await;
    let mut asked = Vec::new();
    let mut evs = Vec::new();
    loop {
        let ev = sse.next().await.expect("stream ended");
        if ev.event == "permissionRequest" {
            let tool = ev.data["toolName"].as_str().unwrap().to_string();
            let rid = ev.data["requestId"].as_str().unwrap();
            let scope = if tool == "shell" { "session" } else { "once" };
            let (s, v) = d
                .post(
                    &format!("/v1/sessions/{sid}/permissions/{rid}"),
                    json!({"decision": "allow", "scope": scope}),
                )
                .await;
            assert_eq!(s, 200, "{v}");
            asked.push(tool);
        }
        let done = ev.event == "complete" && ev.run() == run;
        evs.push(ev);
        if done {
            break;
        }
    }
    assert_eq!(finish_of(&evs), "stop");
    assert_eq!(asked, ["write_file", "edit_file", "shell", "write_file"]);
    let e = ends_by_id(&evs);
    for id in ["w1", "e1", "s1", "e2", "w2"] {
        assert_eq!(e[id].0, "success", "{id}: {}", e[id].1);
    }
    assert_eq!(std::fs::read_to_string(dir.join("one.txt")).unwrap(), "3");
    assert_eq!(std::fs::read_to_string(dir.join("two.txt")).unwrap(), "2");
}
