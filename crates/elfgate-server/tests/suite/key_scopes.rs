//! A key's scopes through the HTTP API, against the mock provider: each scope refuses what is
//! past it with 403 naming it (after agent profiles, aliases and defaults are applied), and lets
//! the rest through.

use crate::common;
use crate::scripted;

use common::{Daemon, Opts};
use elfgate_mockllm::MockServer;
use elfgate_test_support::keys::key_body;
use reqwest::Method;
use scripted::events::next_of;
use scripted::{call, project, script, session};
use serde_json::{Value, json};

/// A member key of user `user` (team `team`) with `scopes`, made by the root key; its secret.
async fn member_key(d: &Daemon, user: &str, team: &str, scopes: Value) -> String {
    let mut body = key_body(user, team, "member");
    body["scopes"] = scopes;
    d.create_key(body).await
}

async fn post_as(d: &Daemon, key: &str, path: &str, body: Value) -> (u16, Value) {
    d.as_key(key).post(path, body).await
}

/// A door's call with `key` as the bearer and one header of the daemon's own: its status and body.
async fn door_call(
    d: &Daemon,
    key: &str,
    path: &str,
    header: (&str, String),
    body: Value,
) -> (u16, Value) {
    let resp = d
        .as_key(key)
        .builder(Method::POST, path, Some(body))
        .header(header.0, header.1)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

/// The refusal of scope `scope`: 403 `forbidden`, the message and `error.scope` naming it.
fn assert_refused_by(status: u16, body: &Value, scope: &str) {
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "forbidden", "{body}");
    assert_eq!(body["error"]["scope"], scope, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("key scope '{scope}'")),
        "{message}"
    );
}

fn chat(model: &str) -> Value {
    json!({"engine": "chat", "prompt": "hi", "model": model})
}

#[tokio::test]
async fn a_key_limited_to_chat_cannot_start_tinyelf_anywhere() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let key = member_key(&d, "alice", "a", json!({"engines": ["chat"]})).await;
    let dir = project();
    let (status, body) = post_as(
        &d,
        &key,
        "/v1/sessions",
        session("go", "mock:tokens=1", &dir, json!({})),
    )
    .await;
    assert_refused_by(status, &body, "engines");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("does not allow engine 'tinyelf'"),
        "{body}"
    );
    // Nothing was stored for it.
    let (_, list) = d.get("/v1/sessions").await;
    assert_eq!(list["sessions"].as_array().unwrap().len(), 0, "{list}");
    // Its own engine goes.
    let (status, body) = post_as(&d, &key, "/v1/sessions", chat("mock:tokens=1")).await;
    assert_eq!(status, 201, "{body}");
    // A gateway door's engine route is the same engine.
    let (status, body) = post_as(
        &d,
        &key,
        "/v1/chat/completions",
        json!({"model": "elfgate:tinyelf:mock/mock:tokens=1",
               "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["type"], "permission_error", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("key scope 'engines'"),
        "{body}"
    );
}

#[tokio::test]
async fn a_project_outside_the_keys_roots_is_refused_symlinks_resolved() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("root");
    let inside = root.join("proj");
    let outside = base.path().join("outside");
    std::fs::create_dir_all(&inside).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    // A link inside the root that leads out of it.
    let escape = root.join("escape");
    std::os::unix::fs::symlink(&outside, &escape).unwrap();
    let key = member_key(
        &d,
        "alice",
        "a",
        json!({"projectRoots": [root.display().to_string()]}),
    )
    .await;
    let create = |dir: &std::path::Path| session("go", "mock:tokens=1", dir, json!({}));
    let (status, body) = post_as(&d, &key, "/v1/sessions", create(&inside)).await;
    assert_eq!(status, 201, "{body}");
    for dir in [&outside, &escape] {
        let (status, body) = post_as(&d, &key, "/v1/sessions", create(dir)).await;
        assert_refused_by(status, &body, "projectRoots");
    }
    // Through a door, the project header is held to the same roots.
    let ask = json!({"model": "elfgate:tinyelf:mock/mock:tokens=1",
                     "messages": [{"role": "user", "content": "hi"}]});
    // No project: tinyelf touches no files, so it goes.
    let (status, body) = post_as(&d, &key, "/v1/chat/completions", ask.clone()).await;
    assert_eq!(status, 200, "{body}");
    let project_header = ("x-elfgate-project-path", escape.display().to_string());
    let (status, body) = door_call(&d, &key, "/v1/chat/completions", project_header, ask).await;
    assert_eq!(status, 403, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("key scope 'projectRoots'") && message.contains("x-elfgate-project-path"),
        "{message}"
    );
}

