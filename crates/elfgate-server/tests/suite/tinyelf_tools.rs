//! tinyelf's tool execution end to end: interrupts, timeouts, truncation, malformed arguments,
//! the session and web tools, and calls the provider runs itself.

use crate::common;
use crate::scripted;

use common::{Daemon, GUARD, Opts, poll_until, text_of, types};
use elfgate_mockllm::MockServer;
use scripted::procs::{alive, live_in, live_in_group, pgid_of, read_pid, until_dead};
use scripted::{
    bodies_for, bypass, call, daemon_with, ends, ends_by_id, finish_of, of, offered_tools, project,
    roles, run, script, session, stored, wait_for_file,
};
use serde_json::json;

#[tokio::test]
async fn interrupting_a_shell_kills_its_process_group_and_resume_works() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();
    script(
        &mock,
        "sleepy",
        json!([
            {"toolCalls": [call("s1", "shell", json!({"command": "sleep 600 & echo $! > child.pid; echo $$ > sh.pid; wait"}))]},
            {"text": "Resumed after the interrupt."}
        ]),
    );
    let (sid, run1) = d
        .create(session(
            "sleep",
            "mock:script=sleepy",
            &dir,
            json!({"permissionMode": "bypassPermissions"}),
        ))
        .await;
    let mut sse = d.events(&sid, None).await;
    // The pids as this test sees them (the command runs in a pid namespace of its own).
    let (sh, child) = poll_until("the command started", || {
        Some((
            read_pid(&dir.join("sh.pid"))?,
            read_pid(&dir.join("child.pid"))?,
        ))
    })
    .await;
    let group = pgid_of(sh).unwrap();
    assert_eq!(alive(&[sh, child]).len(), 2);
    // The interrupt does not wait for the tool's 600 s sleep: it is answered within the guard
    // time, and the run's `complete` too (Sse::next has the same guard).
    let (s, v) = tokio::time::timeout(
        GUARD,
        d.post(
            &format!("/v1/sessions/{sid}/interrupt"),
            json!({"wait": true}),
        ),
    )
    .await
    .expect("the interrupt waited for the tool");
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["interrupted"], true);
    let evs = sse.until_complete(&run1).await;
    assert_eq!(finish_of(&evs), "interrupted");
    let e = ends(&evs);
    assert_eq!(e[0].0, "interrupted");
    // No process of the group survives.
    let left = until_dead(|| live_in_group(group)).await;
    assert!(left.is_empty(), "{left:?}");
    assert!(until_dead(|| alive(&[sh, child])).await.is_empty());
    // The transcript holds a synthetic interrupted result.
    let msgs = stored(&d, &sid).await;
    assert_eq!(roles(&msgs), ["user", "assistant", "tool"]);
    let r = &msgs[2]["blocks"][0];
    assert_eq!(r["tool_use_id"], "s1");
    assert_eq!(r["is_error"], true);
    assert!(r["content"].as_str().unwrap().contains("interrupted"));
    // Resume works and sends the interrupted exchange upstream.
    let run2 = d.send(&sid, json!({"prompt": "go on"})).await;
    let evs2 = sse.until_complete(&run2).await;
    assert_eq!(finish_of(&evs2), "stop");
    assert_eq!(text_of(&evs2), "Resumed after the interrupt.");
    let bodies = bodies_for(&mock, "mock:script=sleepy");
    let m = bodies[1]["messages"].as_array().unwrap();
    let r: Vec<&str> = m.iter().map(|x| x["role"].as_str().unwrap()).collect();
    assert_eq!(r, ["system", "user", "assistant", "tool", "user"]);
    assert!(m[3]["content"].as_str().unwrap().contains("interrupted"));
}

