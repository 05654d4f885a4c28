//! tinyelf's permission prompts end to end: requests and answers over the API, confirm_once,
//! denials and timeouts, plan mode, manual_only tools and channel permissions.

use crate::common;
use crate::scripted;

use common::{Daemon, Ev, Opts, allow};
use elfgate_mockllm::MockServer;
use scripted::events::next_of;
use scripted::{
    bodies_for, call, daemon_with, ends, ends_by_id, finish_of, of, project, run, script, session,
};
use serde_json::json;

#[tokio::test]
async fn permission_round_trips() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();

    // Allowed (and confirm_once asks only once: two write_file iterations, one request).
    script(
        &mock,
        "perm-allow",
        json!([
            {"toolCalls": [call("p1", "write_file", json!({"path": "one.txt", "content": "1"}))]},
            {"toolCalls": [call("p2", "write_file", json!({"path": "two.txt", "content": "2"}))]},
            {"text": "written"}
        ]),
    );
    let (sid, run1) = d
        .create(session("write", "mock:script=perm-allow", &dir, json!({})))
        .await;
    let mut sse = d.events(&sid, None).await;
    let req = next_of(&mut sse, "permissionRequest").await;
    assert_eq!(req.data["toolName"], "write_file");
    assert_eq!(req.data["tier"], "confirm_once");
    assert_eq!(
        req.data["input"],
        json!({"path": "one.txt", "content": "1"})
    );
    assert!(req.data["expiresAt"].is_string());
    let rid = req.data["requestId"].as_str().unwrap().to_string();
    assert!(!dir.join("one.txt").exists());
    // A client that reconnects past the request gets it again.
    let mut again = d.events(&sid, Some(req.seq())).await;
    let re = again.next().await.unwrap();
    assert_eq!(re.event, "permissionRequest");
    assert_eq!(re.data["requestId"], rid.as_str());
    assert_eq!(re.id, None);
    drop(again);
    // Bad bodies and unknown ids.
    let path = format!("/v1/sessions/{sid}/permissions/{rid}");
    let (s, _) = d.post(&path, json!({"decision": "maybe"})).await;
    assert_eq!(s, 400);
    let (s, _) = d
        .post(
            &format!("/v1/sessions/{sid}/permissions/nope"),
            json!({"decision": "allow"}),
        )
        .await;
    assert_eq!(s, 404);
    let (s, v) = d.post(&path, json!({"decision": "allow"})).await;
    assert_eq!(s, 200, "{v}");
    let (s, _) = d.post(&path, json!({"decision": "deny"})).await;
    assert_eq!(s, 409);
    let evs = sse.until_complete(&run1).await;
    assert_eq!(finish_of(&evs), "stop");
    let resolved = of(&evs, "permissionResolved");
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0].data["decision"], "allow");
    // confirm_once: the second write_file ran without a second request.
    assert!(of(&evs, "permissionRequest").is_empty());
    let e = ends(&evs);
    assert_eq!(e.len(), 2);
    assert_eq!(e[0].0, "success");
    assert_eq!(e[1].0, "success");
    assert_eq!(std::fs::read_to_string(dir.join("one.txt")).unwrap(), "1");
    assert_eq!(std::fs::read_to_string(dir.join("two.txt")).unwrap(), "2");

    // Two concurrent calls of one confirm_once tool: the client is asked once.
    script(
        &mock,
        "perm-pair",
        json!([{"toolCalls": [
            call("x1", "write_file", json!({"path": "x1.txt", "content": "1"})),
            call("x2", "write_file", json!({"path": "x2.txt", "content": "2"}))
        ]}, {"text": "ok"}]),
    );
    let (sid, run_pair) = d
        .create(session("pair", "mock:script=perm-pair", &dir, json!({})))
        .await;
    let mut sse = d.events(&sid, None).await;
    let req = next_of(&mut sse, "permissionRequest").await;
    let rid = req.data["requestId"].as_str().unwrap();
    allow(&d, &sid, rid).await;
    let evs = sse.until_complete(&run_pair).await;
    assert!(of(&evs, "permissionRequest").is_empty());
    let e = ends_by_id(&evs);
    assert_eq!(e["x1"].0, "success");
    assert_eq!(e["x2"].0, "success");

    // Denied, with a message the model sees.
    script(
        &mock,
        "perm-deny",
        json!([{"toolCalls": [call("d1", "shell", json!({"command": "touch denied.txt"}))]}, {"text": "ok"}]),
    );
    let (sid, run2) = d
        .create(session("deny", "mock:script=perm-deny", &dir, json!({})))
        .await;
    let mut sse = d.events(&sid, None).await;
    let req = next_of(&mut sse, "permissionRequest").await;
    assert_eq!(req.data["tier"], "always_confirm");
    let rid = req.data["requestId"].as_str().unwrap();
    let (s, _) = d
        .post(
            &format!("/v1/sessions/{sid}/permissions/{rid}"),
            json!({"decision": "deny", "message": "not on the main branch"}),
        )
        .await;
    assert_eq!(s, 200);
    let evs = sse.until_complete(&run2).await;
    let e = ends(&evs);
    assert_eq!(e[0].0, "denied");
    assert!(e[0].1.contains("not on the main branch"));
    assert!(!dir.join("denied.txt").exists());
    assert_eq!(of(&evs, "permissionResolved")[0].data["decision"], "deny");
    let bodies = bodies_for(&mock, "mock:script=perm-deny");
    assert!(bodies[1].to_string().contains("not on the main branch"));

    // Timed out with a short configured timeout: denied.
    script(
        &mock,
        "perm-timeout",
        json!([{"toolCalls": [call("t1", "shell", json!({"command": "touch late.txt"}))]}, {"text": "ok"}]),
    );
    let (sid, _, evs) = run(
        &d,
        session(
            "late",
            "mock:script=perm-timeout",
            &dir,
            json!({"engineConfig": {"permissionTimeout": 300}}),
        ),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop");
    let e = ends(&evs);
    assert_eq!(e[0].0, "denied");
    assert!(e[0].1.contains("nobody answered"), "{}", e[0].1);
    assert!(!dir.join("late.txt").exists());
    let req = of(&evs, "permissionRequest")[0];
    assert_eq!(of(&evs, "permissionResolved")[0].data["decision"], "deny");
    let rid = req.data["requestId"].as_str().unwrap();
    let (s, _) = d
        .post(
            &format!("/v1/sessions/{sid}/permissions/{rid}"),
            json!({"decision": "allow"}),
        )
        .await;
    assert_eq!(s, 409);
}

