//! tinyelf's sub-agents end to end: foreground and background spawns, interrupts that reach them,
//! and the drains of background results into the parent run.

use crate::common;
use crate::scripted;

use common::{Daemon, Ev, Opts, Sse, allow, poll_until, types};
use elfgate_mockllm::MockServer;
use scripted::events::{drained_text, until_drain, until_requests};
use scripted::procs::{alive, until_dead};
use scripted::{
    bodies_for, call, ends, ends_by_id, finish_of, of, offered_tools, project, roles, run, script,
    session, spawn_bg, stored, wait_for_file,
};
use serde_json::{Value, json};

#[tokio::test]
async fn background_and_foreground_sub_agents() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();

    // Background: its result is drained into the parent after the parent's plain answer (the
    // agent waits for a permission given once that answer is out).
    script(
        &mock,
        "sub-bg",
        json!([
            {"toolCalls": [call("g0", "shell", json!({"command": "true"}))]},
            {"text": "seven"}
        ]),
    );
    script(
        &mock,
        "parent-bg",
        json!([
            {"toolCalls": [call("sp1", "spawn", json!({"task": "count the lines", "label": "counter", "background": true}))]},
            {"text": "Waiting for the counter."},
            {"text": "The counter said seven."}
        ]),
    );
    let (sid, run1) = d
        .create(session(
            "count",
            "mock:script=parent-bg",
            &dir,
            json!({"engineConfig": {"subAgentModel": "mock:script=sub-bg"}}),
        ))
        .await;
    let mut sse = d.events(&sid, None).await;
    let mut evs = Vec::new();
    let rids = until_requests(&mut sse, 1, &mut evs).await;
    while !evs.iter().any(|e| {
        e.event == "assistantMessage"
            && e.data["message"]["blocks"][0]["text"] == "Waiting for the counter."
    }) {
        evs.push(sse.next().await.expect("stream ended"));
    }
    allow(&d, &sid, &rids[0]).await;
    evs.extend(sse.until_complete(&run1).await);
    assert_eq!(finish_of(&evs), "stop", "{:?}", types(&evs));
    let e = ends(&evs);
    assert_eq!(e[0].0, "success");
    assert!(e[0].1.contains("Background agent \"counter\" started"));
    let msgs = stored(&d, &sid).await;
    assert_eq!(
        roles(&msgs),
        [
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
            "assistant"
        ]
    );
    let drained = msgs[4]["blocks"][0]["text"].as_str().unwrap();
    assert!(
        drained.starts_with("[Background agent \"counter\" ("),
        "{drained}"
    );
    assert!(drained.contains(") stop]\nseven"), "{drained}");
    assert_eq!(msgs[5]["blocks"][0]["text"], "The counter said seven.");
    let bodies = bodies_for(&mock, "mock:script=parent-bg");
    assert_eq!(bodies.len(), 3);
    assert!(
        bodies[2]
            .to_string()
            .contains("[Background agent \\\"counter\\\"")
    );
    // The drain did not use an iteration budget slot but every call is counted.
    assert_eq!(of(&evs, "result")[0].data["stats"]["iterations"], 3);

    // Foreground: the sub-agent's answer is the tool result; sub-agents get no spawn tool.
    script(&mock, "sub-fg", json!([{"text": "sub answer"}]));
    script(
        &mock,
        "parent-fg",
        json!([
            {"toolCalls": [call("sp2", "spawn", json!({"task": "answer", "label": "helper"}))]},
            {"text": "done"}
        ]),
    );
    let (_, _, evs) = run(
        &d,
        session(
            "fg",
            "mock:script=parent-fg",
            &dir,
            json!({"engineConfig": {"subAgentModel": "mock:script=sub-fg"}}),
        ),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop");
    let e = ends(&evs);
    assert_eq!(e[0], ("success".to_string(), "sub answer".to_string()));
    let sub = bodies_for(&mock, "mock:script=sub-fg");
    let tools = offered_tools(&sub[0]);
    assert!(!tools.contains(&"spawn"));
    assert!(tools.contains(&"read_file"));
}