#[tokio::test]
async fn bypass_permissions_is_refused_at_creation_as_a_prompt_override_and_from_a_profile() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: "[agents.yolo]\npermission_mode = \"bypassPermissions\"\n".into(),
            ..Default::default()
        },
    );
    let key = member_key(
        &d,
        "alice",
        "a",
        json!({"permissionModes": ["default", "acceptEdits", "plan"]}),
    )
    .await;
    let dir = project();
    let bypass = json!({"permissionMode": "bypassPermissions"});
    let (status, body) = post_as(
        &d,
        &key,
        "/v1/sessions",
        session("go", "mock:tokens=1", &dir, bypass.clone()),
    )
    .await;
    assert_refused_by(status, &body, "permissionModes");
    // The agent profile's mode is the session's: refused the same.
    let (status, body) = post_as(
        &d,
        &key,
        "/v1/sessions",
        session("go", "mock:tokens=1", &dir, json!({"agentId": "yolo"})),
    )
    .await;
    assert_refused_by(status, &body, "permissionModes");
    // A session in a mode it has, then a prompt asking for bypassPermissions.
    let (status, created) = post_as(
        &d,
        &key,
        "/v1/sessions",
        session("go", "mock:tokens=1", &dir, json!({})),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let sid = created["sessionId"].as_str().unwrap();
    let run = created["runId"].as_str().unwrap();
    d.events(sid, None).await.until_complete(run).await;
    let path = format!("/v1/sessions/{sid}/messages");
    let (status, body) = post_as(
        &d,
        &key,
        &path,
        json!({"prompt": "again", "permissionMode": "bypassPermissions"}),
    )
    .await;
    assert_refused_by(status, &body, "permissionModes");
    let (status, body) = post_as(&d, &key, &path, json!({"prompt": "again"})).await;
    assert_eq!(status, 202, "{body}");
    // A door's mode header likewise.
    let (status, body) = door_call(
        &d,
        &key,
        "/v1/messages",
        ("x-elfgate-permission-mode", "bypassPermissions".into()),
        json!({"model": "elfgate:tinyelf:mock/mock:tokens=1", "max_tokens": 10,
               "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["type"], "permission_error", "{body}");
}

#[tokio::test]
async fn provider_and_model_globs_hold_after_defaults_and_aliases() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: r#"
[aliases]
anthro = "mock-anthropic/mock:tokens=1"
chain = ["mock-anthropic/mock:tokens=1", "mock/mock:tokens=1"]
"#
            .into(),
            ..Default::default()
        },
    );
    let key = member_key(
        &d,
        "alice",
        "a",
        json!({"providers": ["mock-*"], "models": ["mock:tokens=*"]}),
    )
    .await;
    // No providerId: the default provider, `mock`, which `mock-*` does not match.
    let (status, body) = post_as(&d, &key, "/v1/sessions", chat("mock:tokens=1")).await;
    assert_refused_by(status, &body, "providers");
    let named = |model: &str| json!({"engine": "chat", "prompt": "hi", "model": model, "providerId": "mock-anthropic"});
    let (status, body) = post_as(&d, &key, "/v1/sessions", named("mock:tokens=1")).await;
    assert_eq!(status, 201, "{body}");
    let sid = body["sessionId"].as_str().unwrap().to_string();
    let (status, body) = post_as(&d, &key, "/v1/sessions", named("mock:script=x")).await;
    assert_refused_by(status, &body, "models");
    // No model: the provider's default_model (`mock`), which the glob does not match.
    let (status, body) = post_as(
        &d,
        &key,
        "/v1/sessions",
        json!({"engine": "chat", "prompt": "hi", "providerId": "mock-anthropic"}),
    )
    .await;
    assert_refused_by(status, &body, "models");
    // A prompt's overrides are held to the same globs.
    let path = format!("/v1/sessions/{sid}/messages");
    let (status, body) = post_as(
        &d,
        &key,
        &path,
        json!({"prompt": "again", "providerId": "mock", "onBusy": "enqueue"}),
    )
    .await;
    assert_refused_by(status, &body, "providers");
    let (status, body) = post_as(
        &d,
        &key,
        &path,
        json!({"prompt": "again", "model": "other", "onBusy": "enqueue"}),
    )
    .await;
    assert_refused_by(status, &body, "models");
    // At a door: an alias resolves to its routes, its fallbacks included.
    let ask =
        |model: &str| json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
    let (status, body) = post_as(&d, &key, "/v1/chat/completions", ask("anthro")).await;
    assert_eq!(status, 200, "{body}");
    for model in ["chain", "mock/mock:tokens=1"] {
        let (status, body) = post_as(&d, &key, "/v1/chat/completions", ask(model)).await;
        assert_eq!(status, 403, "{model}: {body}");
        assert_eq!(body["error"]["type"], "permission_error", "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("key scope 'providers' does not allow provider 'mock'"),
            "{body}"
        );
    }
    // The model list shows what the key may call.
    let (status, list) = d.as_key(&key).get("/v1/models").await;
    assert_eq!(status, 200, "{list}");
    let ids: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"anthro"), "{ids:?}");
    assert!(!ids.contains(&"chain"), "{ids:?}");
    assert!(!ids.contains(&"mock/mock"), "{ids:?}");
}