#[tokio::test]
async fn plan_mode_manual_only_and_channel_permissions() {
    let mock = MockServer::start().await.unwrap();
    let d = daemon_with(
        &mock,
        "[engines.tinyelf.tool_tiers]\nlist_dir = \"manual_only\"\n",
    );
    let dir = project();
    script(
        &mock,
        "plan",
        json!([{"toolCalls": [
            call("w", "write_file", json!({"path": "p.txt", "content": "x"})),
            call("r", "read_file", json!({"path": "a.txt"})),
            call("l", "list_dir", json!({}))
        ]}, {"text": "ok"}]),
    );
    let (_, _, evs) = run(
        &d,
        session(
            "plan",
            "mock:script=plan",
            &dir,
            json!({"permissionMode": "plan"}),
        ),
    )
    .await;
    let e = ends_by_id(&evs);
    assert_eq!(e["w"].0, "denied");
    assert!(e["w"].1.contains("plan"));
    assert_eq!(e["r"].0, "success");
    assert_eq!(e["l"].0, "denied");
    assert!(e["l"].1.contains("manual_only"));
    assert!(!dir.join("p.txt").exists());

    script(
        &mock,
        "chan",
        json!([{"toolCalls": [call("r", "read_file", json!({"path": "a.txt"}))]}, {"text": "ok"}]),
    );
    let (_, _, evs) = run(
        &d,
        session(
            "chan",
            "mock:script=chan",
            &dir,
            json!({"permissionMode": "bypassPermissions", "channelPermissions": {"canUseTool": false}}),
        ),
    )
    .await;
    let e = ends_by_id(&evs);
    assert_eq!(e["r"].0, "denied");
    assert!(e["r"].1.contains("canUseTool"));

    // requireConfirmation asks even for a read-only tool; acceptEdits lets edits through.
    script(
        &mock,
        "confirm",
        json!([{"toolCalls": [call("r", "read_file", json!({"path": "a.txt"}))]},
               {"toolCalls": [call("w", "write_file", json!({"path": "q.txt", "content": "q"}))]},
               {"text": "ok"}]),
    );
    let (sid, run1) = d
        .create(session(
            "confirm",
            "mock:script=confirm",
            &dir,
            json!({"permissionMode": "acceptEdits",
                   "channelPermissions": {"canUseTool": true, "requireConfirmation": true}}),
        ))
        .await;
    let mut sse = d.events(&sid, None).await;
    for _ in 0..2 {
        let req = next_of(&mut sse, "permissionRequest").await;
        let rid = req.data["requestId"].as_str().unwrap();
        allow(&d, &sid, rid).await;
    }
    let evs = sse.until_complete(&run1).await;
    assert_eq!(finish_of(&evs), "stop");
    assert!(dir.join("q.txt").exists());
}