#[tokio::test]
async fn interrupting_the_parent_stops_its_sub_agents() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();
    script(
        &mock,
        "sub-sleep",
        json!([{"toolCalls": [call("z", "shell", json!({"command": "echo $$ >> pids; exec sleep 600"}))]}]),
    );
    script(
        &mock,
        "parent-both",
        json!([{"toolCalls": [
            call("b", "spawn", json!({"task": "sleep", "label": "bg", "background": true})),
            call("f", "spawn", json!({"task": "sleep", "label": "fg"}))
        ]}]),
    );
    let (sid, run1) = d
        .create(session(
            "both",
            "mock:script=parent-both",
            &dir,
            json!({"permissionMode": "bypassPermissions",
                   "engineConfig": {"subAgentModel": "mock:script=sub-sleep"}}),
        ))
        .await;
    let mut sse = d.events(&sid, None).await;
    wait_for_file(&dir.join("pids"), 2).await;
    // The sleeps as this test sees them (each command has a pid namespace of its own, where
    // both are the same pid): the processes working in the project.
    let canonical = dir.canonicalize().unwrap();
    let pids = poll_until("both sleeps run", || {
        let sleeps: Vec<i32> = scripted::procs::live_in(&canonical)
            .into_iter()
            .filter(|p| {
                std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.starts_with(b"sleep"))
            })
            .collect();
        (sleeps.len() == 2).then_some(sleeps)
    })
    .await;
    assert_eq!(alive(&pids).len(), 2);
    let (s, _) = d
        .post(
            &format!("/v1/sessions/{sid}/interrupt"),
            json!({"wait": true}),
        )
        .await;
    assert_eq!(s, 200);
    let evs = sse.until_complete(&run1).await;
    assert_eq!(finish_of(&evs), "interrupted");
    let left = until_dead(|| alive(&pids)).await;
    assert!(left.is_empty(), "{left:?}");
    let e = ends_by_id(&evs);
    // The background spawn had returned at once; the foreground one was interrupted.
    assert_eq!(e["b"].0, "success");
    assert_eq!(e["f"].0, "interrupted");
}

/// A sub-agent script for `n` gated sub-agents: each first asks to run a shell command (a
/// permission request the test answers, one at a time), then answers "sub done". The first `n`
/// requests are the sub-agents' first calls because the test waits for all `n` permission
/// requests before it answers any.
fn gated_sub_agents(mock: &MockServer, name: &str, n: usize) {
    let mut responses: Vec<Value> = (0..n)
        .map(
            |i| json!({"toolCalls": [call(&format!("g{i}"), "shell", json!({"command": "true"}))]}),
        )
        .collect();
    responses.push(json!({"text": "sub done"}));
    script(mock, name, Value::Array(responses));
}

/// Starts a parent run (scripts `parent-NAME` and `sub-NAME`) that first spawns `n` gated
/// background agents (labels a1, a2, ...), then goes on with `then`; `engine_config` gets the
/// sub-agent model added. Returns once every agent waits for its permission: the session, the
/// run, its stream, every event read so far, and the agents' permission requests in the order
/// they came.
async fn fan_out(
    d: &Daemon,
    mock: &MockServer,
    name: &str,
    n: usize,
    then: Vec<Value>,
    mut engine_config: Value,
) -> (String, String, Sse, Vec<Ev>, Vec<String>) {
    gated_sub_agents(mock, &format!("sub-{name}"), n);
    let spawns: Vec<Value> = (1..=n)
        .map(|i| spawn_bg(&format!("b{i}"), &format!("a{i}")))
        .collect();
    let mut responses = vec![json!({ "toolCalls": spawns })];
    responses.extend(then);
    script(mock, &format!("parent-{name}"), Value::Array(responses));
    engine_config["subAgentModel"] = json!(format!("mock:script=sub-{name}"));
    let (sid, run) = d
        .create(session(
            name,
            &format!("mock:script=parent-{name}"),
            &project(),
            json!({ "engineConfig": engine_config }),
        ))
        .await;
    let mut sse = d.events(&sid, None).await;
    let mut seen = Vec::new();
    let rids = until_requests(&mut sse, n, &mut seen).await;
    (sid, run, sse, seen, rids)
}