#[tokio::test]
async fn a_key_without_answer_permissions_watches_requests_but_cannot_answer() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let key = member_key(&d, "alice", "a", json!({"answerPermissions": false})).await;
    let dir = project();
    script(
        &mock,
        "scoped-perm",
        json!([
            {"toolCalls": [call("p1", "write_file", json!({"path": "one.txt", "content": "1"}))]},
            {"text": "written"}
        ]),
    );
    let (status, created) = post_as(
        &d,
        &key,
        "/v1/sessions",
        session("write", "mock:script=scoped-perm", &dir, json!({})),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let sid = created["sessionId"].as_str().unwrap();
    let run = created["runId"].as_str().unwrap();
    // The key watches its session's events, the permission request among them.
    let mut sse = d.as_key(&key).events(sid, None).await;
    let req = next_of(&mut sse, "permissionRequest").await;
    let rid = req.data["requestId"].as_str().unwrap();
    let path = format!("/v1/sessions/{sid}/permissions/{rid}");
    let (status, body) = post_as(&d, &key, &path, json!({"decision": "allow"})).await;
    assert_refused_by(status, &body, "answerPermissions");
    assert!(!dir.join("one.txt").exists());
    // The request is still open: a principal that may answer does.
    let (status, body) = d.post(&path, json!({"decision": "allow"})).await;
    assert_eq!(status, 200, "{body}");
    sse.until_complete(run).await;
    assert_eq!(std::fs::read_to_string(dir.join("one.txt")).unwrap(), "1");
}

#[tokio::test]
async fn scopes_are_checked_when_a_key_is_made_or_changed() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    for (scopes, field) in [
        (json!({"engines": ["chat", "tinyElf"]}), "scopes.engines[1]"),
        (json!({"models": ["gpt-*", "{oops"]}), "scopes.models[1]"),
        (json!({"providers": ["["]}), "scopes.providers[0]"),
        (
            json!({"projectRoots": ["relative/dir"]}),
            "scopes.projectRoots[0]",
        ),
    ] {
        let mut body = key_body("alice", "a", "member");
        body["scopes"] = scopes;
        let (status, answer) = d.post("/v1/admin/keys", body).await;
        assert_eq!(status, 422, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(field), "{message}");
    }
    let created = d.create_key_answer(key_body("alice", "a", "member")).await;
    let id = created["id"].as_str().unwrap();
    let root = d.as_key(d.token.as_deref().unwrap());
    let (status, answer) = root
        .patch(
            &format!("/v1/admin/keys/{id}"),
            json!({"scopes": {"engines": ["nope"]}}),
        )
        .await;
    assert_eq!(status, 422, "{answer}");
    let (status, answer) = root
        .patch(
            &format!("/v1/admin/keys/{id}"),
            json!({"scopes": {"engines": ["chat"]}}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
}

#[tokio::test]
async fn a_scopes_refusal_is_in_the_access_audit() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let mut body = key_body("alice", "a", "member");
    body["scopes"] = json!({"engines": ["chat"]});
    let created = d.create_key_answer(body).await;
    let key = created["key"].as_str().unwrap();
    let id = created["id"].as_str().unwrap();
    let dir = project();
    let (status, _) = post_as(
        &d,
        key,
        "/v1/sessions",
        session("go", "mock:tokens=1", &dir, json!({})),
    )
    .await;
    assert_eq!(status, 403);
    let (status, _) = post_as(
        &d,
        key,
        "/v1/messages",
        json!({"model": "elfgate:tinyelf", "max_tokens": 5,
               "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 403);
    // The audit's writer is a task: the entries come shortly after the answers.
    let deadline = tokio::time::Instant::now() + common::GUARD;
    let refusals = loop {
        let (status, audit) = d.get("/v1/admin/audit").await;
        assert_eq!(status, 200, "{audit}");
        let refusals: Vec<(Value, Value, Value, Value)> = audit["entries"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == "refused")
            .map(|e| {
                let field = |f: &str| e[f].clone();
                (
                    field("keyId"),
                    field("actor"),
                    field("route"),
                    field("reason"),
                )
            })
            .collect();
        if refusals.len() >= 2 || tokio::time::Instant::now() > deadline {
            break refusals;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let expected = |route: &str| {
        (
            json!(id),
            json!("alice"),
            json!(route),
            json!("scope:engines"),
        )
    };
    assert_eq!(
        refusals,
        [expected("POST /v1/messages"), expected("POST /v1/sessions")]
    );
}
