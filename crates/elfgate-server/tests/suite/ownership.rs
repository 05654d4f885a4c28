//! Sessions belong to whoever created them: the owner, the team and the visibility are shown on
//! the session and in the list; a list holds only what the key may see, page by page; another's
//! session is answered as a missing one.

use crate::common;

use common::{Daemon, Opts, chat};
use elfgate_mockllm::MockServer;
use elfgate_test_support::keys::key_body;
use serde_json::{Value, json};

fn listed(list: &Value) -> Vec<String> {
    list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_session_shows_its_owner_and_a_list_holds_only_what_the_key_sees() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let alice = d.as_key(&d.create_key(key_body("alice", "a", "member")).await);
    let bob_key = d.create_key(key_body("bob", "a", "member")).await;
    let bob = d.as_key(&bob_key);
    let carol_key = d.create_key(key_body("carol", "b", "member")).await;
    let carol = d.as_key(&carol_key);

    // A visibility that is not one is refused, naming the field.
    let mut bad = chat("hi", "mock:tokens=2");
    bad["visibility"] = json!("public");
    let (s, e) = alice.post("/v1/sessions", bad).await;
    assert_eq!(s, 422, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("visibility"),
        "{e}"
    );

    let mut private = chat("hi", "mock:tokens=2");
    private["visibility"] = json!("private");
    let (mine, _) = alice.create(private).await;
    let (shared, _) = alice.create(chat("hi", "mock:tokens=2")).await;
    let (roots, _) = d.create(chat("hi", "mock:tokens=2")).await;

    let (s, v) = alice.get(&format!("/v1/sessions/{mine}")).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        (&v["owner"], &v["team"], &v["visibility"]),
        (&json!("alice"), &json!("a"), &json!("private"))
    );
    // Without a visibility: [auth] default_visibility, team.
    let (_, v) = alice.get(&format!("/v1/sessions/{shared}")).await;
    assert_eq!(v["visibility"], "team", "{v}");
    let (_, v) = d.get(&format!("/v1/sessions/{roots}")).await;
    assert_eq!(
        (&v["owner"], &v["team"], &v["visibility"]),
        (&json!("root"), &json!("root"), &json!("team"))
    );

    // Each list holds what its key sees, newest first; the root key's holds all.
    let (_, list) = alice.get("/v1/sessions").await;
    assert_eq!(listed(&list), [shared.as_str(), mine.as_str()]);
    assert_eq!(list["sessions"][1]["owner"], "alice", "{list}");
    let (_, list) = bob.get("/v1/sessions").await;
    assert_eq!(listed(&list), [shared.as_str()]);
    let (_, list) = carol.get("/v1/sessions").await;
    assert!(listed(&list).is_empty(), "{list}");
    let (_, list) = d.get("/v1/sessions").await;
    assert_eq!(
        listed(&list),
        [roots.as_str(), shared.as_str(), mine.as_str()]
    );
    // A page of one: full, and the cursor goes on from the last one shown.
    let (_, page) = alice.get("/v1/sessions?limit=1").await;
    assert_eq!(listed(&page), [shared.as_str()]);
    let cursor = page["nextCursor"].as_str().unwrap();
    let (_, page) = alice
        .get(&format!("/v1/sessions?limit=1&cursor={cursor}"))
        .await;
    assert_eq!(listed(&page), [mine.as_str()]);

    // Another's private session reads exactly as an id that does not exist.
    let (s, hidden) = bob.get(&format!("/v1/sessions/{mine}")).await;
    let missing_id = "0190e4a0-0000-7000-8000-000000000000";
    let (s2, missing) = bob.get(&format!("/v1/sessions/{missing_id}")).await;
    assert_eq!((s, s2), (404, 404), "{hidden} {missing}");
    assert_eq!(
        hidden["error"]["message"]
            .as_str()
            .unwrap()
            .replace(&mine, "ID"),
        missing["error"]["message"]
            .as_str()
            .unwrap()
            .replace(missing_id, "ID")
    );
}

#[tokio::test]
async fn a_workflow_is_its_teams_its_runs_sessions_too_and_a_keys_scope_bounds_it() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let alice = d.as_key(&d.create_key(key_body("alice", "a", "member")).await);
    let mut runner_body = key_body("rudi", "a", "member");
    runner_body["scopes"] = json!({"workflows": "run"});
    let rudi = d.as_key(&d.create_key(runner_body).await);
    let carol = d.as_key(&d.create_key(key_body("carol", "b", "member")).await);
    let def = |name: &str| {
        json!({"name": name, "steps": [
            {"id": "talk", "model": {"model": "mock:tokens=2", "prompt": "Hi."}}
        ]})
    };

    let (s, w) = alice.post("/v1/workflows", def("notes")).await;
    assert_eq!(s, 201, "{w}");
    // A key that may only run: refused creating, naming the scope; its team's runs start.
    let (s, e) = rudi.post("/v1/workflows", def("more-notes")).await;
    assert_eq!(s, 403, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("workflows:"),
        "{e}"
    );
    let (s, started) = rudi.post("/v1/workflows/notes/runs", json!({})).await;
    assert_eq!(s, 201, "{started}");
    let sid = started["sessionId"].as_str().unwrap();
    // The run's session is the workflow's team's, owned by who started it.
    let (_, session) = alice.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(
        (&session["owner"], &session["team"], &session["visibility"]),
        (&json!("rudi"), &json!("a"), &json!("team"))
    );

    // Another team sees neither the workflow nor its run's session.
    let (_, list) = carol.get("/v1/workflows").await;
    assert_eq!(list["workflows"], json!([]), "{list}");
    for path in [
        "/v1/workflows/notes".to_string(),
        format!("/v1/sessions/{sid}"),
    ] {
        let (s, e) = carol.get(&path).await;
        assert_eq!(s, 404, "{path}: {e}");
    }
    let (s, e) = carol.post("/v1/workflows/notes/runs", json!({})).await;
    assert_eq!(s, 404, "{e}");
    let (_, list) = alice.get("/v1/workflows").await;
    assert_eq!(list["workflows"][0]["name"], "notes", "{list}");
}