#[tokio::test]
async fn background_drains_stop_after_three_in_a_row_without_spending_iterations() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    // The parent spawns four background agents, then answers plainly forever.
    let (sid, run1, mut sse, mut seen, rids) = fan_out(
        &d,
        &mock,
        "drain",
        4,
        vec![json!({"text": "Still waiting."})],
        // Two iterations: the spawn call and the first plain answer use them up; drains are free.
        json!({"maxIterations": 2}),
    )
    .await;
    // One result becomes ready per drain: the next sub-agent is let go only after the drain.
    let mut drains = Vec::new();
    for rid in &rids[..3] {
        allow(&d, &sid, rid).await;
        drains.push(until_drain(&mut sse, &mut seen).await);
    }
    seen.extend(sse.until_complete(&run1).await);
    // After three drains in a row the fourth plain answer ends the run, although the fourth
    // sub-agent is still going (it waits for its permission).
    assert_eq!(finish_of(&seen), "stop", "{:?}", types(&seen));
    let this_run: Vec<&Ev> = seen.iter().filter(|e| e.run() == run1).collect();
    let drained: Vec<String> = this_run.iter().filter_map(|e| drained_text(e)).collect();
    assert_eq!(drained, drains);
    assert_eq!(drained.len(), 3);
    for t in &drained {
        assert_eq!(t.matches("[Background agent \"").count(), 1, "{t}");
        assert!(t.contains(") stop]\nsub done"), "{t}");
    }
    // Each drain named a different agent.
    let labels: std::collections::BTreeSet<&str> = drained
        .iter()
        .map(|t| t.split('"').nth(1).unwrap())
        .collect();
    assert_eq!(labels.len(), 3);
    // The fourth sub-agent was stopped with the run: its request was withdrawn.
    let resolved: Vec<&&Ev> = this_run
        .iter()
        .filter(|e| e.event == "permissionResolved" && e.data["requestId"] == rids[3].as_str())
        .collect();
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0].data["decision"], "deny");

    let msgs = stored(&d, &sid).await;
    assert_eq!(
        roles(&msgs),
        [
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
            "assistant"
        ]
    );
    // Five model calls with maxIterations 2: the three drained calls spent no iteration, but
    // every call is counted in the stats.
    assert_eq!(bodies_for(&mock, "mock:script=parent-drain").len(), 5);
    assert_eq!(of(&seen, "result")[0].data["stats"]["iterations"], 5);
    // The last call saw all three drained results.
    let last = bodies_for(&mock, "mock:script=parent-drain").pop().unwrap();
    assert_eq!(
        last.to_string().matches("[Background agent \\\"").count(),
        3
    );
}

#[tokio::test]
async fn a_real_tool_call_resets_the_drain_counter() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    // One drain in a row at most: without the reset, "Second wait." would end the run.
    let (sid, run1, mut sse, mut seen, rids) = fan_out(
        &d,
        &mock,
        "reset",
        3,
        vec![
            json!({"text": "First wait."}),
            json!({"toolCalls": [call("l1", "list_dir", json!({}))]}),
            json!({"text": "Second wait."}),
            json!({"text": "Giving up."}),
        ],
        json!({"maxBackgroundDrainRounds": 1}),
    )
    .await;
    allow(&d, &sid, &rids[0]).await;
    until_drain(&mut sse, &mut seen).await;
    allow(&d, &sid, &rids[1]).await;
    until_drain(&mut sse, &mut seen).await;
    seen.extend(sse.until_complete(&run1).await);
    assert_eq!(finish_of(&seen), "stop", "{:?}", types(&seen));
    let msgs = stored(&d, &sid).await;
    assert_eq!(
        roles(&msgs),
        [
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
            "assistant"
        ]
    );
    assert_eq!(msgs[3]["blocks"][0]["text"], "First wait.");
    assert!(
        msgs[4]["blocks"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("[Background agent")
    );
    assert_eq!(msgs[5]["blocks"][0]["name"], "list_dir");
    assert_eq!(msgs[7]["blocks"][0]["text"], "Second wait.");
    assert!(
        msgs[8]["blocks"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("[Background agent")
    );
    // The limit still holds after the reset: the third agent is still going, but one drain in a
    // row was all that was allowed.
    assert_eq!(msgs[9]["blocks"][0]["text"], "Giving up.");
    assert_eq!(bodies_for(&mock, "mock:script=parent-reset").len(), 5);
}

/// Reads events until the `processing` event that says background agent `label` ended.
async fn until_background_end(sse: &mut Sse, label: &str, seen: &mut Vec<Ev>) {
    let prefix = format!("[agent \"{label}\" (");
    loop {
        let ev = sse.next().await.expect("stream ended");
        let done = ev.event == "processing"
            && ev.data["message"]
                .as_str()
                .is_some_and(|m| m.starts_with(&prefix) && m.ends_with("(in the background)"));
        seen.push(ev);
        if done {
            return;
        }
    }
}

/// The permission request among `seen` whose tool is `tool`.
fn request_for(seen: &[Ev], tool: &str) -> String {
    seen.iter()
        .find(|e| e.event == "permissionRequest" && e.data["toolName"] == tool)
        .and_then(|e| e.data["requestId"].as_str())
        .unwrap_or_else(|| panic!("no permission request for {tool}: {:?}", types(seen)))
        .to_string()
}

#[tokio::test]
async fn a_background_result_ready_at_the_end_of_a_tool_iteration_follows_its_tool_results() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    // The parent spawns a gated agent, then writes a file (which waits for its permission),
    // then answers.
    let (sid, run1, mut sse, mut seen, _) = fan_out(
        &d,
        &mock,
        "tooldrain",
        1,
        vec![
            json!({"toolCalls": [call("w1", "write_file", json!({"path": "x.txt", "content": "1"}))]}),
            json!({"text": "done"}),
        ],
        json!({}),
    )
    .await;
    until_requests(&mut sse, 1, &mut seen).await;
    // The agent ends while the parent's tool call waits: its result is ready at the end of the
    // tool iteration, not only when the model next answers without tools.
    allow(&d, &sid, &request_for(&seen, "shell")).await;
    until_background_end(&mut sse, "a1", &mut seen).await;
    allow(&d, &sid, &request_for(&seen, "write_file")).await;
    seen.extend(sse.until_complete(&run1).await);
    assert_eq!(finish_of(&seen), "stop", "{:?}", types(&seen));

    let msgs = stored(&d, &sid).await;
    assert_eq!(
        roles(&msgs),
        [
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "user",
            "assistant"
        ]
    );
    assert_eq!(msgs[3]["blocks"][0]["name"], "write_file");
    let note = msgs[5]["blocks"][0]["text"].as_str().unwrap();
    assert!(note.starts_with("[Background agent \"a1\" ("), "{note}");
    assert!(note.contains(") stop]\nsub done"), "{note}");
    // The model's third call had it right after the write's result.
    let bodies = bodies_for(&mock, "mock:script=parent-tooldrain");
    assert_eq!(bodies.len(), 3);
    let sent = bodies[2]["messages"].as_array().unwrap();
    let n = sent.len();
    assert_eq!(sent[n - 2]["role"], "tool", "{sent:?}");
    assert!(
        sent[n - 1]
            .to_string()
            .contains("[Background agent \\\"a1\\\""),
        "{sent:?}"
    );
}

