//! The web console with a viewer's key, in headless Chromium (the console module's driver): it
//! shows the team's session, running, and offers no Stop that could work for it.

use crate::common;

use super::console::{driver, scenario};
use common::{Daemon, Opts};
use elfgate_mockllm::MockServer;
use serde_json::{Value, json};

/// `POST /v1/admin/keys` with the root key: the new key's secret.
async fn key(d: &Daemon, user: &str, team: &str, role: &str) -> String {
    let (status, v) = d
        .post(
            "/v1/admin/keys",
            json!({"name": user, "user": user, "team": team, "role": role, "expiresAt": null,
                   "scopes": {}}),
        )
        .await;
    assert_eq!(status, 201, "{v}");
    v["key"].as_str().unwrap().to_string()
}

/// `POST /v1/sessions` with `key`: the session's id.
async fn start_as(d: &Daemon, key: &str, body: Value) -> String {
    let r = d
        .anon
        .post(d.url("/v1/sessions"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let v: Value = r.json().await.unwrap();
    v["sessionId"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewers_console_shows_the_teams_session_and_no_stop_works_for_it() {
    let Some(driver) = driver() else { return };
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let alice = key(&d, "alice", "research", "member").await;
    let victor = key(&d, "victor", "research", "viewer").await;
    let bob = key(&d, "bob", "ops", "member").await;
    // Alice's session, shared with her team and running for long; bob's, of another team.
    let shared = start_as(
        &d,
        &alice,
        json!({"engine": "chat", "prompt": "a long story", "model": "mock:tokens=5000,delay_ms=20",
               "visibility": "team", "title": "research's story"}),
    )
    .await;
    let other = start_as(
        &d,
        &bob,
        json!({"engine": "chat", "prompt": "ops only", "model": "mock:tokens=1",
               "visibility": "team"}),
    )
    .await;

    let r = scenario(
        &driver,
        &d,
        "viewer",
        &[("TOKEN", victor.clone()), ("SESSION", shared.clone())],
    )
    .await;
    assert_eq!(r["principal"], "victor · research · viewer");
    let listed: Vec<&str> = r["listed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(listed.contains(&shared.as_str()), "{listed:?}");
    assert!(
        !listed.contains(&other.as_str()),
        "another team's session: {listed:?}"
    );
    assert_eq!(r["newSessionOffered"], 0);
    assert_eq!(r["stopButtons"], 0, "a viewer is offered a Stop");
    assert_eq!(r["composers"], 0);
    assert!(
        r["readOnly"].as_str().unwrap().contains("viewer"),
        "{}",
        r["readOnly"]
    );
    assert_eq!(r["interrupt"], 403, "the daemon let a viewer stop the run");
    assert_eq!(r["tokenKept"], true);
    assert_eq!(r["startForms"], 0);
    // The run went on: nothing the viewer did stopped it.
    assert_eq!(r["status"], "running");
    let (_, v) = d.get(&format!("/v1/sessions/{shared}")).await;
    assert_eq!(v["status"], "running", "{v}");
    let (status, _) = d.interrupt_and_wait(&shared).await;
    assert_eq!(status, 200);
}
