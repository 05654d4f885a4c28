//! What happens past tinyelf's bounds: background sub-agents per run, and permission decisions
//! remembered per session.

use crate::common;
use crate::scripted;

use common::Daemon;
use elfgate_mockllm::MockServer;
use scripted::events::drained_text;
use scripted::{
    bodies_for, call, daemon_with, ends_by_id, finish_of, processing_notes, resume, script,
    session, spawn_bg,
};
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

/// The tokens a run spent, from its record.
async fn run_tokens(d: &Daemon, sid: &str, run: &str) -> u64 {
    let (s, r) = d.get(&format!("/v1/sessions/{sid}/runs/{run}")).await;
    assert_eq!(s, 200, "{r}");
    r["inputTokens"].as_u64().unwrap() + r["outputTokens"].as_u64().unwrap()
}

/// maxTotalTokens bounds a run, maxSessionTokens a session's runs together: checked before each
/// model call, a call that would pass the budget is not made, the run ends `budget_exhausted`
/// with a processing event saying which budget, and the calls made under a budget ask for no
/// more answer than it leaves.
#[tokio::test]
async fn token_budgets_end_runs_before_the_call_that_would_pass_them() {
    let mock = MockServer::start().await.unwrap();
    let d = daemon(&mock, "");
    let dir = tempfile::tempdir().unwrap().keep();
    let looping = |n: usize| {
        let mut steps: Vec<_> = (0..n)
            .map(|i| json!({"toolCalls": [call(&format!("l{i}"), "list_dir", json!({}))]}))
            .collect();
        steps.push(json!({"text": "listed"}));
        json!(steps)
    };
    // What two iterations of this loop cost, measured with an iteration limit.
    script(&mock, "measure", looping(5));
    let (sid, run, evs) = scripted::run(
        &d,
        session(
            "list",
            "mock:script=measure",
            &dir,
            json!({"engineConfig": {"maxIterations": 2}}),
        ),
    )
    .await;
    assert_eq!(finish_of(&evs), "max_iterations");
    let two_calls = run_tokens(&d, &sid, &run).await;

    // A run budget a little above that: two calls are made, the third is not.
    script(&mock, "budget", looping(5));
    let budget = two_calls + 10;
    let (sid, run, evs) = scripted::run(
        &d,
        session(
            "list",
            "mock:script=budget",
            &dir,
            json!({"engineConfig": {"maxTotalTokens": budget}}),
        ),
    )
    .await;
    assert_eq!(finish_of(&evs), "budget_exhausted");
    let bodies = bodies_for(&mock, "mock:script=budget");
    assert_eq!(bodies.len(), 2, "calls made");
    let note = processing_notes(&evs)
        .into_iter()
        .find(|m| m.contains("token budget exhausted"))
        .expect("no budget event");
    assert!(
        note.contains(&format!("maxTotalTokens = {budget}")),
        "{note}"
    );
    assert!(run_tokens(&d, &sid, &run).await <= budget);
    // Under a budget, a call asks for no more answer than the budget leaves.
    let asked = bodies[1]["max_tokens"].as_u64().unwrap();
    assert!(asked < 8192, "max_tokens {asked}");
    let (_, r) = d.get(&format!("/v1/sessions/{sid}/runs/{run}")).await;
    assert_eq!(r["finishReason"], "budget_exhausted");
    assert_eq!(r["status"], "completed");

    // A session budget counts the session's earlier runs: with room for one run's tokens and
    // a few more, the first run fits, and the second, whose first call would send at least what
    // the first one's did, is not started.
    script(&mock, "one", json!([{"text": "first"}]));
    let (sid, run1, _) = scripted::run(&d, session("hi", "mock:script=one", &dir, json!({}))).await;
    let one_run = run_tokens(&d, &sid, &run1).await;
    script(
        &mock,
        "sess",
        json!([{"text": "first"}, {"text": "second"}]),
    );
    let (sid, run1, evs) = scripted::run(
        &d,
        session(
            "hi",
            "mock:script=sess",
            &dir,
            json!({"engineConfig": {"maxSessionTokens": one_run + 5}}),
        ),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop");
    assert_eq!(run_tokens(&d, &sid, &run1).await, one_run);
    let (_, evs) = resume(&d, &sid, json!({"prompt": "again"})).await;
    assert_eq!(finish_of(&evs), "budget_exhausted");
    assert_eq!(bodies_for(&mock, "mock:script=sess").len(), 1);
    assert!(
        processing_notes(&evs)
            .iter()
            .any(|m| m.contains("maxSessionTokens")),
        "{:?}",
        processing_notes(&evs)
    );

    // A budget is a positive number.
    let (s, v) = d
        .post(
            "/v1/sessions",
            session(
                "x",
                "mock:script=sess",
                &dir,
                json!({"engineConfig": {"maxTotalTokens": 0}}),
            ),
        )
        .await;
    assert_eq!(s, 422, "{v}");
    assert!(v.to_string().contains("maxTotalTokens"), "{v}");
}
