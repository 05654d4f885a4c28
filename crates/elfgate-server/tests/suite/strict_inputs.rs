//! Inputs that used to fail open: a field the API does not know is a 422 naming it (never
//! ignored), the specification's `channelUserPermissions` is `channelPermissions` and binds the
//! whole session (later runs and tool runs included), tool runs keep to the session's
//! enabledTools, engineConfig's numbers have bounds, and one projectPath check holds for every
//! engine.

use crate::common;
use crate::scripted;

use common::{Daemon, Opts, chat};
use elfgate_mockllm::MockServer;
use elfgate_test_support::router::InProcess;
use scripted::{
    bypass, call, ends_by_id, finish_of, project, resume, run, script, session, tool_run as tool,
};
use serde_json::{Value, json};

fn message_of(v: &Value) -> &str {
    v["error"]["message"].as_str().unwrap_or_default()
}

async fn session_count(d: &Daemon) -> usize {
    let (st, v) = d.get("/v1/sessions").await;
    assert_eq!(st, 200, "{v}");
    v["sessions"].as_array().unwrap().len()
}

/// In-process (no daemon binary): what a request to create a session answers needs no process.
#[tokio::test]
async fn a_new_sessions_unknown_field_or_wrong_type_is_refused_by_name_and_stores_nothing() {
    let mock = MockServer::start().await.unwrap();
    let d = InProcess::start(&mock, "").await;
    let refused: [(Value, &str); 6] = [
        (
            json!({"engine": "chat", "prompt": "hi", "model": "mock", "bogusField": 1}),
            "bogusField",
        ),
        // The renamed field's own misspelling, and a nested one.
        (
            json!({"engine": "chat", "prompt": "hi", "channelPermission": {"canUseTool": false}}),
            "channelPermission",
        ),
        (
            json!({"engine": "chat", "prompt": "hi", "channelPermissions": {"canUseTools": false}}),
            "canUseTools",
        ),
        // Both names of the renamed field: which one holds is not for the daemon to guess.
        (
            json!({"engine": "chat", "prompt": "hi", "channelPermissions": {"canUseTool": false},
                   "channelUserPermissions": {"canUseTool": true}}),
            "channelPermissions",
        ),
        (
            json!({"engine": "chat", "prompt": "hi",
                   "attachments": [{"mediaType": "text/plain", "text": "x", "size": 1}]}),
            "size",
        ),
        (
            json!({"engine": "chat", "prompt": "hi", "engineConfig": {"maxIteration": 3}}),
            "maxIteration",
        ),
    ];
    for (body, field) in refused {
        let a = d.post("/v1/sessions", &body).await;
        assert_eq!(a.status, 422, "{body} -> {a:?}");
        assert_eq!(a.body["error"]["code"], "unprocessable", "{a:?}");
        assert!(message_of(&a.body).contains(field), "{body} -> {a:?}");
    }
    // A wrong type is still a bad body (400), naming the field too.
    let a = d
        .post("/v1/sessions", &json!({"engine": "chat", "prompt": 5}))
        .await;
    assert_eq!(a.status, 400, "{a:?}");
    assert!(
        message_of(&a.body).contains("prompt") || message_of(&a.body).contains("string"),
        "{a:?}"
    );
    let list = d.get("/v1/sessions").await;
    assert_eq!(list.status, 200, "{list:?}");
    assert_eq!(
        list.body["sessions"].as_array().map(Vec::len),
        Some(0),
        "a refused request stored a session: {list:?}"
    );
}

#[tokio::test]
async fn every_later_native_body_refuses_an_unknown_field_by_name_and_changes_nothing() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();
    let (sid, run1) = d.create(chat("hi", "mock:tokens=2")).await;
    d.events(&sid, None).await.until_complete(&run1).await;
    let (_, before) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    let later: [(String, Value, &str); 4] = [
        (
            format!("/v1/sessions/{sid}/messages"),
            json!({"prompt": "again", "onBusy": "enqueue", "priority": 1}),
            "priority",
        ),
        (
            format!("/v1/sessions/{sid}/interrupt"),
            json!({"wait": true, "force": true}),
            "force",
        ),
        (
            format!("/v1/sessions/{sid}/permissions/req-1"),
            json!({"decision": "allow", "reason": "fine"}),
            "reason",
        ),
        (
            format!("/v1/sessions/{sid}/tools/read_file"),
            json!({"arguments": {}, "timeout": 5}),
            "timeout",
        ),
    ];
    for (path, body, field) in later {
        let (st, v) = d.post(&path, body.clone()).await;
        assert_eq!(st, 422, "{path} {body} -> {v}");
        assert!(message_of(&v).contains(field), "{path} {body} -> {v}");
    }
    let (_, after) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    assert_eq!(before, after, "a refused prompt changed the history");

    // The specification's name is accepted where the API renamed the field.
    let (st, v) = d
        .post(
            "/v1/sessions",
            session(
                "hi",
                "mock:tokens=1",
                &dir,
                json!({"channelUserPermissions": {"canUseTool": true}}),
            ),
        )
        .await;
    assert_eq!(st, 201, "{v}");
}

