//! Several daemons as one fleet on one PostgreSQL database and one NATS server (`[cluster]`): a
//! session is run by one node, followed and controlled through the others, and when its node dies
//! another node ends the run as `node_lost`; the session then goes on from any node.

use crate::common;

use crate::scripted;
use common::{Daemon, Opts, allow, assert_contiguous, chat, text_of, types};
use elfgate_mockllm::MockServer;
use elfgate_test_support::services::{
    PrivateNats, PrivatePostgres, fleet_secret_key, fleet_secret_var, fleet_services, nats_url,
    postgres_database,
};
use serde_json::json;

const TOKEN: &str = "fleet-token";

/// A node `id` of the fleet on `database` and the NATS server at `nats`, its files in a directory
/// of its own.
pub(crate) fn node_on(mock: &MockServer, database: &str, nats: &str, id: &str) -> Daemon {
    node_with(mock, database, nats, id, "")
}

/// A node with more `[cluster]` keys.
pub(crate) fn node_with(
    mock: &MockServer,
    database: &str,
    nats: &str,
    id: &str,
    keys: &str,
) -> Daemon {
    let dir = tempfile::tempdir().unwrap().keep();
    Daemon::start_in(dir.clone(), mock, node_opts(&dir, database, nats, id, keys))
}

/// The options of a node `id` whose files are in `dir`.
pub(crate) fn node_opts(
    dir: &std::path::Path,
    database: &str,
    nats: &str,
    id: &str,
    keys: &str,
) -> Opts {
    Opts {
        token: Some(TOKEN.into()),
        extra_toml: format!(
            "\n[cluster]\nnats_url = \"{nats}\"\nnode_id = \"{id}\"\nlease_secs = 4\n\
             heartbeat_secs = 1\n{}{keys}\n",
            fleet_secret_key()
        ),
        env: vec![
            fleet_secret_var(),
            ("ELFGATE_DATABASE_URL".into(), database.into()),
            (
                "ELFGATE_STORAGE__DATA_DIR".into(),
                dir.display().to_string(),
            ),
        ],
        ..Opts::default()
    }
}