#[tokio::test]
async fn timeout_truncation_and_firewall_denials() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();

    // Tool timeout. The shell writes its pid first; a machine slower than the timeout may kill it
    // before that, which leaves nothing to check: then again with twice the timeout.
    let mut timeout_ms = 500;
    loop {
        let _ = std::fs::remove_file(dir.join("slow.pid"));
        script(
            &mock,
            "slow",
            json!([{"toolCalls": [call("t1", "shell", json!({"command": "echo $$ > slow.pid; exec sleep 60"}))]}, {"text": "ok"}]),
        );
        let (_, _, evs) = run(
            &d,
            session(
                "slow",
                "mock:script=slow",
                &dir,
                bypass(json!({"engineConfig": {"toolExecutionTimeout": timeout_ms}})),
            ),
        )
        .await;
        assert_eq!(finish_of(&evs), "stop");
        let e = ends(&evs);
        assert_eq!(e[0].0, "timeout", "{e:?}");
        assert!(e[0].1.contains("timed out"));
        if dir.join("slow.pid").exists() {
            break;
        }
        assert!(
            timeout_ms < 30_000,
            "the shell never started within {timeout_ms} ms"
        );
        timeout_ms *= 2;
    }
    // Nothing of it runs in the project any more.
    assert!(until_dead(|| live_in(&dir)).await.is_empty());

    // Truncation with a visible marker.
    std::fs::write(dir.join("big.txt"), "x".repeat(5000)).unwrap();
    script(
        &mock,
        "big",
        json!([{"toolCalls": [call("b1", "read_file", json!({"path": "big.txt"}))]}, {"text": "ok"}]),
    );
    let (_, _, evs) = run(
        &d,
        session(
            "big",
            "mock:script=big",
            &dir,
            json!({"engineConfig": {"toolResultMaxChars": 100}}),
        ),
    )
    .await;
    let e = ends(&evs);
    assert_eq!(e[0].0, "success");
    assert!(e[0].1.starts_with(&"x".repeat(100)));
    assert!(
        e[0].1
            .contains("output truncated: showing 100 of 5000 characters"),
        "{}",
        e[0].1
    );
    assert!(e[0].1.len() < 300);

    // Firewall: .. traversal, a symlink out of the project, a denied command, the daemon's data dir.
    let outside = tempfile::tempdir().unwrap().keep();
    std::fs::write(outside.join("secret.txt"), "s3cret").unwrap();
    let rel = format!(
        "../{}/secret.txt",
        outside.file_name().unwrap().to_string_lossy()
    );
    std::os::unix::fs::symlink(&outside, dir.join("link")).unwrap();
    script(
        &mock,
        "fw",
        json!([{"toolCalls": [
            call("f1", "read_file", json!({"path": rel})),
            call("f2", "read_file", json!({"path": "link/secret.txt"})),
            call("f3", "shell", json!({"command": "rm -rf /"})),
            call("f4", "read_file", json!({"path": d.dir.join("elfgate.db").display().to_string()})),
            call("f5", "write_file", json!({"path": "link/new.txt", "content": "x"}))
        ]}, {"text": "ok"}]),
    );
    let (_, _, evs) = run(&d, session("fw", "mock:script=fw", &dir, bypass(json!({})))).await;
    assert_eq!(finish_of(&evs), "stop");
    let e = ends_by_id(&evs);
    assert_eq!(e.len(), 5);
    for (status, content) in e.values() {
        assert_eq!(status, "denied", "{e:?}");
        assert!(content.contains("firewall"), "{content}");
        assert!(!content.contains("s3cret"));
    }
    assert!(e["f1"].1.contains("outside the project"));
    assert!(e["f2"].1.contains("outside the project"));
    assert!(e["f3"].1.contains("command denied"));
    assert!(e["f4"].1.contains("protected location"));
    assert!(!outside.join("new.txt").exists());
}