#[tokio::test]
async fn a_plain_answer_waits_for_background_agents_only_as_long_as_configured() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: "[engines.tinyelf]\nbackground_wait_secs = 0.5\n".into(),
            ..Opts::default()
        },
    );
    // The agent waits for a permission nobody gives; the parent answers plainly.
    let (sid, run1, mut sse, mut seen, rids) = fan_out(
        &d,
        &mock,
        "bounded",
        1,
        vec![json!({"text": "Answer without it."})],
        json!({}),
    )
    .await;
    seen.extend(sse.until_complete(&run1).await);
    // The answer stands, the agent still running is named, and it stopped with the run.
    assert_eq!(finish_of(&seen), "stop", "{:?}", types(&seen));
    let said: Vec<&str> = of(&seen, "processing")
        .iter()
        .filter_map(|e| e.data["message"].as_str())
        .filter(|m| m.starts_with("background agents still running after"))
        .collect();
    assert_eq!(said.len(), 1, "{:?}", types(&seen));
    assert!(
        said[0].contains("the answer stands: \"a1\" ("),
        "{}",
        said[0]
    );
    let resolved = seen
        .iter()
        .find(|e| e.event == "permissionResolved" && e.data["requestId"] == rids[0].as_str())
        .unwrap();
    assert_eq!(resolved.data["decision"], "deny");
    let msgs = stored(&d, &sid).await;
    assert_eq!(roles(&msgs), ["user", "assistant", "tool", "assistant"]);
    assert_eq!(msgs[3]["blocks"][0]["text"], "Answer without it.");
}

/// The dynamic tail's pending confirmations: while a background agent's permission request
/// waits for the client, the parent's model calls are told so (tool and arguments); once it is
/// answered the note is gone.
#[tokio::test]
async fn the_dynamic_tail_lists_pending_confirmations() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let (sid, run1, mut sse, mut seen, _) = fan_out(
        &d,
        &mock,
        "pendingtail",
        1,
        vec![
            json!({"toolCalls": [call("w1", "write_file", json!({"path": "x.txt", "content": "1"}))]}),
            json!({"text": "waiting"}),
            json!({"text": "done"}),
        ],
        json!({}),
    )
    .await;
    until_requests(&mut sse, 1, &mut seen).await;
    // The agent's shell request stays pending while the parent's write is allowed.
    allow(&d, &sid, &request_for(&seen, "write_file")).await;
    while !seen.iter().any(|e| {
        e.event == "assistantMessage" && e.data["message"]["blocks"][0]["text"] == "waiting"
    }) {
        seen.push(sse.next().await.expect("stream ended"));
    }
    allow(&d, &sid, &request_for(&seen, "shell")).await;
    seen.extend(sse.until_complete(&run1).await);
    assert_eq!(finish_of(&seen), "stop", "{:?}", types(&seen));

    let bodies = bodies_for(&mock, "mock:script=parent-pendingtail");
    assert_eq!(bodies.len(), 4);
    let system = |i: usize| {
        bodies[i]["messages"][0]["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let third = system(2);
    let note = third
        .find("Pending confirmations:")
        .unwrap_or_else(|| panic!("{third}"));
    assert!(third[note..].contains("\n- shell {"), "{third}");
    // After the answer: no note.
    assert!(
        !system(3).contains("Pending confirmations"),
        "{}",
        system(3)
    );
}
