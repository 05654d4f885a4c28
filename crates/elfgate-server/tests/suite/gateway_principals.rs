//! The gateway doors act for their caller's key, taken as each API sends it: the session a call
//! starts is its key's user's, and another user cannot continue it (by `x-elfgate-session-id` or
//! `previous_response_id`): 404 in the door's own error shape, as if it did not exist.

use crate::common;

use common::{Daemon, Opts};
use elfgate_mockllm::MockServer;
use elfgate_test_support::keys::key_body;
use reqwest::Method;
use serde_json::{Value, json};

/// A member key of `user` in `team`; its secret.
async fn member_key(d: &Daemon, user: &str, team: &str) -> String {
    d.create_key(key_body(user, team, "member")).await
}

/// How a door's SDK sends its key.
#[derive(Clone, Copy, Debug)]
enum KeyAs {
    /// `Authorization: Bearer` (OpenAI's SDKs).
    Bearer,
    /// `x-api-key` (Anthropic's).
    XApiKey,
    /// `x-goog-api-key` (google-genai).
    GoogHeader,
    /// `?key=` in the URL (Gemini's REST clients).
    Query,
}

/// One door's call with `key` sent as its API sends it, continuing `session` when given.
async fn call(
    d: &Daemon,
    path: &str,
    key: &str,
    key_as: KeyAs,
    session: Option<&str>,
    body: &Value,
) -> (u16, Option<String>, Value) {
    let path = match key_as {
        KeyAs::Query => format!("{path}?key={key}"),
        _ => path.to_string(),
    };
    let mut req = d
        .anonymous()
        .builder(Method::POST, &path, Some(body.clone()));
    req = match key_as {
        KeyAs::Bearer => req.bearer_auth(key),
        KeyAs::XApiKey => req.header("x-api-key", key),
        KeyAs::GoogHeader => req.header("x-goog-api-key", key),
        KeyAs::Query => req,
    };
    if let Some(sid) = session {
        req = req.header("x-elfgate-session-id", sid);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let sid = resp
        .headers()
        .get("x-elfgate-session-id")
        .map(|v| v.to_str().unwrap().to_string());
    (status, sid, resp.json().await.unwrap())
}

/// One door: its path, its body, the ways its key comes, and how its 404 reads.
type DoorCase = (&'static str, Value, Vec<KeyAs>, fn(&Value) -> bool);

fn doors() -> Vec<DoorCase> {
    let messages = json!([{"role": "user", "content": "hi"}]);
    vec![
        (
            "/v1/chat/completions",
            json!({"model": "mock/mock:tokens=1", "messages": messages}),
            vec![KeyAs::Bearer],
            |b| b["error"]["type"] == "invalid_request_error" && b["error"]["message"].is_string(),
        ),
        (
            "/v1/responses",
            json!({"model": "mock/mock:tokens=1", "input": "hi"}),
            vec![KeyAs::Bearer],
            |b| b["error"]["type"] == "invalid_request_error" && b["error"]["message"].is_string(),
        ),
        (
            "/v1/messages",
            json!({"model": "mock/mock:tokens=1", "max_tokens": 10, "messages": messages}),
            vec![KeyAs::XApiKey, KeyAs::Bearer],
            |b| b["type"] == "error" && b["error"]["type"] == "not_found_error",
        ),
        (
            "/v1beta/models/mock/mock:tokens=1:generateContent",
            json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}),
            vec![KeyAs::GoogHeader, KeyAs::Query],
            |b| b["error"]["code"] == 404 && b["error"]["status"] == "NOT_FOUND",
        ),
    ]
}

#[tokio::test]
async fn each_door_gives_its_callers_session_to_its_key_and_refuses_anothers() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let alice = member_key(&d, "alice", "a").await;
    let bob = member_key(&d, "bob", "b").await;
    for (path, body, ways, is_not_found) in doors() {
        for key_as in ways {
            let what = format!("{path} with the key as {key_as:?}");
            let (status, sid, answer) = call(&d, path, &alice, key_as, None, &body).await;
            assert_eq!(status, 200, "{what}: {answer}");
            let sid = sid.unwrap();
            // The session is alice's: she sees it, bob does not, in the API too.
            let path_of = format!("/v1/sessions/{sid}");
            assert_eq!(d.as_key(&alice).get(&path_of).await.0, 200, "{what}");
            assert_eq!(d.as_key(&bob).get(&path_of).await.0, 404, "{what}");
            // Bob cannot continue it: 404 in the door's shape, nothing run.
            let runs_before = mock.requests().len();
            let (status, _, refusal) = call(&d, path, &bob, key_as, Some(&sid), &body).await;
            assert_eq!(status, 404, "{what}: {refusal}");
            assert!(is_not_found(&refusal), "{what}: {refusal}");
            assert_eq!(mock.requests().len(), runs_before, "{what}");
            // Alice can.
            let (status, again, answer) = call(&d, path, &alice, key_as, Some(&sid), &body).await;
            assert_eq!(status, 200, "{what}: {answer}");
            assert_eq!(again.as_deref(), Some(sid.as_str()));
        }
    }
    // Bob's own list holds none of alice's sessions.
    let resp = d
        .anon
        .get(d.url("/v1/sessions"))
        .bearer_auth(&bob)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let list: Value = resp.json().await.unwrap();
    assert_eq!(list["sessions"].as_array().unwrap().len(), 0, "{list}");
}

#[tokio::test]
async fn a_stored_response_of_another_user_is_unknown_to_previous_response_id() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let alice = member_key(&d, "alice", "a").await;
    let bob = member_key(&d, "bob", "b").await;
    let ask = |extra: Value| {
        let mut b = json!({"model": "mock/mock:tokens=1", "input": "the secret is 42"});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    let (status, _, first) = call(
        &d,
        "/v1/responses",
        &alice,
        KeyAs::Bearer,
        None,
        &ask(json!({})),
    )
    .await;
    assert_eq!(status, 200, "{first}");
    let prev = first["id"].as_str().unwrap().to_string();
    let runs_before = mock.requests().len();
    // Kept or not (`store: false` reads the stored turns into a session of its own), bob's call
    // is answered as for an unknown response, and nothing of alice's goes upstream.
    for store in [true, false] {
        let body = ask(json!({"previous_response_id": prev, "store": store}));
        let (status, _, refusal) =
            call(&d, "/v1/responses", &bob, KeyAs::Bearer, None, &body).await;
        assert_eq!(status, 404, "store {store}: {refusal}");
        assert_eq!(
            refusal["error"]["type"], "invalid_request_error",
            "{refusal}"
        );
        assert!(
            refusal["error"]["message"]
                .as_str()
                .unwrap()
                .contains("previous_response_id"),
            "{refusal}"
        );
    }
    assert_eq!(mock.requests().len(), runs_before);
    // Alice continues her own.
    let body = ask(json!({"previous_response_id": prev}));
    let (status, _, answer) = call(&d, "/v1/responses", &alice, KeyAs::Bearer, None, &body).await;
    assert_eq!(status, 200, "{answer}");
}
