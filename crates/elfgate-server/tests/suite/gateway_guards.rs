//! What a front door's request may not do to what is stored, or send upstream: `store: false`
//! deletes nothing stored before its call, and every text a request sends is scanned for the
//! daemon's token (a run token's own limits are in cli_engine).

use crate::common;

use common::{Daemon, GUARD, Opts};
use elfgate_mockllm::MockServer;
use serde_json::{Value, json};

async fn post(d: &Daemon, path: &str, body: Value) -> reqwest::Response {
    d.http.post(d.url(path)).json(&body).send().await.unwrap()
}

fn session_of(resp: &reqwest::Response) -> String {
    resp.headers()["x-elfgate-session-id"]
        .to_str()
        .unwrap()
        .to_string()
}

/// The stored messages of a session.
async fn messages(d: &Daemon, sid: &str) -> Value {
    let (status, v) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    assert_eq!(status, 200, "{v}");
    v
}

/// Waits until GET /v1/sessions/{sid} is 404.
async fn until_deleted(d: &Daemon, sid: &str) {
    let deadline = tokio::time::Instant::now() + GUARD;
    while d.get(&format!("/v1/sessions/{sid}")).await.0 != 404 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{sid} is still there"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// `store: false` with `previous_response_id` or `x-elfgate-session-id` runs the call as a session
/// of its own, deleted once answered: the continued session (a native one, or a door's stored
/// response) stays whole, its stored turns still reach the provider, and the new response is not
/// kept. An engine route cannot continue a session without keeping its run: 400 naming `store`.
#[tokio::test]
async fn store_false_keeps_the_new_response_out_and_deletes_nothing_before_it() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let (sid, run) = d
        .create(json!({"engine": "chat", "prompt": "the word is ferrule",
                       "model": "mock:tokens=2"}))
        .await;
    d.all_events_until_complete_of(&sid, &run).await;
    let before = messages(&d, &sid).await;
    assert_eq!(before["messages"].as_array().unwrap().len(), 2, "{before}");

    // previous_response_id naming the native session's run, not streamed.
    let resp = post(
        &d,
        "/v1/responses",
        json!({"model": "mock/mock:tokens=3", "input": "which word?", "store": false,
               "previous_response_id": format!("resp_{sid}_{run}")}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let own = session_of(&resp);
    assert_ne!(own, sid, "the call runs as a session of its own");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["status"], "completed", "{body}");
    let sent = mock.requests().last().unwrap().body.to_string();
    assert!(
        sent.contains("the word is ferrule") && sent.contains("which word?"),
        "{sent}"
    );
    until_deleted(&d, &own).await;
    assert_eq!(messages(&d, &sid).await, before);
    // The new response was not kept.
    let (status, v) = d
        .post(
            "/v1/responses",
            json!({"model": "mock/mock:tokens=1", "input": "more",
                   "previous_response_id": body["id"]}),
        )
        .await;
    assert_eq!(status, 404, "{v}");

    // A door's stored response, continued with store: false in a stream; then by the header.
    let resp = post(
        &d,
        "/v1/responses",
        json!({"model": "mock/mock:tokens=2", "input": "keep this one"}),
    )
    .await;
    let kept = session_of(&resp);
    let first: Value = resp.json().await.unwrap();
    let kept_before = messages(&d, &kept).await;
    let resp = post(
        &d,
        "/v1/responses",
        json!({"model": "mock/mock:tokens=2", "input": "then this", "store": false,
               "stream": true, "previous_response_id": first["id"]}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let own = session_of(&resp);
    let text = resp.text().await.unwrap();
    assert!(text.contains("response.completed"), "{text}");
    let resp = d
        .http
        .post(d.url("/v1/responses"))
        .header("x-elfgate-session-id", &sid)
        .json(&json!({"model": "mock/mock:tokens=2", "input": "by header", "store": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let by_header = session_of(&resp);
    assert_ne!(by_header, sid);
    resp.text().await.unwrap();
    until_deleted(&d, &own).await;
    until_deleted(&d, &by_header).await;
    assert_eq!(messages(&d, &kept).await, kept_before);
    assert_eq!(messages(&d, &sid).await, before);
    // An unknown session named by the header is still 404, with store: false too.
    let resp = d
        .http
        .post(d.url("/v1/responses"))
        .header(
            "x-elfgate-session-id",
            "00000000-0000-4000-8000-000000000000",
        )
        .json(&json!({"model": "mock/mock:tokens=2", "input": "x", "store": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);

    // An engine route: refused by name, nothing deleted.
    let resp = post(
        &d,
        "/v1/responses",
        json!({"model": "elfgate:tinyelf", "input": "an agent's turn"}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let agent = session_of(&resp);
    let agent_first: Value = resp.json().await.unwrap();
    let agent_before = messages(&d, &agent).await;
    let (status, v) = d
        .post(
            "/v1/responses",
            json!({"model": "elfgate:tinyelf", "input": "again", "store": false,
                   "previous_response_id": agent_first["id"]}),
        )
        .await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["param"], "store", "{v}");
    assert_eq!(messages(&d, &agent).await, agent_before);
}

/// The daemon's token anywhere in a door's request is refused (422, naming where, never the
/// value) before anything is stored or sent: a system message, Responses `instructions`, an
/// Anthropic `system`, an earlier turn, a tool result, the native API's `systemPrompt`; the
/// last user message as before.
#[tokio::test]
async fn the_daemons_token_anywhere_in_a_doors_request_is_refused() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let token = d.token.clone().unwrap();
    let carrying = format!("use {token} for it");
    let cases = [
        (
            "/v1/chat/completions",
            json!({"model": "mock/mock:tokens=1", "messages": [
                {"role": "system", "content": carrying},
                {"role": "user", "content": "hello"}]}),
            "system prompt",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "mock/mock:tokens=1", "messages": [
                {"role": "user", "content": carrying},
                {"role": "assistant", "content": "noted"},
                {"role": "user", "content": "hello"}]}),
            "turn 0",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "mock/mock:tokens=1", "messages": [
                {"role": "user", "content": "run it"},
                {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                    "function": {"name": "env", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": carrying},
                {"role": "user", "content": "hello"}]}),
            "turn 2",
        ),
        (
            "/v1/responses",
            json!({"model": "mock/mock:tokens=1", "instructions": carrying, "input": "hello"}),
            "system prompt",
        ),
        (
            "/v1/messages",
            json!({"model": "mock-anthropic/mock:tokens=1", "max_tokens": 10,
                   "system": [{"type": "text", "text": carrying}],
                   "messages": [{"role": "user", "content": "hello"}]}),
            "system prompt",
        ),
        (
            "/v1/messages",
            json!({"model": "elfgate:tinyelf", "max_tokens": 10, "system": carrying,
                   "messages": [{"role": "user", "content": "hello"}]}),
            "system prompt",
        ),
    ];
    for (path, body, field) in cases {
        let resp = post(&d, path, body.clone()).await;
        assert_eq!(resp.status(), 422, "{path} {body}");
        let text = resp.text().await.unwrap();
        assert!(
            text.contains("this daemon's API token") && text.contains(field),
            "{path}: {text}"
        );
        assert!(!text.contains(&token), "{path}: the answer names the token");
    }
    // The native API's systemPrompt is sent to the model too.
    let (status, v) = d
        .post(
            "/v1/sessions",
            json!({"engine": "chat", "prompt": "hello", "systemPrompt": carrying}),
        )
        .await;
    assert_eq!(status, 422, "{v}");
    assert!(v.to_string().contains("systemPrompt: it carries"), "{v}");
    assert!(mock.requests().is_empty(), "a request went upstream");
    let (_, list) = d.get("/v1/sessions").await;
    assert!(
        list["sessions"].as_array().unwrap().is_empty(),
        "stored: {list}"
    );
}