#[tokio::test]
async fn malformed_tool_arguments_become_a_correctable_error() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();
    script(
        &mock,
        "bad-args",
        json!([
            {"toolCalls": [
                {"id": "m1", "name": "read_file", "arguments": "{\"path\": \"a.txt\""},
                {"id": "m2", "name": "read_file", "arguments": "[1,2]"},
                {"id": "m3", "name": "read_file", "arguments": "{\"file\": 3}"},
                {"id": "m4", "name": "no_such_tool", "arguments": "{}"}
            ]},
            {"toolCalls": [call("m5", "read_file", json!({"path": "a.txt"}))]},
            {"text": "fixed"}
        ]),
    );
    let (sid, _, evs) = run(&d, session("bad", "mock:script=bad-args", &dir, json!({}))).await;
    assert_eq!(finish_of(&evs), "stop");
    let e = ends_by_id(&evs);
    assert_eq!(e.len(), 5);
    assert_eq!(e["m1"].0, "error");
    assert!(e["m1"].1.contains("not valid JSON"), "{}", e["m1"].1);
    assert!(
        e["m1"].1.contains("\"path\""),
        "the schema is shown: {}",
        e["m1"].1
    );
    assert!(e["m2"].1.contains("must be a JSON object"));
    assert_eq!(e["m3"].0, "error");
    assert!(e["m3"].1.contains("invalid input"), "{}", e["m3"].1);
    assert!(e["m4"].1.contains("unknown tool"));
    assert_eq!(e["m5"].0, "success");
    // The raw arguments are kept and sent back as the model wrote them.
    let msgs = stored(&d, &sid).await;
    assert_eq!(msgs[1]["blocks"][0]["input"], "{\"path\": \"a.txt\"");
    let bodies = bodies_for(&mock, "mock:script=bad-args");
    let m = bodies[1]["messages"].as_array().unwrap();
    assert_eq!(
        m[2]["tool_calls"][0]["function"]["arguments"],
        "{\"path\": \"a.txt\""
    );
}