/// Answers every permissionRequest of `run` with `decision` (scope `scope`) and returns the tools
/// asked about, with the run's events.
async fn answer_all(
    d: &Daemon,
    sid: &str,
    run: &str,
    decision: &str,
    scope: &str,
) -> (Vec<String>, Vec<Ev>) {
    let mut sse = d.events(sid, None).await;
    let mut asked = Vec::new();
    let mut evs = Vec::new();
    loop {
        let ev = sse.next().await.expect("stream ended");
        if ev.event == "permissionRequest" {
            asked.push(ev.data["toolName"].as_str().unwrap().to_string());
            let rid = ev.data["requestId"].as_str().unwrap();
            let (s, v) = d
                .post(
                    &format!("/v1/sessions/{sid}/permissions/{rid}"),
                    json!({"decision": decision, "scope": scope}),
                )
                .await;
            assert_eq!(s, 200, "{v}");
        }
        let done = ev.event == "complete" && ev.run() == run;
        evs.push(ev);
        if done {
            return (asked, evs);
        }
    }
}

/// The tier table's cells that a run shows: always_confirm asks every time, even after an
/// "allow for the session"; the configured skip modes decide where it runs unasked; a manual_only
/// tool runs when the client runs it itself and never when the model asks.
#[tokio::test]
async fn always_confirm_asks_every_time_and_manual_only_is_the_clients() {
    let mock = MockServer::start().await.unwrap();
    let d = daemon_with(
        &mock,
        "[engines.tinyelf]\nalways_confirm_skip_modes = [\"acceptEdits\"]\n\
         [engines.tinyelf.tool_tiers]\nlist_dir = \"manual_only\"\n",
    );
    let dir = project();
    let two_shells = json!([
        {"toolCalls": [call("s1", "shell", json!({"command": "echo one"}))]},
        {"toolCalls": [call("s2", "shell", json!({"command": "echo two"}))]},
        {"toolCalls": [call("l", "list_dir", json!({}))]},
        {"text": "ok"}
    ]);
    script(&mock, "twice", two_shells.clone());
    let (sid, run1) = d
        .create(session("go", "mock:script=twice", &dir, json!({})))
        .await;
    let (asked, evs) = answer_all(&d, &sid, &run1, "allow", "session").await;
    assert_eq!(
        asked,
        ["shell", "shell"],
        "asked again after a session allow"
    );
    let e = ends_by_id(&evs);
    assert_eq!(e["s1"].0, "success");
    assert_eq!(e["s2"].0, "success");
    assert_eq!(e["l"].0, "denied");
    assert!(e["l"].1.contains("manual_only"), "{}", e["l"].1);

    // The client runs the manual_only tool itself: it runs, nobody is asked.
    std::fs::write(dir.join("seen.txt"), "x").unwrap();
    let (s, r) = d
        .post(
            &format!("/v1/sessions/{sid}/tools/list_dir"),
            json!({"arguments": {}}),
        )
        .await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["status"], "success", "{r}");
    assert!(r["content"].as_str().unwrap().contains("seen.txt"), "{r}");
    let tool_run = r["runId"].as_str().unwrap();
    let evs = d.events(&sid, None).await.until_complete(tool_run).await;
    assert!(
        !evs.iter()
            .any(|e| e.event == "permissionRequest" && e.run() == tool_run),
        "the client's own run asked"
    );

    // acceptEdits is a skip mode here: shell runs unasked. bypassPermissions is not: it asks.
    script(&mock, "accept", two_shells.clone());
    let (sid, run2) = d
        .create(session(
            "go",
            "mock:script=accept",
            &dir,
            json!({"permissionMode": "acceptEdits"}),
        ))
        .await;
    let (asked, evs) = answer_all(&d, &sid, &run2, "deny", "once").await;
    assert!(asked.is_empty(), "{asked:?}");
    assert_eq!(ends_by_id(&evs)["s2"].0, "success");
    script(&mock, "bypass", two_shells);
    let (sid, run3) = d
        .create(session(
            "go",
            "mock:script=bypass",
            &dir,
            json!({"permissionMode": "bypassPermissions"}),
        ))
        .await;
    let (asked, evs) = answer_all(&d, &sid, &run3, "deny", "once").await;
    assert_eq!(asked, ["shell", "shell"]);
    let e = ends_by_id(&evs);
    assert_eq!(e["s1"].0, "denied");
    assert_eq!(e["l"].0, "denied", "manual_only even in bypassPermissions");
}

/// plan cannot let always_confirm tools run: `config check` (and so `serve`) refuses it, naming
/// the key.
#[test]
fn plan_as_a_skip_mode_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plan.toml");
    std::fs::write(
        &file,
        "[engines.tinyelf]\nalways_confirm_skip_modes = [\"plan\"]\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_elfgate"))
        .args(["config", "check", "--config", file.to_str().unwrap()])
        .env_remove("ELFGATE_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("engines.tinyelf.always_confirm_skip_modes cannot hold plan"),
        "{err}"
    );
}