#[tokio::test]
async fn channel_user_permissions_bind_every_later_run_and_tool_run_until_changed() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();
    for name in ["chan-1", "chan-2", "chan-3"] {
        script(
            &mock,
            name,
            json!([{"toolCalls": [call("r", "read_file", json!({"path": "a.txt"}))]},
                   {"text": "done"}]),
        );
    }
    // The specification's field name, with every permission prompt bypassed: still no tool.
    let (sid, _, evs) = run(
        &d,
        session(
            "read",
            "mock:script=chan-1",
            &dir,
            bypass(json!({"channelUserPermissions": {"canUseTool": false}})),
        ),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop");
    let e = ends_by_id(&evs);
    assert_eq!(e["r"].0, "denied", "{e:?}");
    assert!(e["r"].1.contains("canUseTool"), "{e:?}");
    let (_, s) = d.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(
        s["engineConfig"]["channelPermissions"]["canUseTool"], false,
        "{s}"
    );

    // A later prompt that says nothing about them keeps them.
    let (run2, evs) = resume(
        &d,
        &sid,
        json!({"prompt": "read", "model": "mock:script=chan-2"}),
    )
    .await;
    let mine: Vec<_> = evs.iter().filter(|e| e.run() == run2).cloned().collect();
    let e = ends_by_id(&mine);
    assert_eq!(
        e["r"].0, "denied",
        "a later run ran what the first forbade: {e:?}"
    );

    // So does a tool run.
    let (st, r) = tool(&d, &sid, "read_file", json!({"path": "a.txt"})).await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["status"], "denied", "{r}");
    assert!(r["content"].as_str().unwrap().contains("canUseTool"), "{r}");

    // An explicit change is stored and holds for what follows.
    let (run3, evs) = resume(
        &d,
        &sid,
        json!({"prompt": "read", "model": "mock:script=chan-3",
               "channelPermissions": {"canUseTool": true}}),
    )
    .await;
    let mine: Vec<_> = evs.iter().filter(|e| e.run() == run3).cloned().collect();
    assert_eq!(ends_by_id(&mine)["r"].0, "success");
    let (st, r) = tool(&d, &sid, "read_file", json!({"path": "a.txt"})).await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["status"], "success", "{r}");
    let (_, s) = d.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(s["engineConfig"]["channelPermissions"]["canUseTool"], true);
}

#[tokio::test]
async fn tool_runs_keep_to_the_sessions_enabled_tools() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();
    let (sid, _, evs) = run(
        &d,
        session(
            "hi",
            "mock:tokens=1",
            &dir,
            bypass(json!({"engineConfig": {"enabledTools": ["list_dir"]}})),
        ),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop");
    for (name, args) in [
        ("shell", json!({"command": "echo ran > ran.txt"})),
        (
            "edit_file",
            json!({"path": "a.txt", "old_string": "hello", "new_string": "bye"}),
        ),
        ("write_file", json!({"path": "w.txt", "content": "w"})),
    ] {
        let (st, v) = tool(&d, &sid, name, args).await;
        assert_eq!(st, 422, "{name} -> {v}");
        assert!(message_of(&v).contains("enabledTools"), "{name} -> {v}");
        assert!(message_of(&v).contains(name), "{name} -> {v}");
    }
    assert!(!dir.join("ran.txt").exists());
    assert!(!dir.join("w.txt").exists());
    assert!(
        std::fs::read_to_string(dir.join("a.txt"))
            .unwrap()
            .starts_with("hello")
    );
    let (st, v) = tool(&d, &sid, "list_dir", json!({})).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["status"], "success", "{v}");
    assert!(v["content"].as_str().unwrap().contains("a.txt"), "{v}");
    let (st, v) = tool(&d, &sid, "no_such_tool", json!({})).await;
    assert_eq!(st, 404, "{v}");
}

/// In-process: the bounds are checked before anything is stored or started.
#[tokio::test]
async fn engine_config_numbers_outside_their_bounds_are_422_on_a_new_session() {
    let mock = MockServer::start().await.unwrap();
    let d = InProcess::start(&mock, "").await;
    let dir = project();
    for (key, value) in [
        ("permissionTimeout", json!(9_223_372_036_854_775_807_u64)),
        ("toolExecutionTimeout", json!(0)),
        ("maxIterations", json!(0)),
        ("temperature", json!(9.5)),
        ("maxLlmRetries", json!(11)),
        ("maxHistory", json!(0)),
    ] {
        let body = session(
            "hi",
            "mock:tokens=1",
            &dir,
            json!({"engineConfig": {key: value}}),
        );
        let a = d.post("/v1/sessions", &body).await;
        assert_eq!(a.status, 422, "{key}={value} -> {a:?}");
        assert!(message_of(&a.body).contains(key), "{key} -> {a:?}");
        assert!(message_of(&a.body).contains("outside"), "{key} -> {a:?}");
    }
    let list = d.get("/v1/sessions").await;
    assert_eq!(list.body["sessions"].as_array().map(Vec::len), Some(0));
}