#[tokio::test]
async fn session_tools_web_fetch_and_session_hooks() {
    let mock = MockServer::start().await.unwrap();
    let marks = tempfile::tempdir().unwrap();
    let extra = format!(
        r#"
# Hooks are confined like commands: they write their marks here.
[sandbox]
hook_writable_paths = ["{m}"]

[[engines.tinyelf.hooks]]
event = "SessionStart"
command = "cat >> {m}/start.jsonl; echo >> {m}/start.jsonl"

[[engines.tinyelf.hooks]]
event = "SessionEnd"
command = "cat >> {m}/end.jsonl; echo >> {m}/end.jsonl"
"#,
        m = marks.path().display()
    );
    let d = daemon_with(&mock, &extra);
    let dir = project();
    script(&mock, "hello", json!([{"text": "hi there"}]));
    let (other, _, _) = run(
        &d,
        session("remember 17", "mock:script=hello", &dir, json!({})),
    )
    .await;
    let health = format!("{}/healthz", mock.base_url());
    script(
        &mock,
        "tools",
        json!([{"toolCalls": [
            call("l1", "list_sessions", json!({})),
            call("r1", "read_session_messages", json!({"session_id": other})),
            call("w1", "web_fetch", json!({"url": health}))
        ]}, {"text": "ok"}]),
    );
    let (_, _, evs) = run(
        &d,
        session(
            "look",
            "mock:script=tools",
            &dir,
            json!({"permissionMode": "bypassPermissions"}),
        ),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop");
    let e = ends_by_id(&evs);
    assert_eq!(e["l1"].0, "success");
    assert!(e["l1"].1.contains(&other));
    assert!(e["l1"].1.contains("(this session)"));
    assert_eq!(e["r1"].0, "success");
    assert!(e["r1"].1.contains("[user] remember 17"), "{}", e["r1"].1);
    assert!(e["r1"].1.contains("[assistant] hi there"));
    // The mock listens on loopback: refused by default.
    assert_eq!(e["w1"].0, "error");
    assert!(e["w1"].1.contains("non-public address"), "{}", e["w1"].1);
    // SessionStart and SessionEnd ran once per run with the run's description.
    let start = wait_for_file(&marks.path().join("start.jsonl"), 2).await;
    assert!(start.contains("\"event\":\"SessionStart\""));
    let end = wait_for_file(&marks.path().join("end.jsonl"), 2).await;
    assert!(end.contains("\"finishReason\":\"stop\""));
}

#[tokio::test]
async fn web_fetch_reaches_private_addresses_only_when_allowed() {
    let mock = MockServer::start().await.unwrap();
    let d = daemon_with(
        &mock,
        "[engines.tinyelf]\nweb_fetch_allow_private = true\nweb_fetch_max_bytes = 1\n",
    );
    let dir = project();
    let health = format!("{}/healthz", mock.base_url());
    script(
        &mock,
        "fetch",
        json!([{"toolCalls": [call("w1", "web_fetch", json!({"url": health}))]}, {"text": "ok"}]),
    );
    let (_, _, evs) = run(
        &d,
        session(
            "get",
            "mock:script=fetch",
            &dir,
            json!({"permissionMode": "bypassPermissions"}),
        ),
    )
    .await;
    let e = ends_by_id(&evs);
    assert_eq!(e["w1"].0, "success", "{e:?}");
    assert!(e["w1"].1.starts_with('o'), "{}", e["w1"].1);
    assert!(e["w1"].1.contains("body cut at 1 bytes"), "{}", e["w1"].1);
}

#[tokio::test]
async fn native_search_calls_nobody_asked_the_provider_for_are_errors_not_searches() {
    let mock = MockServer::start().await.unwrap();
    let extra = r#"
[[engines.tinyelf.hooks]]
event = "PreToolUse"
command = '''cat > /dev/null; echo '{"decision":"deny","reason":"hook says no"}' '''
"#;
    let d = daemon_with(&mock, extra);
    let dir = project();
    script(
        &mock,
        "search",
        json!([{"toolCalls": [
            call("n1", "web_search", json!({"query": "rust"})),
            call("n2", "google_search", json!({"q": "rust"})),
            call("n3", "read_file", json!({"path": "a.txt"})),
            call("n4", "some_search", json!({}))
        ]}, {"text": "ok"}]),
    );
    let (_, _, evs) = run(&d, session("s", "mock:script=search", &dir, json!({}))).await;
    assert_eq!(finish_of(&evs), "stop");
    let e = ends_by_id(&evs);
    // No provider was asked to search: the model is told so, never that a search ran.
    for id in ["n1", "n2"] {
        assert_eq!(e[id].0, "error", "{e:?}");
        assert!(
            e[id]
                .1
                .contains("did not ask the provider to search: nothing was searched"),
            "{}",
            e[id].1
        );
    }
    // A local tool meets the hook; an unknown name is an error, not a skip.
    assert_eq!(e["n3"].0, "denied");
    assert!(e["n3"].1.contains("hook says no"));
    assert_eq!(e["n4"].0, "error");
    assert!(e["n4"].1.contains("unknown tool"));
    assert!(of(&evs, "permissionRequest").is_empty());
}

#[tokio::test]
async fn a_session_without_a_project_runs_but_its_file_and_shell_tools_refuse() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    script(
        &mock,
        "noproj",
        json!([
            {"toolCalls": [call("g1", "glob", json!({"pattern": "**/*.toml"})),
                           call("a1", "list_sessions", json!({}))]},
            {"text": "done"}
        ]),
    );
    let (sid, _, evs) = run(
        &d,
        json!({"engine": "tinyelf", "prompt": "look around", "model": "mock:script=noproj",
               "permissionMode": "bypassPermissions"}),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop", "{evs:?}");
    let by_id = ends_by_id(&evs);
    assert_eq!(by_id["g1"].0, "denied", "{by_id:?}");
    assert!(by_id["g1"].1.contains("has no projectPath"), "{by_id:?}");
    // A tool that needs no folder still runs.
    assert_ne!(by_id["a1"].0, "denied", "{by_id:?}");
    // The system prompt says there is no project instead of naming the daemon's directory.
    let system = bodies_for(&mock, "mock:script=noproj")[0]["messages"][0]["content"].to_string();
    assert!(system.contains("Project directory: none"), "{system}");
    let msgs = stored(&d, &sid).await;
    assert_eq!(roles(&msgs).first(), Some(&"user"));
    assert_eq!(
        msgs.last().unwrap()["blocks"][0]["text"],
        "done",
        "{msgs:?}"
    );
}

#[tokio::test]
async fn web_search_asks_the_configured_backend_and_answers_title_url_and_snippet() {
    let mock = MockServer::start().await.unwrap();
    let base = mock.base_url();
    // SearXNG: the results of the query, through the pipeline like any tool.
    let d = daemon_with(
        &mock,
        &format!("[tools.web_search]\nbackend = \"searxng\"\nurl = \"{base}\"\nmax_results = 2\n"),
    );
    let dir = project();
    script(
        &mock,
        "searching",
        json!([{"toolCalls": [
            call("s1", "web_search", json!({"query": "rust async"})),
            call("s2", "web_search", json!({"query": "fail"}))
        ]}, {"text": "found"}]),
    );
    let (_, _, evs) = run(
        &d,
        session(
            "look it up",
            "mock:script=searching",
            &dir,
            bypass(json!({})),
        ),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop", "{:?}", types(&evs));
    let e = ends_by_id(&evs);
    assert_eq!(e["s1"].0, "success", "{e:?}");
    assert_eq!(
        e["s1"].1,
        "Results for \"rust async\":\n\n\
         1. Result 1 for rust async\n   https://example.com/search/1?q=rust async\n   Snippet 1 about rust async\n\n\
         2. Result 2 for rust async\n   https://example.com/search/2?q=rust async\n   Snippet 2 about rust async\n"
    );
    assert_eq!(e["s2"].0, "error");
    assert!(e["s2"].1.contains("HTTP 500"), "{}", e["s2"].1);
    // The model was offered the tool.
    let bodies = bodies_for(&mock, "mock:script=searching");
    assert!(offered_tools(&bodies[0]).contains(&"web_search"));

    // Brave with its key from the daemon's environment; without the key, the call says which
    // variable to set.
    let brave = |key: Option<&str>| {
        let mut env = Vec::new();
        if let Some(k) = key {
            env.push(("SEARCH_TEST_KEY".to_string(), k.to_string()));
        }
        Daemon::start(
            &mock,
            Opts {
                extra_toml: format!(
                    "[tools.web_search]\nbackend = \"brave\"\nurl = \"{base}\"\n\
                     api_key_env = \"SEARCH_TEST_KEY\"\n"
                ),
                env,
                ..Opts::default()
            },
        )
    };
    script(
        &mock,
        "brave",
        json!([{"toolCalls": [call("b1", "web_search", json!({"query": "tokio", "max_results": 1}))]}, {"text": "ok"}]),
    );
    let d = brave(Some("k-123"));
    let (_, _, evs) = run(
        &d,
        session("s", "mock:script=brave", &dir, bypass(json!({}))),
    )
    .await;
    let e = ends_by_id(&evs);
    assert_eq!(e["b1"].0, "success", "{e:?}");
    assert!(e["b1"].1.contains("1. Result 1 for tokio"), "{}", e["b1"].1);
    assert!(!e["b1"].1.contains("2. "), "{}", e["b1"].1);
    script(
        &mock,
        "brave-nokey",
        json!([{"toolCalls": [call("b2", "web_search", json!({"query": "tokio"}))]}, {"text": "ok"}]),
    );
    let d = brave(None);
    let (_, _, evs) = run(
        &d,
        session("s", "mock:script=brave-nokey", &dir, bypass(json!({}))),
    )
    .await;
    let e = ends_by_id(&evs);
    assert_eq!(e["b2"].0, "error");
    assert!(e["b2"].1.contains("set SEARCH_TEST_KEY"), "{}", e["b2"].1);

    // Without [tools.web_search] there is no such tool to offer.
    let d = Daemon::start(&mock, Opts::default());
    script(&mock, "plain", json!([{"text": "hi"}]));
    run(&d, session("s", "mock:script=plain", &dir, json!({}))).await;
    let bodies = bodies_for(&mock, "mock:script=plain");
    assert!(!offered_tools(&bodies[0]).contains(&"web_search"));

    // A backend that cannot be used stops the daemon at start, saying why.
    let out = Daemon::start_refused(
        &tempfile::tempdir().unwrap().keep(),
        &mock,
        Opts {
            extra_toml: "[tools.web_search]\nbackend = \"searxng\"\n".into(),
            ..Opts::default()
        },
    );
    assert!(
        out.contains("tools.web_search.url is required for the searxng backend"),
        "{out}"
    );
}