#[tokio::test]
async fn a_node_killed_mid_run_is_adopted_as_node_lost_and_the_session_goes_on_elsewhere() {
    let Some((database, nats)) = fleet_services().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let mut a = node_on(&mock, &database, &nats, "a");
    let b = node_on(&mock, &database, &nats, "b");
    let c = node_on(&mock, &database, &nats, "c");

    // Started on A, followed through B (which reads it from the log).
    let (sid, run1) = a.create(chat("first", "mock:tokens=400,delay_ms=25")).await;
    let mut through_b = b.events(&sid, None).await;
    let mut seen = through_b.until_text("tok0 tok1 tok2 ").await;

    // A dies mid-run: B or C adopts the session and ends the run; B's follower sees the end.
    a.kill();
    // An interrupt sent meanwhile is not lost silently: right after the kill (A's heartbeat
    // still fresh) it is refused with a 503 to try again; then with a 409 that says the session
    // is being adopted; after it, the adopter answers (the run is over, so there is nothing
    // left to interrupt).
    let (status, body) = c
        .post(&format!("/v1/sessions/{sid}/interrupt"), json!({}))
        .await;
    match status {
        409 if body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("node a") && m.contains("adopting")) => {}
        503 if body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("node a") && m.contains("try again")) => {}
        200 => {}
        _ => panic!("an interrupt for a dead owner's run got {status}: {body}"),
    }
    seen.extend(through_b.until_complete(&run1).await);
    let complete = seen.last().unwrap();
    assert_eq!(complete.event, "complete");
    assert_eq!(
        complete.data["finishReason"],
        "node_lost",
        "{:?}",
        types(&seen)
    );
    assert_eq!(seen.iter().filter(|e| e.event == "complete").count(), 1);
    for w in seen.windows(2) {
        assert!(
            w[1].seq() > w[0].seq(),
            "out of order or duplicated: {:?}",
            seen.iter()
                .map(|e| (e.seq(), e.event.as_str()))
                .collect::<Vec<_>>()
        );
    }
    let (status, r) = c.get(&format!("/v1/sessions/{sid}/runs/{run1}")).await;
    assert_eq!(status, 200);
    assert_eq!(r["status"], "interrupted");
    assert_eq!(r["finishReason"], "node_lost");
    // The fleet as B sees it: three nodes, A's heartbeat older than its lease, B on the bus.
    let (status, cluster) = b.get("/v1/cluster").await;
    assert_eq!(status, 200);
    assert_eq!(cluster["nodeId"], "b");
    assert_eq!(cluster["busConnected"], true);
    let nodes = cluster["nodes"].as_array().unwrap();
    let ids: Vec<&str> = nodes.iter().map(|n| n["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["a", "b", "c"]);
    assert!(
        nodes[0]["heartbeatAgeMs"].as_u64().unwrap() >= 2000,
        "{cluster}"
    );
    assert_eq!(nodes[0]["activeSessions"], 0);
    // One of B and C adopted it, and says so in its metrics.
    let adopted = metric(&b, "elfgate_fleet_runs_adopted_total").await
        + metric(&c, "elfgate_fleet_runs_adopted_total").await;
    assert_eq!(adopted, 1.0);
    assert!(
        nodes[1]["heartbeatAgeMs"].as_u64().unwrap() < 2000,
        "{cluster}"
    );

    // The session goes on from C, its history intact (the partial answer kept), and B's
    // follower sees that run too.
    let run2 = c
        .send(&sid, json!({"prompt": "second", "model": "mock:tokens=3"}))
        .await;
    let second = through_b.until_complete(&run2).await;
    assert_eq!(text_of(&second), "tok0 tok1 tok2 ");
    assert!(second[0].seq() > complete.seq());
    let (_, m) = b.get(&format!("/v1/sessions/{sid}/messages")).await;
    let msgs = m["messages"].as_array().unwrap();
    let texts: Vec<&str> = msgs
        .iter()
        .map(|m| m["blocks"][0]["text"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(texts[0], "first");
    // The partial answer is what reached the log before the kill: what the follower saw, or a
    // part of it (the last events may have lingered unwritten, as on a single node; the follower
    // may have had them from A's memory). With nothing of the answer written, there is none.
    let rest = match texts.len() {
        4 => {
            assert!(text_of(&seen).starts_with(texts[1]), "{texts:?}");
            &texts[2..]
        }
        _ => &texts[1..],
    };
    assert_eq!(rest, ["second", "tok0 tok1 tok2 "], "{texts:?}");
}

#[tokio::test]
async fn a_node_killed_while_a_tool_call_waits_leaves_a_valid_transcript_and_a_resumable_session() {
    let Some((database, nats)) = fleet_services().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let mut a = node_on(&mock, &database, &nats, "a");
    let b = node_on(&mock, &database, &nats, "b");
    let dir = scripted::project();
    let (sid, run1, mut through_b, _) =
        write_waiting_for_permission(&mock, [&a, &b], "fleet-dangling", &dir).await;

    // A dies while its tool call waits for an answer: the adopter ends the run as node_lost, and
    // the stored transcript stays one a provider accepts: no tool call without its result (tinyelf
    // stores a turn's calls with their results; a dangling one would get a synthetic result).
    a.kill();
    let end = through_b.until_complete(&run1).await;
    assert_eq!(
        end.last().unwrap().data["finishReason"],
        "node_lost",
        "{:?}",
        types(&end)
    );
    assert_eq!(end.iter().filter(|e| e.event == "complete").count(), 1);
    let (_, m) = b.get(&format!("/v1/sessions/{sid}/messages")).await;
    let blocks: Vec<&serde_json::Value> = m["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["blocks"].as_array().unwrap())
        .collect();
    for call in blocks.iter().filter(|b| b["type"] == "tool_use") {
        assert!(
            blocks
                .iter()
                .any(|b| b["type"] == "tool_result" && b["tool_use_id"] == call["id"]),
            "a tool call without its result: {m}"
        );
    }
    assert!(!dir.join("x.txt").exists(), "the unanswered write ran");

    // The session resumes on B.
    let run2 = b
        .send(
            &sid,
            json!({"prompt": "go on", "model": "mock:script=fleet-dangling"}),
        )
        .await;
    let evs = through_b.until_complete(&run2).await;
    assert_eq!(text_of(&evs), "Resumed.", "{:?}", types(&evs));
    assert_eq!(evs.last().unwrap().data["finishReason"], "stop");
}

/// A tinyelf session in `dir` started on `start` with the scripted `responses` (named `script`),
/// followed on `follow` until its first permission request: the session, the run, the follower's
/// stream and the request.
async fn waiting_for_permission(
    mock: &MockServer,
    [start, follow]: [&Daemon; 2],
    script: &str,
    dir: &std::path::Path,
    responses: serde_json::Value,
) -> (String, String, common::Sse, common::Ev) {
    scripted::script(mock, script, responses);
    let (sid, run) = start
        .create(scripted::session(
            "write",
            &format!("mock:script={script}"),
            dir,
            json!({}),
        ))
        .await;
    let mut stream = follow.events(&sid, None).await;
    let request = scripted::events::next_of(&mut stream, "permissionRequest").await;
    (sid, run, stream, request)
}

/// [`waiting_for_permission`] with a script whose first turn asks to write `x.txt` and whose
/// second answers "Resumed.".
async fn write_waiting_for_permission(
    mock: &MockServer,
    nodes: [&Daemon; 2],
    script: &str,
    dir: &std::path::Path,
) -> (String, String, common::Sse, common::Ev) {
    waiting_for_permission(
        mock,
        nodes,
        script,
        dir,
        json!([
            {"text": "Writing.", "toolCalls": [scripted::call("w1", "write_file", json!({"path": "x.txt", "content": "1"}))]},
            {"text": "Resumed."}
        ]),
    )
    .await
}

/// The value of the metric `name` (a whole series name, labels included) on `d`'s /metrics.
pub(crate) async fn metric(d: &Daemon, name: &str) -> f64 {
    let (status, text) = d.get_text("/metrics").await;
    assert_eq!(status, 200, "{text}");
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

/// Sends `signal` (STOP, CONT) to a daemon.
pub(crate) fn signal(d: &Daemon, signal: &str) {
    let ok = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(d.child.id().to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{signal} failed");
}

#[tokio::test]
async fn a_node_paused_past_its_lease_is_fenced_when_it_comes_back() {
    let Some((database, nats)) = fleet_services().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap().keep();
    let log = dir.join("a.log");
    let mut opts = node_opts(&dir, &database, &nats, "a", "");
    opts.env.push(("ELFGATE_LOG".into(), "info".into()));
    opts.log_file = Some(log.clone());
    let a = Daemon::start_in(dir.clone(), &mock, opts);
    let b = node_on(&mock, &database, &nats, "b");
    let (sid, run1) = a.create(chat("long", "mock:tokens=2000,delay_ms=10")).await;
    let mut through_b = b.events(&sid, None).await;
    let mut seen = through_b.until_text("tok0 tok1 tok2 ").await;

    // A stalls past its lease: B adopts the session and ends the run.
    signal(&a, "STOP");
    seen.extend(through_b.until_complete(&run1).await);
    let complete = seen.last().unwrap().clone();
    assert_eq!(complete.data["finishReason"], "node_lost");

    // A comes back, still streaming: it finds itself fenced and stops the run.
    signal(&a, "CONT");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (status, s) = a.get(&format!("/v1/sessions/{sid}")).await;
        assert_eq!(status, 200);
        if s["status"] != "running" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the fenced node keeps running the session"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // And it says so in its log.
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged
            .lines()
            .any(|l| l.contains("taken over") && l.contains(&sid)),
        "{logged}"
    );
    // Nothing of A's landed after the adopter's complete, and the run stays node_lost.
    let mut replay = b.events(&sid, None).await;
    let logged = replay.until_complete(&run1).await;
    assert_eq!(logged.last().unwrap().seq(), complete.seq());
    let (_, events) = {
        let resp = b
            .http
            .get(b.url(&format!("/v1/sessions/{sid}")))
            .send()
            .await
            .unwrap();
        (
            resp.status(),
            resp.json::<serde_json::Value>().await.unwrap(),
        )
    };
    assert_eq!(events["status"], "idle");
    let (_, r) = b.get(&format!("/v1/sessions/{sid}/runs/{run1}")).await;
    assert_eq!(r["finishReason"], "node_lost", "{r}");
    // The session goes on from B.
    let run2 = b
        .send(&sid, json!({"prompt": "again", "model": "mock:tokens=2"}))
        .await;
    let after = replay.until_complete(&run2).await;
    assert_eq!(
        after[0].seq(),
        complete.seq() + 1,
        "an event landed between the runs"
    );
    assert_eq!(text_of(&after), "tok0 tok1 ");
}

#[tokio::test]
async fn a_node_paused_past_its_lease_takes_no_permission_answer_runs_no_tool_and_stays_silent() {
    let Some((database, nats)) = fleet_services().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let a = node_on(&mock, &database, &nats, "a");
    let b = node_on(&mock, &database, &nats, "b");
    let _c = node_on(&mock, &database, &nats, "c");
    let dir = scripted::project();
    let (sid, run1, mut through_b, request) =
        write_waiting_for_permission(&mock, [&a, &b], "fleet-paused-permission", &dir).await;
    let rid = request.data["requestId"].as_str().unwrap().to_string();
    // A client of A follows the run too.
    let mut through_a = a.events(&sid, None).await;
    let before = scripted::events::next_of(&mut through_a, "permissionRequest").await;

    // A stalls past its lease with the answer on its way to it: another node ends the run.
    signal(&a, "STOP");
    let answer = tokio::spawn({
        let (http, url) = (
            a.http.clone(),
            a.url(&format!("/v1/sessions/{sid}/permissions/{rid}")),
        );
        async move {
            let r = http
                .post(url)
                .json(&json!({"decision": "allow"}))
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            (
                status,
                r.json::<serde_json::Value>().await.unwrap_or_default(),
            )
        }
    });
    let end = through_b.until_complete(&run1).await;
    assert_eq!(
        end.last().unwrap().data["finishReason"],
        "node_lost",
        "{:?}",
        types(&end)
    );

    // A comes back and finds the answer waiting: it is not taken, the tool does not run.
    signal(&a, "CONT");
    let (status, body) = answer.await.unwrap();
    assert!(
        status == 409 || status == 404,
        "a node that lost the session took a permission answer: {status} {body}"
    );
    // A's client sees the run end once, as the fleet ended it, and nothing A did after its lease.
    let seen = through_a.until_complete(&run1).await;
    assert_eq!(
        seen.iter().filter(|e| e.event == "complete").count(),
        1,
        "{:?}",
        types(&seen)
    );
    assert_eq!(
        seen.last().unwrap().data["finishReason"],
        "node_lost",
        "{:?}",
        types(&seen)
    );
    assert_eq!(seen.last().unwrap().seq(), end.last().unwrap().seq());
    assert!(seen.iter().all(|e| e.seq() > before.seq()));
    assert!(!dir.join("x.txt").exists(), "the answered write ran");

    // The session is not busy on A: a prompt sent there runs, once, and A's client sees it too.
    let (status, body) = a
        .post(
            &format!("/v1/sessions/{sid}/messages"),
            json!({"prompt": "go on", "model": "mock:script=fleet-paused-permission"}),
        )
        .await;
    assert!(status == 200 || status == 202, "{status} {body}");
    let run2 = body["runId"].as_str().unwrap().to_string();
    let evs = through_b.until_complete(&run2).await;
    assert_eq!(text_of(&evs), "Resumed.", "{:?}", types(&evs));
    let on_a = through_a.until_complete(&run2).await;
    assert_eq!(text_of(&on_a), "Resumed.", "{:?}", types(&on_a));
    assert!(
        !on_a
            .iter()
            .any(|e| e.event == "complete" && e.run() == run1),
        "{:?}",
        types(&on_a)
    );
    assert!(!dir.join("x.txt").exists(), "the answered write ran");
}

#[tokio::test]
async fn a_session_run_on_one_node_is_followed_prompted_interrupted_and_answered_through_others() {
    let Some((database, nats)) = fleet_services().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let a = node_on(&mock, &database, &nats, "a");
    let b = node_on(&mock, &database, &nats, "b");
    let c = node_on(&mock, &database, &nats, "c");

    // Started on A, followed through B.
    let (sid, run1) = a.create(chat("long", "mock:tokens=2000,delay_ms=10")).await;
    let mut through_b = b.events(&sid, None).await;
    let mut seen = through_b.until_text("tok0 tok1 tok2 ").await;
    let init = seen.iter().find(|e| e.event == "init").unwrap();
    assert_eq!(init.data["systemInfo"]["node"], "a", "{:?}", init.data);
    // A prompt sent to C is queued on A, the owner, and B reports the session as A sees it.
    let run2 = c
        .send(
            &sid,
            json!({"prompt": "next", "model": "mock:tokens=3", "onBusy": "enqueue"}),
        )
        .await;
    let (status, state) = b.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(status, 200);
    assert_eq!(state["status"], "running", "{state}");
    assert_eq!(state["queuedRuns"], 1, "{state}");
    // An interrupt sent to C ends A's run and the queued one.
    let (status, body) = c
        .post(&format!("/v1/sessions/{sid}/interrupt"), json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    seen.extend(through_b.until_complete(&run1).await);
    assert_eq!(seen.last().unwrap().data["finishReason"], "interrupted");
    seen.extend(through_b.until_complete(&run2).await);
    assert_eq!(seen.last().unwrap().data["finishReason"], "interrupted");
    // Each node's metrics say what went over the bus: C forwarded, A answered and relayed.
    assert_eq!(
        metric(&c, "elfgate_fleet_requests_forwarded_total").await,
        2.0
    );
    assert!(metric(&a, "elfgate_fleet_requests_served_total").await >= 2.0);
    assert!(metric(&a, "elfgate_fleet_events_relayed_total").await >= seen.len() as f64);
    let info = format!(
        "elfgate_node_info{{node=\"a\",version=\"{}\"}}",
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(metric(&a, &info).await, 1.0);
    assert_eq!(metric(&b, "elfgate_fleet_bus_connected").await, 1.0);
    // The idle session takes a prompt on any node; B's follower sees that run too.
    let run3 = c
        .send(&sid, json!({"prompt": "again", "model": "mock:tokens=3"}))
        .await;
    let next = through_b.until_complete(&run3).await;
    assert_eq!(text_of(&next), "tok0 tok1 tok2 ");
    seen.extend(next);
    assert_eq!(seen[0].seq(), 1);
    assert_contiguous(&seen);

    // A permission request raised by a run on A is answered through B.
    let dir = scripted::project();
    let (sid, run, mut through_b, req) = waiting_for_permission(
        &mock,
        [&a, &b],
        "fleet-perm",
        &dir,
        json!([
            {"toolCalls": [scripted::call("w1", "write_file", json!({"path": "one.txt", "content": "1"}))]},
            {"text": "written"}
        ]),
    )
    .await;
    let rid = req.data["requestId"].as_str().unwrap().to_string();
    allow(&b, &sid, &rid).await;
    let evs = through_b.until_complete(&run).await;
    assert_eq!(
        evs.last().unwrap().data["finishReason"],
        "stop",
        "{:?}",
        types(&evs)
    );
    assert_eq!(std::fs::read_to_string(dir.join("one.txt")).unwrap(), "1");

    // A tool run sent to B, once A's lease has ended (the complete may reach a follower before
    // A's log commits it, and the lease ends with that commit): B runs it; seen through A.
    b.until_no_session_is_run().await;
    let mut through_a = a.events(&sid, Some(evs.last().unwrap().seq())).await;
    let (status, r) = b
        .post(
            &format!("/v1/sessions/{sid}/tools/read_file"),
            json!({"arguments": {"path": "one.txt"}}),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["status"], "success", "{r}");
    let tool_run = r["runId"].as_str().unwrap();
    let evs = through_a.until_complete(tool_run).await;
    let init = evs.iter().find(|e| e.event == "init").unwrap();
    assert_eq!(init.data["systemInfo"]["node"], "b", "{:?}", init.data);
    assert!(
        evs.iter().any(|e| e.event == "toolCallEnd"),
        "{:?}",
        types(&evs)
    );

    // Its project gone from the nodes' storage, a later prompt is refused by name, naming the
    // node that was asked, before anything runs.
    b.until_no_session_is_run().await;
    let moved = dir.with_extension("moved");
    std::fs::rename(&dir, &moved).unwrap();
    let (status, body) = c
        .post(
            &format!("/v1/sessions/{sid}/messages"),
            json!({"prompt": "again", "model": "mock:script=fleet-perm"}),
        )
        .await;
    std::fs::rename(&moved, &dir).unwrap();
    assert_eq!(status, 422, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("projectPath") && message.contains("on node c"),
        "{message}"
    );

    // A project that is not on this node is refused by name, naming the node.
    let (status, body) = c
        .post(
            "/v1/sessions",
            scripted::session("x", "mock:tokens=1", &dir.join("only-elsewhere"), json!({})),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("projectPath") && message.contains("on node c"),
        "{message}"
    );

    // While A runs a session: a tool run sent to B is answered by A (the session is busy there,
    // so it is refused as on one node, not run beside A's run by B), and a delete sent to C
    // stops A's run and deletes the session everywhere.
    let forwarded = metric(&c, "elfgate_fleet_requests_forwarded_total").await
        + metric(&b, "elfgate_fleet_requests_forwarded_total").await;
    let (sid, run) = a
        .create(scripted::session(
            "long",
            "mock:tokens=2000,delay_ms=10",
            &dir,
            json!({}),
        ))
        .await;
    let mut through_b = b.events(&sid, None).await;
    through_b.until_text("tok0 tok1 tok2 ").await;
    let (status, body) = b
        .post(
            &format!("/v1/sessions/{sid}/tools/read_file"),
            json!({"arguments": {"path": "one.txt"}}),
        )
        .await;
    assert_eq!(status, 409, "{body}");
    assert!(body.to_string().contains(&run), "{body}");
    assert_eq!(c.delete(&format!("/v1/sessions/{sid}")).await, 204);
    let end = through_b.until_complete(&run).await;
    assert_eq!(end.last().unwrap().data["finishReason"], "interrupted");
    for via in [&a, &b, &c] {
        assert_eq!(via.get(&format!("/v1/sessions/{sid}")).await.0, 404);
    }
    assert_eq!(
        metric(&c, "elfgate_fleet_requests_forwarded_total").await
            + metric(&b, "elfgate_fleet_requests_forwarded_total").await,
        forwarded + 2.0
    );
}

/// Polls `via` until the session's state answers `want` (a NATS outage shows in its status).
async fn until_state_status(via: &Daemon, sid: &str, want: u16) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (status, body) = via.get(&format!("/v1/sessions/{sid}")).await;
        if status == want {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the session's state never answered {want}: {status} {body}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_nats_restart_mid_run_loses_nothing_and_control_answers_503_meanwhile() {
    let Some(database) = postgres_database().await else {
        return;
    };
    let Some(mut nats) = PrivateNats::start() else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let a = node_on(&mock, &database, &nats.url, "a");
    let b = node_on(&mock, &database, &nats.url, "b");
    let (sid, run1) = a.create(chat("long", "mock:tokens=5000,delay_ms=10")).await;
    let mut through_b = b.events(&sid, None).await;
    let mut seen = through_b.until_text("tok0 tok1 tok2 ").await;

    // NATS goes away: the run goes on on A, B's follower reads it from the log, and control for
    // it through B answers 503.
    nats.stop();
    let refused = until_state_status(&b, &sid, 503).await;
    assert_eq!(refused["error"]["code"], "unavailable", "{refused}");
    let upto = text_of(&seen).split_whitespace().count();
    let want: String = (upto..upto + 20).map(|i| format!("tok{i} ")).collect();
    seen.extend(through_b.until_text(&want).await);

    // NATS is back: control through B reaches A again, and the stream went on without a gap.
    nats.start_again();
    let state = until_state_status(&b, &sid, 200).await;
    assert_eq!(state["status"], "running", "{state}");
    let (status, body) = b
        .post(&format!("/v1/sessions/{sid}/interrupt"), json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    seen.extend(through_b.until_complete(&run1).await);
    assert_eq!(seen.last().unwrap().data["finishReason"], "interrupted");
    assert_eq!(seen[0].seq(), 1);
    assert_contiguous(&seen);
    let text = text_of(&seen);
    let n = text.split_whitespace().count();
    let expected: String = (0..n).map(|i| format!("tok{i} ")).collect();
    assert_eq!(text, expected, "tokens lost or repeated");
}

#[tokio::test]
async fn a_stopping_node_drains_then_ends_what_is_left_as_node_shutdown() {
    let Some((database, nats)) = fleet_services().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap().keep();
    let log = dir.join("a.log");
    let mut opts = node_opts(&dir, &database, &nats, "a", "drain_secs = 1");
    opts.env.push(("ELFGATE_LOG_FORMAT".into(), "json".into()));
    opts.env.push(("ELFGATE_LOG".into(), "info".into()));
    opts.log_file = Some(log.clone());
    let mut a = Daemon::start_in(dir.clone(), &mock, opts);
    let b = node_on(&mock, &database, &nats, "b");
    let (sid, run1) = a.create(chat("long", "mock:tokens=5000,delay_ms=10")).await;
    let mut through_b = b.events(&sid, None).await;
    let mut seen = through_b.until_text("tok0 tok1 tok2 ").await;

    // SIGTERM: the run outlives the drain and ends as node_shutdown; A exits cleanly.
    let status = a.terminate();
    assert!(status.success(), "{status:?}");
    seen.extend(through_b.until_complete(&run1).await);
    assert_eq!(seen.last().unwrap().data["finishReason"], "node_shutdown");
    assert_contiguous(&seen);
    let (_, r) = b.get(&format!("/v1/sessions/{sid}/runs/{run1}")).await;
    assert_eq!(r["status"], "interrupted");
    assert_eq!(r["finishReason"], "node_shutdown");
    let (_, cluster) = b.get("/v1/cluster").await;
    assert_eq!(cluster["nodes"][0]["id"], "a");
    assert_eq!(cluster["nodes"][0]["draining"], true, "{cluster}");
    // Every line A logged names it, the drain's among them.
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}")))
        .collect();
    assert!(lines.len() > 3, "{lines:?}");
    for line in &lines {
        assert_eq!(line["node"], "a", "{line}");
    }
    assert!(
        lines
            .iter()
            .any(|l| l["message"].as_str().is_some_and(|m| m.contains("drain"))),
        "{lines:?}"
    );

    // The session goes on from B, its seqs right after.
    let run2 = b
        .send(&sid, json!({"prompt": "again", "model": "mock:tokens=2"}))
        .await;
    let after = through_b.until_complete(&run2).await;
    assert_eq!(text_of(&after), "tok0 tok1 ");
    assert_eq!(after[0].seq(), seen.last().unwrap().seq() + 1);
}

#[tokio::test]
async fn a_draining_node_is_not_ready_refuses_new_work_and_lets_its_runs_finish() {
    let Some((database, nats)) = fleet_services().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap().keep();
    let opts = node_opts(&dir, &database, &nats, "a", "drain_secs = 120");
    let mut a = Daemon::start_in(dir.clone(), &mock, opts);
    let b = node_on(&mock, &database, &nats, "b");
    let (sid, run1) = a.create(chat("long", "mock:tokens=300,delay_ms=10")).await;
    let mut through_b = b.events(&sid, None).await;
    let mut seen = through_b.until_text("tok0 tok1 tok2 ").await;

    // SIGTERM: A says it is not ready and refuses new work at once, while its run goes on.
    signal(&a, "TERM");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    while a.get("/readyz").await.0 != 503 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "a draining node still says it is ready"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let (status, body) = a.post("/v1/sessions", chat("new", "mock:tokens=1")).await;
    assert_eq!(status, 503, "{body}");
    // The fleet goes on without it.
    let (other, run2) = b.create(chat("elsewhere", "mock:tokens=2")).await;
    assert_eq!(
        text_of(&b.all_events_until_complete_of(&other, &run2).await),
        "tok0 tok1 "
    );

    // The run finishes within the drain, whole, and A then exits cleanly on its own.
    seen.extend(through_b.until_complete(&run1).await);
    assert_eq!(seen.last().unwrap().data["finishReason"], "stop");
    assert_contiguous(&seen);
    assert!(text_of(&seen).ends_with("tok299 "), "{}", text_of(&seen));
    let status = a.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let (_, r) = b.get(&format!("/v1/sessions/{sid}/runs/{run1}")).await;
    assert_eq!(r["status"], "completed", "{r}");
}

#[tokio::test]
async fn a_client_reconnecting_to_another_node_with_its_cursor_misses_nothing() {
    let Some((database, nats)) = fleet_services().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let a = node_on(&mock, &database, &nats, "a");
    let b = node_on(&mock, &database, &nats, "b");
    let (sid, run1) = a.create(chat("long", "mock:tokens=300,delay_ms=10")).await;
    // Followed on A, live (the newest events it saw may not be in the log yet)...
    let mut on_a = a.events(&sid, None).await;
    let mut seen = on_a.until_text("tok0 tok1 tok2 tok3 tok4 ").await;
    drop(on_a);
    // ...then on B from the last seq it saw: the rest, with no gap, no duplicate, no reset.
    let cursor = seen.last().unwrap().seq();
    let mut on_b = b.events(&sid, Some(cursor)).await;
    let rest = on_b.until_complete(&run1).await;
    assert_eq!(rest[0].seq(), cursor + 1, "{:?}", types(&rest));
    seen.extend(rest);
    assert_contiguous(&seen);
    let text = text_of(&seen);
    let expected: String = (0..300).map(|i| format!("tok{i} ")).collect();
    assert_eq!(text, expected);
}

#[tokio::test]
async fn a_postgresql_outage_longer_than_the_lease_adopts_nothing_and_loses_no_event() {
    let Some(pg) = PrivatePostgres::start() else {
        return;
    };
    let Some(nats) = nats_url() else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let a = node_on(&mock, &pg.url, &nats, "a");
    let b = node_on(&mock, &pg.url, &nats, "b");
    let (sid, run1) = a.create(chat("long", "mock:tokens=400,delay_ms=20")).await;
    let mut through_b = b.events(&sid, None).await;
    let mut seen = through_b.until_text("tok0 tok1 tok2 ").await;

    // The database goes away for longer than a lease (4 s): every lease expires by its clock.
    pg.stop();
    let (status, body) = b.get(&format!("/v1/sessions/{sid}/messages")).await;
    assert_eq!(status, 503, "{body}");
    // The length of the outage is the scenario here, not a wait for something to happen.
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    pg.start_again();

    // Back: A renews its lease before B may count it as lost, so the run is A's to the end and
    // B's follower (on NATS the whole time) sees every event once, in order.
    seen.extend(through_b.until_complete(&run1).await);
    let complete = seen.last().unwrap();
    assert_ne!(
        complete.data["finishReason"],
        "node_lost",
        "{:?}",
        types(&seen)
    );
    assert_eq!(seen.iter().filter(|e| e.event == "complete").count(), 1);
    assert_eq!(seen[0].seq(), 1);
    assert_contiguous(&seen);
    let expected: String = (0..400).map(|i| format!("tok{i} ")).collect();
    assert_eq!(text_of(&seen), expected, "tokens lost or repeated");
    // The log has it all too, read through B.
    let mut replay = b.events(&sid, None).await;
    let logged = replay.until_complete(&run1).await;
    assert_eq!(logged.len(), seen.len(), "{:?}", types(&logged));
    assert_eq!(text_of(&logged), expected);
    // And the fleet goes on: the session takes a prompt through B.
    let run2 = b
        .send(&sid, json!({"prompt": "again", "model": "mock:tokens=2"}))
        .await;
    let after = replay.until_complete(&run2).await;
    assert_eq!(text_of(&after), "tok0 tok1 ");
    assert_eq!(after[0].seq(), complete.seq() + 1);
}

/// Opens the session's stream on `node` as a client should: a 503 (the node's database pool is
/// busy under the burst) is tried again after its Retry-After, a few times; nothing is lost by
/// it, the stream starts from the first event.
async fn follow_as_told(node: &Daemon, sid: &str) -> Result<common::Sse, String> {
    for _ in 0..5 {
        let resp = node
            .http
            .get(node.url(&format!("/v1/sessions/{sid}/events")))
            .send()
            .await
            .map_err(|e| format!("session {sid}: events: {e}"))?;
        match resp.status().as_u16() {
            200 => return Ok(common::Sse::new(resp)),
            503 => {
                let wait = resp
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok()?.parse().ok())
                    .unwrap_or(1);
                tokio::time::sleep(std::time::Duration::from_secs(wait)).await;
            }
            other => return Err(format!("session {sid}: events answered {other}")),
        }
    }
    Err(format!("session {sid}: events answered 503 five times"))
}

/// How many sessions the load test runs at once, over three nodes.
const LOAD_SESSIONS: usize = 1000;

/// One session of the load test: started on `runner`, followed through `follower` from its first
/// event to its `complete`; what the follower saw, checked, or what went wrong.
async fn one_followed_session(
    runner: std::sync::Arc<Daemon>,
    follower: std::sync::Arc<Daemon>,
    i: usize,
) -> Result<(), String> {
    // A 503 (the database pool busy under the burst; nothing stored) is tried again, as a client
    // should, after its Retry-After.
    let mut tries = 0;
    let (status, body) = loop {
        let (status, body) = runner
            .post(
                "/v1/sessions",
                chat(&format!("load {i}"), "mock:tokens=10,delay_ms=20,gate=load"),
            )
            .await;
        tries += 1;
        if status != 503 || tries == 5 {
            break (status, body);
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    };
    if status != 201 {
        return Err(format!("session {i}: create answered {status}: {body}"));
    }
    let sid = body["sessionId"].as_str().unwrap_or_default().to_string();
    let run = body["runId"].as_str().unwrap_or_default().to_string();
    let mut sse = follow_as_told(&follower, &sid).await?;
    let seen = sse.until_complete(&run).await;
    let seqs: Vec<u64> = seen.iter().map(common::Ev::seq).collect();
    let expected_seqs: Vec<u64> = (1..=seqs.len() as u64).collect();
    if seqs != expected_seqs {
        return Err(format!(
            "session {i} ({sid}): seqs {seqs:?}: {:?}",
            seen.iter().map(|e| &e.data).collect::<Vec<_>>()
        ));
    }
    let expected: String = (0..10).map(|t| format!("tok{t} ")).collect();
    if text_of(&seen) != expected {
        return Err(format!("session {i}: text {:?}", text_of(&seen)));
    }
    let completes = seen.iter().filter(|e| e.event == "complete").count();
    let reason = &seen[seen.len() - 1].data["finishReason"];
    if completes != 1 || reason != "stop" {
        return Err(format!("session {i}: {completes} completes, last {reason}"));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_sessions_over_three_nodes_each_followed_through_another_lose_nothing() {
    let Some((database, nats)) = fleet_services().await else {
        return;
    };
    // This process holds two connections per session (its start and its stream).
    let (_, hard) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    assert!(
        hard >= 4 * LOAD_SESSIONS as u64,
        "open-file hard limit {hard}"
    );
    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard).unwrap();
    let mock = MockServer::start().await.unwrap();
    // A long lease: three nodes starting a thousand runs on two shared cores (beside other
    // tests) can stall a heartbeat for seconds; adoption is not what this test is about
    // (docs/scaling.md, "Leases under load").
    let nodes: Vec<std::sync::Arc<Daemon>> = ["a", "b", "c"]
        .into_iter()
        .map(|id| {
            let dir = tempfile::tempdir().unwrap().keep();
            let mut opts = node_opts(&dir, &database, &nats, id, "");
            opts.extra_toml = opts.extra_toml.replace("lease_secs = 4", "lease_secs = 10");
            std::sync::Arc::new(Daemon::start_in(dir, &mock, opts))
        })
        .collect();

    // Every session started on one node and followed through the next one; each run opens its
    // stream from the provider and waits at the gate, so all of them are live at once.
    let mut sessions = tokio::task::JoinSet::new();
    for i in 0..LOAD_SESSIONS {
        let runner = nodes[i % 3].clone();
        let follower = nodes[(i + 1) % 3].clone();
        sessions.spawn(one_followed_session(runner, follower, i));
    }
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(600);
    while mock.waiting_at_gate("load") < LOAD_SESSIONS {
        assert!(
            tokio::time::Instant::now() < deadline && !sessions.is_empty(),
            "{} of {LOAD_SESSIONS} runs reached the provider",
            mock.waiting_at_gate("load")
        );
        if let Some(done) = sessions.try_join_next() {
            panic!("a session ended before the gate opened: {done:?}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // A run's upstream call starts while its session's commit (the lease with it) is under
    // way, so the last leases may land just after the last run reached the gate.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let mut held = Vec::new();
        for n in &nodes {
            held.push(metric(n, "elfgate_fleet_leases_held").await);
        }
        if held.iter().sum::<f64>() == LOAD_SESSIONS as f64 {
            assert!(
                held.iter().all(|h| *h > 0.0),
                "a node runs none of them: {held:?}"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "leases held {held:?}, not one per session at once"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    mock.open_gate("load");

    let mut errors = Vec::new();
    while let Some(done) = sessions.join_next().await {
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => errors.push(e),
            Err(e) => errors.push(format!("a session's task failed: {e}")),
        }
    }
    assert!(
        errors.is_empty(),
        "{} of {LOAD_SESSIONS} sessions went wrong, first ones: {:?}",
        errors.len(),
        &errors[..errors.len().min(5)]
    );
    // Every lease ends with its session's complete, once that is in the log (a follower may see
    // the complete on the bus first).
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    for n in &nodes {
        loop {
            let held = metric(n, "elfgate_fleet_leases_held").await;
            if held == 0.0 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{held} leases still held"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test]
async fn a_follower_on_another_node_gets_what_it_missed_from_the_owners_memory() {
    // A NATS server without JetStream: no stream of recent events, the owner is asked.
    let Some(bus) = PrivateNats::start() else {
        return;
    };
    let Some(database) = postgres_database().await else {
        return;
    };
    let nats = bus.url.clone();
    let mock = MockServer::start().await.unwrap();
    // A's log lingers 10 s: what B did not hear on NATS is not in the log for a while.
    let dir = tempfile::tempdir().unwrap().keep();
    let mut opts = node_opts(&dir, &database, &nats, "a", "");
    opts.env
        .push(("ELFGATE_STORAGE__LOG_LINGER_MS".into(), "10000".into()));
    let a = Daemon::start_in(dir, &mock, opts);
    let b = node_on(&mock, &database, &nats, "b");
    let (sid, run1) = a.create(chat("long", "mock:tokens=2000,delay_ms=10")).await;
    // Events were published before B's follower subscribes: it gets them from A's memory.
    a.events(&sid, None)
        .await
        .until_text("tok0 tok1 tok2 ")
        .await;
    let mut through_b = b.events(&sid, None).await;
    let mut seen = through_b.until_text("tok0 tok1 tok2 tok3 tok4 ").await;
    assert_eq!(seen[0].seq(), 1);
    assert_contiguous(&seen);
    assert!(metric(&a, "elfgate_fleet_recent_served_total").await >= 1.0);
    let (status, body) = b
        .post(&format!("/v1/sessions/{sid}/interrupt"), json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    seen.extend(through_b.until_complete(&run1).await);
    assert_contiguous(&seen);
    assert_eq!(seen.last().unwrap().data["finishReason"], "interrupted");
}

/// A workflow's schedule on a fleet: every node runs the scheduler, and each fire time is run by
/// exactly one of them (its claim in the shared database).
#[tokio::test]
async fn a_schedule_fires_once_per_time_across_the_fleet() {
    let Some((database, nats)) = fleet_services().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let nodes = [
        node_on(&mock, &database, &nats, "a"),
        node_on(&mock, &database, &nats, "b"),
        node_on(&mock, &database, &nats, "c"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let (status, w) = nodes[0]
        .post(
            "/v1/workflows",
            json!({"name": "every-second", "projectPath": dir.path().display().to_string(),
                   "permissionMode": "bypassPermissions",
                   "schedule": {"cron": "* * * * * *"},
                   "steps": [{"id": "look", "tool": "glob", "arguments": {"pattern": "*"}}]}),
        )
        .await;
    assert_eq!(status, 201, "{w}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let times = loop {
        let (status, list) = nodes[1].get("/v1/sessions?limit=1000").await;
        assert_eq!(status, 200, "{list}");
        let mut times: Vec<String> = list["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| {
                s["firstPrompt"]
                    .as_str()?
                    .strip_prefix("Run workflow every-second v1 on schedule at ")
                    .map(|rest| rest.split(' ').next().unwrap_or_default().to_string())
            })
            .collect();
        times.sort();
        if times.len() >= 5 {
            break times;
        }
        assert!(std::time::Instant::now() < deadline, "fired {times:?} only");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let mut unique = times.clone();
    unique.dedup();
    assert_eq!(unique, times, "a fire time ran on two nodes");
    assert!(mock.requests().is_empty());
}