#[tokio::test]
async fn engine_config_numbers_outside_their_bounds_on_a_later_prompt_are_422_and_it_still_runs() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();
    // The same on a later prompt, and the session still runs.
    let (sid, _, evs) = run(&d, session("hi", "mock:tokens=1", &dir, json!({}))).await;
    assert_eq!(finish_of(&evs), "stop");
    let (st, v) = d
        .post(
            &format!("/v1/sessions/{sid}/messages"),
            json!({"prompt": "again", "engineConfig": {"permissionTimeout": 9_223_372_036_854_775_807_u64}}),
        )
        .await;
    assert_eq!(st, 422, "{v}");
    let (run2, evs) = resume(
        &d,
        &sid,
        json!({"prompt": "again", "model": "mock:tokens=1"}),
    )
    .await;
    assert_eq!(
        evs.iter().rfind(|e| e.run() == run2).unwrap().data["finishReason"],
        "stop"
    );
}

#[tokio::test]
async fn one_project_path_check_holds_for_every_engine() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let work = tempfile::tempdir().unwrap();
    let etc_link = work.path().join("etc-link");
    std::os::unix::fs::symlink("/etc", &etc_link).unwrap();
    let data_link = work.path().join("data-link");
    std::os::unix::fs::symlink(&d.dir, &data_link).unwrap();
    let file = work.path().join("plain.txt");
    std::fs::write(&file, "x").unwrap();
    let bad = [
        (d.dir.display().to_string(), "protected"),
        (data_link.display().to_string(), "protected"),
        (etc_link.display().to_string(), "protected"),
        (file.display().to_string(), "not a directory"),
        ("/nonexistent/elfgate-project".to_string(), "not usable"),
    ];
    for engine in ["tinyelf", "chat", "st-chat", "api"] {
        for (path, why) in &bad {
            let body = json!({"engine": engine, "prompt": "hi", "model": "mock:tokens=1",
                              "projectPath": path});
            let (st, v) = d.post("/v1/sessions", body).await;
            assert_eq!(st, 422, "{engine} {path} -> {v}");
            assert!(message_of(&v).contains("projectPath"), "{v}");
            assert!(message_of(&v).contains(why), "{engine} {path} -> {v}");
        }
    }
    assert_eq!(session_count(&d).await, 0);
    // A project that contains a deny zone is a project; the zone inside stays denied.
    let (st, v) = d
        .post(
            "/v1/sessions",
            json!({"engine": "chat", "prompt": "hi", "model": "mock:tokens=1", "projectPath": "/"}),
        )
        .await;
    assert_eq!(st, 201, "{v}");
}

#[tokio::test]
async fn a_prompt_carrying_the_daemons_token_or_a_providers_key_is_refused_unsent() {
    let mock = MockServer::start().await.unwrap();
    let token = "daemon-token-7f3a9c2e";
    let key = "sk-provider-key-5b8d1e";
    let d = Daemon::start(
        &mock,
        Opts {
            token: Some(token.into()),
            env: vec![("OPENAI_API_KEY".into(), key.into())],
            ..Opts::default()
        },
    );
    for (prompt, says) in [
        (
            format!("here is my token {token}, use it"),
            "this daemon's API token".to_string(),
        ),
        (
            format!("key={key}"),
            "provider 'openai' (OPENAI_API_KEY)".to_string(),
        ),
    ] {
        let (status, body) = d.post("/v1/sessions", chat(&prompt, "mock:tokens=2")).await;
        assert_eq!(status, 422, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("prompt: ") && message.contains(&says),
            "{message}"
        );
        assert!(
            !message.contains(token) && !message.contains(key),
            "{message}"
        );
    }
    // Nothing was stored or sent upstream.
    let (_, list) = d.get("/v1/sessions").await;
    assert_eq!(list["sessions"].as_array().unwrap().len(), 0, "{list}");
    assert!(mock.requests().is_empty());
    // A later prompt of a session is scanned too; an ordinary one goes through.
    let (sid, run) = d.create(chat("hello", "mock:tokens=2")).await;
    d.all_events_until_complete_of(&sid, &run).await;
    let (status, body) = d
        .post(
            &format!("/v1/sessions/{sid}/messages"),
            json!({"prompt": format!("again {token}")}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    let (_, msgs) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    assert_eq!(msgs["messages"].as_array().unwrap().len(), 2, "{msgs}");
}
