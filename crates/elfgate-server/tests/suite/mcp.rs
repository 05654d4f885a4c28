//! MCP tools end to end, against the real `@modelcontextprotocol/server-everything` (installed,
//! pinned, by scripts/install-mcp-servers.sh) over stdio and streamable HTTP: tool calls whose
//! results reach the model and are stored, per-session servers, disabled ones, permission tiers,
//! a server killed mid-call, daemon shutdown, reload while a run goes on, and bad input.

use crate::common;
use crate::scripted;

use common::{Daemon, Ev, Opts, allow, poll_until, write_config};
use elfgate_mockllm::MockServer;
use scripted::events::{next_of, until_requests};
use scripted::procs::{alive, live_in_group, until_dead};
use scripted::{
    bodies_for, call, ends_by_id, finish_of, of, offered_tools, project, run, script, session,
    stored,
};
use serde_json::{Value, json};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// server-everything's entry point.
pub(super) fn everything() -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tools/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        p.exists(),
        "{} is missing: run scripts/install-mcp-servers.sh",
        p.display()
    );
    p.canonicalize().unwrap().display().to_string()
}

/// `[mcp.servers.NAME]` running server-everything over stdio, with `extra` keys.
fn stdio_server(name: &str, extra: &str) -> String {
    format!(
        "\n[mcp.servers.{name}]\ncommand = \"node\"\nargs = [\"{}\", \"stdio\"]\n{extra}\n",
        everything()
    )
}

fn daemon(mock: &MockServer, toml: &str) -> Daemon {
    Daemon::start(
        mock,
        Opts {
            extra_toml: toml.into(),
            ..Default::default()
        },
    )
}

/// The tools the run's init event listed.
fn init_tools(evs: &[Ev]) -> Vec<String> {
    of(evs, "init")[0].data["systemInfo"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect()
}

/// The `processing` messages among `evs`.
fn processing(evs: &[Ev]) -> Vec<String> {
    of(evs, "processing")
        .iter()
        .map(|e| e.data["message"].as_str().unwrap().to_string())
        .collect()
}

/// The tool results a request sent to the model (OpenAI wire format).
fn tool_messages(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect()
}

/// GET /v1/mcp/servers, by server name.
async fn server_status(d: &Daemon, name: &str) -> Value {
    let (s, v) = d.get("/v1/mcp/servers").await;
    assert_eq!(s, 200, "{v}");
    v["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == name)
        .cloned()
        .unwrap_or(Value::Null)
}

/// server-everything over streamable HTTP on a free port, in a process group of its own.
struct HttpServer {
    child: Child,
    port: u16,
}

impl HttpServer {
    async fn start() -> HttpServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = std::process::Command::new("node")
            .args([everything().as_str(), "streamableHttp"])
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        let addr = format!("127.0.0.1:{port}");
        let mut up = false;
        for _ in 0..3000 {
            if std::net::TcpStream::connect(&addr).is_ok() {
                up = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(up, "server-everything did not listen on {addr}");
        HttpServer { child, port }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.wait();
    }
}

/// Checks a run that called echo and get-sum of `server`: both ran without asking (they declare
/// readOnlyHint), their results reached the model and are stored.
async fn check_echo_and_sum(d: &Daemon, mock: &MockServer, model: &str, sid: &str, evs: &[Ev]) {
    assert_eq!(finish_of(evs), "stop");
    assert!(of(evs, "permissionRequest").is_empty());
    let ends = ends_by_id(evs);
    assert_eq!(ends["e1"], ("success".into(), "Echo: hello mcp".into()));
    assert_eq!(
        ends["s1"],
        ("success".into(), "The sum of 2 and 3 is 5.".into())
    );
    let bodies = bodies_for(mock, model);
    assert_eq!(
        tool_messages(&bodies[1]),
        ["Echo: hello mcp", "The sum of 2 and 3 is 5."]
    );
    let msgs = stored(d, sid).await;
    let results: Vec<&str> = msgs[2]["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["content"].as_str().unwrap())
        .collect();
    assert_eq!(results, ["Echo: hello mcp", "The sum of 2 and 3 is 5."]);
}

fn echo_and_sum(mock: &MockServer, name: &str, server: &str) {
    script(
        mock,
        name,
        json!([
            {"toolCalls": [
                call("e1", &format!("mcp__{server}__echo"), json!({"message": "hello mcp"})),
                call("s1", &format!("mcp__{server}__get-sum"), json!({"a": 2, "b": 3})),
            ]},
            {"text": "done"}
        ]),
    );
}

#[tokio::test]
async fn echo_and_get_sum_over_stdio_and_streamable_http() {
    let mock = MockServer::start().await.unwrap();
    let d = daemon(&mock, &stdio_server("ev", ""));
    let dir = project();

    // A daemon server over stdio.
    echo_and_sum(&mock, "stdio", "ev");
    let (sid, _, evs) = run(&d, session("go", "mock:script=stdio", &dir, json!({}))).await;
    let tools = init_tools(&evs);
    assert!(tools.contains(&"mcp__ev__echo".to_string()), "{tools:?}");
    assert!(tools.contains(&"read_file".to_string()), "{tools:?}");
    let offered = bodies_for(&mock, "mock:script=stdio");
    let offered = offered_tools(&offered[0]);
    assert!(offered.contains(&"mcp__ev__get-sum"), "{offered:?}");
    check_echo_and_sum(&d, &mock, "mock:script=stdio", &sid, &evs).await;
    let st = server_status(&d, "ev").await;
    assert_eq!(st["status"], "connected", "{st}");
    assert_eq!(st["transport"], "stdio");
    assert_eq!(st["scope"], "global");
    assert!(st["toolCount"].as_u64().unwrap() >= 2, "{st}");
    let pid = st["pid"].clone();
    assert!(pid.is_i64(), "{st}");

    // Images, structured content and errors, as the tool_result text says them.
    script(
        &mock,
        "results",
        json!([
            {"toolCalls": [
                call("i1", "mcp__ev__get-tiny-image", json!({})),
                call("c1", "mcp__ev__get-structured-content", json!({"location": "Chicago"})),
                call("x1", "mcp__ev__get-sum", json!({"a": "one", "b": 2})),
            ]},
            {"text": "done"}
        ]),
    );
    let (_, _, evs) = run(&d, session("go", "mock:script=results", &dir, json!({}))).await;
    let ends = ends_by_id(&evs);
    let (status, image) = &ends["i1"];
    assert_eq!(status, "success");
    assert!(
        image.starts_with("Here's the image you requested:\n[image: image/png, "),
        "{image}"
    );
    assert!(image.ends_with("bytes of base64 data not shown]\nThe image above is the MCP logo."));
    let (status, structured) = &ends["c1"];
    assert_eq!(status, "success");
    assert!(structured.contains("\"temperature\""), "{structured}");
    assert_eq!(ends["x1"].0, "error", "{ends:?}");

    // A session's own server, over streamable HTTP.
    let http = HttpServer::start().await;
    echo_and_sum(&mock, "http", "web");
    let (sid, _, evs) = run(
        &d,
        session(
            "go",
            "mock:script=http",
            &dir,
            json!({"mcpConfig": {"servers": {"web": {"url": http.url()}}}}),
        ),
    )
    .await;
    check_echo_and_sum(&d, &mock, "mock:script=http", &sid, &evs).await;
    let st = server_status(&d, "web").await;
    assert_eq!(st["transport"], "streamableHttp", "{st}");
    assert_eq!(st["scope"], "session");
    // The daemon's server is still offered next to it, and the session shared its process
    // with the first one (same configuration).
    assert!(init_tools(&evs).contains(&"mcp__ev__echo".to_string()));
    assert_eq!(server_status(&d, "ev").await["pid"], pid);
}

#[tokio::test]
async fn tiers_disabled_servers_and_notifications() {
    let mock = MockServer::start().await.unwrap();
    let d = daemon(&mock, &stdio_server("ev", ""));
    let dir = project();

    // A tool without readOnlyHint asks; one with it does not; progress notifications arrive as
    // processing events.
    script(
        &mock,
        "ask",
        json!([
            {"toolCalls": [call("t1", "mcp__ev__toggle-simulated-logging", json!({}))]},
            {"toolCalls": [call("l1", "mcp__ev__trigger-long-running-operation",
                json!({"duration": 1, "steps": 2}))]},
            {"text": "done"}
        ]),
    );
    let (sid, run_id) = d
        .create(session("go", "mock:script=ask", &dir, json!({})))
        .await;
    let mut sse = d.events(&sid, None).await;
    let mut seen = Vec::new();
    let ids = until_requests(&mut sse, 1, &mut seen).await;
    let req = of(&seen, "permissionRequest")[0].data.clone();
    assert_eq!(
        req["toolName"], "mcp__ev__toggle-simulated-logging",
        "{req}"
    );
    allow(&d, &sid, &ids[0]).await;
    seen.extend(sse.until_complete(&run_id).await);
    assert_eq!(finish_of(&seen), "stop");
    assert_eq!(of(&seen, "permissionRequest").len(), 1);
    let ends = ends_by_id(&seen);
    assert_eq!(ends["t1"].0, "success", "{ends:?}");
    assert_eq!(ends["l1"].0, "success", "{ends:?}");
    assert!(ends["l1"].1.contains("Long running operation completed"));
    let notes = processing(&seen);
    assert!(
        notes.iter().any(|n| n.contains("mcp ev: progress 1/2")),
        "{notes:?}"
    );

    // tool_tiers over readOnlyHint: a session's own configuration of the server makes echo ask
    // (the connection is the daemon's: only call settings differ).
    script(
        &mock,
        "tiered",
        json!([
            {"toolCalls": [call("e1", "mcp__ev__echo", json!({"message": "asked"}))]},
            {"text": "done"}
        ]),
    );
    let (sid, run_id) = d
        .create(session(
            "go",
            "mock:script=tiered",
            &dir,
            json!({"mcpConfig": {"servers": {"ev": {"command": "node",
                "args": [everything(), "stdio"],
                "tool_tiers": {"echo": "always_confirm"}}}}}),
        ))
        .await;
    let mut sse = d.events(&sid, None).await;
    let mut seen = Vec::new();
    let ids = until_requests(&mut sse, 1, &mut seen).await;
    assert_eq!(
        of(&seen, "permissionRequest")[0].data["toolName"],
        "mcp__ev__echo"
    );
    allow(&d, &sid, &ids[0]).await;
    seen.extend(sse.until_complete(&run_id).await);
    assert_eq!(
        ends_by_id(&seen)["e1"],
        ("success".into(), "Echo: asked".into())
    );

    // A session that does without the daemon's server.
    script(&mock, "plain", json!([{"text": "hi"}]));
    let (_, _, evs) = run(
        &d,
        session(
            "go",
            "mock:script=plain",
            &dir,
            json!({"mcpConfig": {"disable": ["ev"]}}),
        ),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop");
    assert!(init_tools(&evs).iter().all(|t| !t.starts_with("mcp__")));
    let body = &bodies_for(&mock, "mock:script=plain")[0];
    assert!(offered_tools(body).iter().all(|t| !t.starts_with("mcp__")));
}

#[tokio::test]
async fn a_server_killed_mid_call_fails_the_call_and_restarts_and_none_outlives_the_daemon() {
    let mock = MockServer::start().await.unwrap();
    // The idle time keeps the server up after the run, so that the daemon's shutdown stops it.
    let mut d = daemon(
        &mock,
        &format!(
            "[mcp]\nidle_shutdown_secs = 600\n{}",
            stdio_server("ev", "call_timeout_secs = 120")
        ),
    );
    let dir = project();
    script(
        &mock,
        "kill",
        json!([
            {"toolCalls": [call("l1", "mcp__ev__trigger-long-running-operation",
                json!({"duration": 600, "steps": 600}))]},
            {"toolCalls": [call("e1", "mcp__ev__echo", json!({"message": "again"}))]},
            {"text": "done"}
        ]),
    );
    let (sid, run_id) = d
        .create(session("go", "mock:script=kill", &dir, json!({})))
        .await;
    let mut sse = d.events(&sid, None).await;
    // The call is in flight once its first progress notification arrives.
    loop {
        let ev = next_of(&mut sse, "processing").await;
        if ev.data["message"]
            .as_str()
            .unwrap()
            .contains("mcp ev: progress")
        {
            break;
        }
    }
    let first = server_status(&d, "ev").await;
    let pid = first["pid"].as_i64().unwrap() as i32;
    assert_eq!(first["sessions"], json!([sid]), "{first}");
    Command::new("kill")
        .args(["-KILL", "--", &format!("-{pid}")])
        .status()
        .unwrap();
    let evs = sse.until_complete(&run_id).await;
    assert_eq!(finish_of(&evs), "stop");
    let ends = ends_by_id(&evs);
    assert_eq!(ends["l1"].0, "error", "{ends:?}");
    assert!(ends["l1"].1.contains("failed during the call"), "{ends:?}");
    assert!(
        processing(&evs)
            .iter()
            .any(|n| n.contains("restarted on the next call")),
        "{evs:?}"
    );
    // The next call started it again.
    assert_eq!(ends["e1"], ("success".into(), "Echo: again".into()));
    let second = server_status(&d, "ev").await;
    assert_eq!(second["status"], "connected", "{second}");
    let pid2 = second["pid"].as_i64().unwrap() as i32;
    assert_ne!(pid, pid2);

    // SIGTERM: the daemon stops its servers before it exits.
    assert!(d.terminate().success());
    assert!(until_dead(|| alive(&[pid2])).await.is_empty());
    assert!(until_dead(|| live_in_group(pid2)).await.is_empty());
}

#[tokio::test]
async fn reload_changes_the_tools_of_a_running_session_from_its_next_iteration() {
    let mock = MockServer::start().await.unwrap();
    let d = daemon(&mock, "");
    let dir = project();
    // Each shell call waits for a permission answer: the run is mid-way while the test reloads.
    script(
        &mock,
        "reload",
        json!([
            {"toolCalls": [call("sh1", "shell", json!({"command": "echo one"}))]},
            {"toolCalls": [
                call("e1", "mcp__ev__echo", json!({"message": "new tool"})),
                call("sh2", "shell", json!({"command": "echo two"})),
            ]},
            {"toolCalls": [call("e2", "mcp__ev__echo", json!({"message": "gone"}))]},
            {"text": "done"}
        ]),
    );
    let (sid, run_id) = d
        .create(session("go", "mock:script=reload", &dir, json!({})))
        .await;
    let mut sse = d.events(&sid, None).await;
    let mut seen = Vec::new();
    let ids = until_requests(&mut sse, 1, &mut seen).await;

    // Add a server while the run waits.
    write_config(&d.dir, &mock, &stdio_server("ev", ""));
    let (s, v) = d.post("/v1/mcp/reload", json!({})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["added"], json!(["ev"]));
    assert_eq!(v["activeSessions"], 1);
    allow(&d, &sid, &ids[0]).await;
    let ids = until_requests(&mut sse, 1, &mut seen).await;

    // Remove it while the second shell call waits.
    write_config(&d.dir, &mock, "");
    let (s, v) = d.post("/v1/mcp/reload", json!({})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["removed"], json!(["ev"]));
    allow(&d, &sid, &ids[0]).await;
    seen.extend(sse.until_complete(&run_id).await);
    assert_eq!(finish_of(&seen), "stop");

    let ends = ends_by_id(&seen);
    assert_eq!(ends["sh1"].0, "success", "{ends:?}");
    assert_eq!(ends["e1"], ("success".into(), "Echo: new tool".into()));
    assert_eq!(ends["sh2"].0, "success", "{ends:?}");
    assert_eq!(ends["e2"].0, "error", "{ends:?}");
    assert!(ends["e2"].1.contains("unknown tool"), "{ends:?}");
    let bodies = bodies_for(&mock, "mock:script=reload");
    let has_echo = |b: &Value| offered_tools(b).contains(&"mcp__ev__echo");
    assert!(!has_echo(&bodies[0]));
    assert!(has_echo(&bodies[1]));
    assert!(!has_echo(&bodies[2]));
}

#[tokio::test]
async fn bad_mcp_input_is_refused_or_reported() {
    let mock = MockServer::start().await.unwrap();
    let mut d = daemon(&mock, "");
    let dir = project();

    // A malformed mcpConfig: 422 naming the field.
    for (cfg, field) in [
        (
            json!({"servers": {"x": {"command": 5}}}),
            "mcpConfig.servers.x.command",
        ),
        (json!({"servers": {"x": {}}}), "mcpConfig.servers.x"),
        (json!({"disable": "x"}), "mcpConfig.disable"),
        (json!([1]), "mcpConfig"),
    ] {
        let (s, v) = d
            .post(
                "/v1/sessions",
                session("go", "mock", &dir, json!({"mcpConfig": cfg})),
            )
            .await;
        assert_eq!(s, 422, "{v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.starts_with(field), "{field}: {msg}");
    }

    // A command that does not exist, and one that never answers initialize: the session runs
    // without their tools and says so; their status says why.
    script(&mock, "bad", json!([{"text": "ran anyway"}]));
    let (_, _, evs) = run(
        &d,
        session(
            "go",
            "mock:script=bad",
            &dir,
            json!({"mcpConfig": {"servers": {
                "missing": {"command": "/nonexistent/mcp-server"},
                "mute": {"command": "sleep", "args": ["1000"], "startup_timeout_secs": 1},
            }}}),
        ),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop");
    let notes = processing(&evs);
    let note = |name: &str| {
        notes
            .iter()
            .find(|n| n.contains(&format!("MCP server '{name}' is unavailable")))
            .cloned()
            .unwrap_or_else(|| panic!("no note for {name}: {notes:?}"))
    };
    assert!(note("missing").contains("cannot start /nonexistent/mcp-server"));
    assert!(note("missing").contains("runs without its tools"));
    assert!(note("mute").contains("startup timeout"));
    let missing = server_status(&d, "missing").await;
    assert_eq!(missing["status"], "failed", "{missing}");
    assert!(
        missing["reason"]
            .as_str()
            .unwrap()
            .contains("cannot start /nonexistent/mcp-server")
    );
    let mute = server_status(&d, "mute").await;
    assert_eq!(mute["status"], "failed", "{mute}");
    assert!(mute["reason"].as_str().unwrap().contains("startup timeout"));

    // A configuration that no longer loads reloads nothing.
    write_config(&d.dir, &mock, "[mcp.servers.x]\nargs = []\n");
    let (s, v) = d.post("/v1/mcp/reload", json!({})).await;
    assert_eq!(s, 422, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("mcp.servers.x: set either command or url"),
        "{v}"
    );
    // The daemon stops what it started for the failed attempts before it exits (the harness
    // would otherwise SIGKILL it, and `sleep` does not end with its stdin).
    assert!(d.terminate().success());
}

/// A stdio MCP server in bash that logs every line it reads to `log`, answers initialize and
/// tools/list (`hang`, and `open`, which declares a `path` argument), and never answers a call.
/// `after` runs once its stdin closes.
fn silent_server(dir: &std::path::Path, log: &std::path::Path, after: &str) -> String {
    let script = dir.join("silent-server.sh");
    std::fs::write(
        &script,
        format!(
            r#"#!/bin/bash
while IFS= read -r line; do
  printf '%s\n' "$line" >> '{log}'
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
  case "$line" in
    *'"method":"initialize"'*)
      printf '{{"jsonrpc":"2.0","id":%s,"result":{{"protocolVersion":"2025-06-18","capabilities":{{"tools":{{}}}},"serverInfo":{{"name":"silent","version":"1"}}}}}}\n' "$id";;
    *'"method":"tools/list"'*)
      printf '{{"jsonrpc":"2.0","id":%s,"result":{{"tools":[{{"name":"hang","inputSchema":{{"type":"object"}},"annotations":{{"readOnlyHint":true}}}},{{"name":"open","inputSchema":{{"type":"object","properties":{{"path":{{"type":"string"}}}}}},"annotations":{{"readOnlyHint":true}}}}]}}}}\n' "$id";;
  esac
done
{after}
"#,
            log = log.display()
        ),
    )
    .unwrap();
    format!(
        // Its directory is where it may write (its log), confined.
        "\n[mcp.servers.silent]\ncommand = \"bash\"\nargs = [\"{}\"]\ncwd = \"{}\"\ncall_timeout_secs = 1\n",
        script.display(),
        dir.display()
    )
}

/// How many lines of the server's log mention `what`.
fn logged(log: &std::path::Path, what: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(what))
        .count()
}

#[tokio::test]
async fn interrupts_and_call_timeouts_cancel_the_call_with_the_server() {
    let mock = MockServer::start().await.unwrap();
    let dir = project();
    let log = dir.join("server.log");
    let d = daemon(&mock, &silent_server(&dir, &log, ""));

    // A call that gets no answer within call_timeout_secs: a tool error, the request cancelled,
    // and the server restarted for the next call.
    script(
        &mock,
        "timeout",
        json!([
            {"toolCalls": [call("h1", "mcp__silent__hang", json!({}))]},
            {"toolCalls": [call("h2", "mcp__silent__hang", json!({}))]},
            {"text": "done"}
        ]),
    );
    let (_, _, evs) = run(&d, session("go", "mock:script=timeout", &dir, json!({}))).await;
    assert_eq!(finish_of(&evs), "stop");
    let ends = ends_by_id(&evs);
    for id in ["h1", "h2"] {
        assert_eq!(ends[id].0, "error", "{ends:?}");
        assert!(
            ends[id].1.contains("gave no answer within 1.0s"),
            "{ends:?}"
        );
    }
    assert!(
        processing(&evs)
            .iter()
            .any(|n| n.contains("no answer within the call timeout")),
        "{evs:?}"
    );
    // Started for the run, again for h2 after h1 timed out, and again for the last iteration.
    assert_eq!(logged(&log, "\"method\":\"initialize\""), 3);
    let cancelled = poll_until("the first call cancelled", || {
        (logged(&log, "notifications/cancelled") >= 1).then_some(())
    });
    cancelled.await;

    // An interrupt cancels the call in flight; the server stays up.
    script(
        &mock,
        "interrupt",
        json!([
            {"toolCalls": [call("h3", "mcp__silent__hang", json!({}))]},
            {"text": "done"}
        ]),
    );
    let (sid, run_id) = d
        .create(session(
            "go",
            "mock:script=interrupt",
            &dir,
            json!({"mcpConfig": {"servers": {"silent": {"command": "bash",
                "args": [dir.join("silent-server.sh").display().to_string()],
                "cwd": dir.display().to_string(),
                "call_timeout_secs": 600}}}}),
        ))
        .await;
    let mut sse = d.events(&sid, None).await;
    let _ = next_of(&mut sse, "toolCallStart").await;
    let calls = poll_until("the call reached the server", || {
        let n = logged(&log, "\"method\":\"tools/call\"");
        (n >= 3).then_some(n)
    })
    .await;
    let before = logged(&log, "notifications/cancelled");
    let (s, v) = d
        .post(&format!("/v1/sessions/{sid}/interrupt"), json!({}))
        .await;
    assert_eq!(s, 200, "{v}");
    let evs = sse.until_complete(&run_id).await;
    assert_eq!(finish_of(&evs), "interrupted");
    assert_eq!(ends_by_id(&evs)["h3"].0, "interrupted");
    poll_until("the interrupted call cancelled", || {
        (logged(&log, "notifications/cancelled") > before).then_some(())
    })
    .await;
    assert_eq!(logged(&log, "\"method\":\"tools/call\""), calls);
    // The server was not taken for a broken one. (The session's server differs from the
    // daemon's only in its call timeout: they share one connection.)
    let st = server_status(&d, "silent").await;
    assert_eq!(st["status"], "connected", "{st}");
    assert_eq!(logged(&log, "\"method\":\"initialize\""), 3);
}

#[tokio::test]
async fn servers_a_killed_daemon_left_running_are_stopped_when_it_starts_again() {
    let mock = MockServer::start().await.unwrap();
    let dir = project();
    let log = dir.join("server.log");
    // A server that outlives its stdin closing, and a daemon that keeps it after the run.
    // Unconfined: a confined server dies with the daemon (bwrap --die-with-parent), and this is
    // the case of one that does not.
    let opts = Opts {
        extra_toml: format!(
            "[sandbox]\nmode = \"off\"\n\n[mcp]\nidle_shutdown_secs = 600\n{}",
            silent_server(&dir, &log, "exec sleep 600")
        ),
        ..Default::default()
    };
    let mut d = Daemon::start(&mock, opts.clone());
    script(&mock, "plain", json!([{"text": "hi"}]));
    let (_, _, evs) = run(&d, session("go", "mock:script=plain", &dir, json!({}))).await;
    assert_eq!(finish_of(&evs), "stop");
    let pid = server_status(&d, "silent").await["pid"].as_i64().unwrap() as i32;
    d.kill();
    assert_eq!(alive(&[pid]), [pid], "the server ended with the daemon");
    let _d = Daemon::start_in(d.dir.clone(), &mock, opts);
    assert!(until_dead(|| live_in_group(pid)).await.is_empty());
}

#[tokio::test]
async fn a_chat_session_with_mcp_config_calls_tools_through_the_pipeline() {
    let mock = MockServer::start().await.unwrap();
    let d = daemon(&mock, &stdio_server("ev", ""));

    // Without mcpConfig a chat session has no tools, whatever the daemon configures.
    script(&mock, "chat-plain", json!([{"text": "no tools"}]));
    let (_, _, evs) = run(
        &d,
        json!({"engine": "chat", "prompt": "hi", "model": "mock:script=chat-plain"}),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop");
    assert!(bodies_for(&mock, "mock:script=chat-plain")[0]["tools"].is_null());

    // With it: the daemon's server, a call that asks (no readOnlyHint) and one that does not.
    script(
        &mock,
        "chat-mcp",
        json!([
            {"toolCalls": [call("e1", "mcp__ev__echo", json!({"message": "from chat"}))]},
            {"toolCalls": [call("t1", "mcp__ev__toggle-simulated-logging", json!({}))]},
            {"text": "done"}
        ]),
    );
    let (sid, run_id) = d
        .create(
            json!({"engine": "chat", "prompt": "go", "model": "mock:script=chat-mcp",
            "systemPrompt": "Be brief.", "mcpConfig": {}}),
        )
        .await;
    let mut sse = d.events(&sid, None).await;
    let mut seen = Vec::new();
    let ids = until_requests(&mut sse, 1, &mut seen).await;
    allow(&d, &sid, &ids[0]).await;
    seen.extend(sse.until_complete(&run_id).await);
    assert_eq!(finish_of(&seen), "stop");
    let ends = ends_by_id(&seen);
    assert_eq!(ends["e1"], ("success".into(), "Echo: from chat".into()));
    assert_eq!(ends["t1"].0, "success", "{ends:?}");
    let tools = init_tools(&seen);
    assert!(
        tools.iter().all(|t| t.starts_with("mcp__ev__")),
        "{tools:?}"
    );
    assert_eq!(of(&seen, "init")[0].data["systemInfo"]["engine"], "chat");
    let bodies = bodies_for(&mock, "mock:script=chat-mcp");
    assert_eq!(bodies.len(), 3);
    assert_eq!(tool_messages(&bodies[1]), ["Echo: from chat"]);
    // The session's own system prompt, without tinyelf's.
    assert_eq!(bodies[0]["messages"][0]["content"], "Be brief.");
    let msgs = stored(&d, &sid).await;
    let roles: Vec<&str> = msgs.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant"
        ]
    );
}

#[tokio::test]
async fn an_interrupt_does_not_wait_for_a_server_that_is_starting() {
    let mock = MockServer::start().await.unwrap();
    let mut d = daemon(&mock, "");
    let dir = project();
    script(&mock, "never", json!([{"text": "unreachable"}]));
    let (sid, run_id) = d
        .create(session(
            "go",
            "mock:script=never",
            &dir,
            json!({"mcpConfig": {"servers": {"slow": {"command": "sleep", "args": ["1000"],
                "startup_timeout_secs": 3600}}}}),
        ))
        .await;
    let mut sse = d.events(&sid, None).await;
    // Polled: no event announces a server starting.
    let deadline = std::time::Instant::now() + common::GUARD;
    while server_status(&d, "slow").await["status"] != "starting" {
        assert!(
            std::time::Instant::now() < deadline,
            "the server never started"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let (s, v) = d
        .post(&format!("/v1/sessions/{sid}/interrupt"), json!({}))
        .await;
    assert_eq!(s, 200, "{v}");
    let evs = sse.until_complete(&run_id).await;
    assert_eq!(finish_of(&evs), "interrupted");
    assert!(bodies_for(&mock, "mock:script=never").is_empty());
    let st = server_status(&d, "slow").await;
    assert_eq!(st["status"], "idle", "{st}");
    assert!(d.terminate().success());
}

#[tokio::test]
async fn mcp_calls_go_through_hooks_and_the_firewall() {
    let mock = MockServer::start().await.unwrap();
    let dir = project();
    let log = dir.join("server.log");
    let hook = r#"
[[engines.tinyelf.hooks]]
event = "PreToolUse"
matcher = "mcp__silent__hang"
command = '''cat > /dev/null; echo '{"decision":"deny","reason":"not this one"}' '''
"#;
    let d = daemon(&mock, &format!("{}{hook}", silent_server(&dir, &log, "")));
    script(
        &mock,
        "gated",
        json!([
            {"toolCalls": [
                call("h1", "mcp__silent__hang", json!({})),
                call("o1", "mcp__silent__open", json!({"path": "/etc/passwd"})),
            ]},
            {"text": "done"}
        ]),
    );
    let (_, _, evs) = run(&d, session("go", "mock:script=gated", &dir, json!({}))).await;
    assert_eq!(finish_of(&evs), "stop");
    let ends = ends_by_id(&evs);
    assert_eq!(ends["h1"].0, "denied", "{ends:?}");
    assert!(ends["h1"].1.contains("not this one"), "{ends:?}");
    assert_eq!(ends["o1"].0, "denied", "{ends:?}");
    assert!(ends["o1"].1.contains("firewall"), "{ends:?}");
    // Neither call reached the server.
    assert_eq!(logged(&log, "\"method\":\"tools/call\""), 0);
}

/// A tool run outside a turn reaches the session's MCP tools too: checked against the server's
/// schema before it runs, answered by the server, recorded in the history.
#[tokio::test]
async fn an_mcp_tool_runs_outside_a_turn() {
    let mock = MockServer::start().await.unwrap();
    let d = daemon(&mock, &stdio_server("ev", ""));
    let dir = project();
    let (sid, _, evs) = run(
        &d,
        session(
            "hi",
            "mock:tokens=2",
            &dir,
            json!({"permissionMode": "bypassPermissions"}),
        ),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop");
    let path = format!("/v1/sessions/{sid}/tools/mcp__ev__echo");
    let (st, r) = d
        .post(&path, json!({"arguments": {"message": "hello mcp"}}))
        .await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["status"], "success", "{r}");
    assert!(r["content"].as_str().unwrap().contains("hello mcp"), "{r}");
    let (st, e) = d.post(&path, json!({"arguments": {}})).await;
    assert_eq!(st, 422, "{e}");
    let (st, e) = d
        .post(
            &format!("/v1/sessions/{sid}/tools/mcp__ev__nope"),
            json!({"arguments": {}}),
        )
        .await;
    assert_eq!(st, 404, "{e}");
    let msgs = stored(&d, &sid).await;
    assert!(
        msgs.iter()
            .flat_map(|m| m["blocks"].as_array().unwrap())
            .any(|b| b["type"] == "tool_use" && b["name"] == "mcp__ev__echo")
    );
}
