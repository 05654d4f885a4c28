//! Bad input gets a clear JSON error with the right status, and the daemon keeps serving.

use crate::common;

use common::{Daemon, Opts, chat, poll_until};
use elfgate_mockllm::MockServer;
use serde_json::{Value, json};

/// A request with `authorization` as given (None: no credentials at all), or with the harness's
/// token when `authorization` is `Some("harness")`.
async fn raw(
    d: &Daemon,
    method: &str,
    path: &str,
    body: &str,
    token: Option<&str>,
) -> (u16, Value) {
    let (client, token) = match token {
        Some("harness") => (&d.http, None),
        other => (&d.anon, other),
    };
    let mut rb = client
        .request(method.parse().unwrap(), d.url(path))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(t) = token {
        rb = rb.header("authorization", t);
    }
    let r = rb.send().await.unwrap();
    let status = r.status().as_u16();
    let v: Value = r.json().await.unwrap_or(Value::Null);
    (status, v)
}

fn code(v: &Value) -> &str {
    v["error"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("not an error body: {v}"))
}

#[tokio::test]
async fn bad_requests_get_json_errors_and_nothing_breaks() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let (sid, run) = d
        .create(chat("keep me", "mock:tokens=50,stall_after=1"))
        .await;
    let mut sse = d.events(&sid, None).await;
    sse.until_text("tok0 ").await;

    let (s, v) = raw(&d, "POST", "/v1/sessions", "{not json", Some("harness")).await;
    assert_eq!((s, code(&v)), (400, "bad_request"));
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("invalid JSON")
    );

    let (s, v) = raw(
        &d,
        "POST",
        "/v1/sessions",
        r#"{"engine":"chat"}"#,
        Some("harness"),
    )
    .await;
    assert_eq!((s, code(&v)), (400, "bad_request"));
    assert!(
        v["error"]["message"].as_str().unwrap().contains("prompt"),
        "{v}"
    );

    let (s, v) = raw(
        &d,
        "POST",
        "/v1/sessions",
        r#"{"engine":"chat","prompt":"  "}"#,
        Some("harness"),
    )
    .await;
    assert_eq!((s, code(&v)), (400, "bad_request"));

    let (s, v) = d
        .post("/v1/sessions", json!({"engine": "nope", "prompt": "x"}))
        .await;
    assert_eq!((s, code(&v)), (422, "unprocessable"));
    assert!(v["error"]["message"].as_str().unwrap().contains("nope"));

    let (s, v) = d
        .post(
            "/v1/sessions",
            json!({"engine": "chat", "prompt": "x", "providerId": "ghost"}),
        )
        .await;
    assert_eq!((s, code(&v)), (422, "unprocessable"));

    let (s, v) = d
        .post(
            "/v1/sessions",
            json!({"engine": "chat", "prompt": "x", "permissionMode": "yolo"}),
        )
        .await;
    assert_eq!((s, code(&v)), (400, "bad_request"));

    let ghost = "01900000-0000-7000-8000-000000000000";
    for path in [
        format!("/v1/sessions/{ghost}"),
        format!("/v1/sessions/{ghost}/messages"),
        format!("/v1/sessions/{ghost}/events"),
        "/v1/sessions/not-a-uuid".to_string(),
        format!("/v1/sessions/{sid}/runs/{ghost}"),
    ] {
        let (s, v) = d.get(&path).await;
        assert_eq!((s, code(&v)), (404, "not_found"), "{path}");
    }
    let (s, v) = d
        .post(
            &format!("/v1/sessions/{ghost}/messages"),
            json!({"prompt": "x"}),
        )
        .await;
    assert_eq!((s, code(&v)), (404, "not_found"));
    let (s, v) = d
        .post(&format!("/v1/sessions/{ghost}/interrupt"), json!({}))
        .await;
    assert_eq!((s, code(&v)), (404, "not_found"));
    let (s, v) = d
        .post(
            &format!("/v1/sessions/{sid}/permissions/{ghost}"),
            json!({"decision": "allow"}),
        )
        .await;
    assert_eq!((s, code(&v)), (404, "not_found"));
    let (s, v) = d
        .post(
            &format!("/v1/sessions/{sid}/messages"),
            json!({"prompt": "x", "parentId": ghost}),
        )
        .await;
    assert_eq!(s, 409, "busy is checked first: {v}");

    let (s, v) = d
        .post(
            &format!("/v1/sessions/{sid}/messages"),
            json!({"prompt": "again"}),
        )
        .await;
    assert_eq!((s, code(&v)), (409, "busy"));
    assert_eq!(v["activeRunId"], run.as_str());

    let (s, v) = d
        .post(
            &format!("/v1/sessions/{sid}/messages"),
            json!({"prompt": "x", "onBusy": "sometimes"}),
        )
        .await;
    assert_eq!((s, code(&v)), (400, "bad_request"));

    // The harness config limits bodies to 64 KiB.
    let big = json!({"engine": "chat", "prompt": "x".repeat(100_000)}).to_string();
    let (s, v) = raw(&d, "POST", "/v1/sessions", &big, Some("harness")).await;
    assert_eq!((s, code(&v)), (413, "payload_too_large"));

    // A cursor beyond anything the session had gets a reset, not a crash.
    let r = d
        .http
        .get(d.url(&format!("/v1/sessions/{sid}/events")))
        .header("Last-Event-ID", u64::MAX.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let first = common::Sse::new(r).next().await.unwrap();
    assert_eq!(first.event, "reset");
    assert_eq!(first.data["fromSeq"], 1);
    let r = d
        .http
        .get(d.url(&format!("/v1/sessions/{sid}/events")))
        .header("Last-Event-ID", "not-a-number")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);

    let (s, v) = d.get("/v1/nothing-here").await;
    assert_eq!((s, code(&v)), (404, "not_found"));

    // Still serving, and the running session is untouched.
    let (s, _) = d.get("/healthz").await;
    assert_eq!(s, 200);
    let (s, _) = d.get("/readyz").await;
    assert_eq!(s, 200);
    let (_, state) = d.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(state["status"], "running");
    let (_, v) = d
        .post(
            &format!("/v1/sessions/{sid}/interrupt"),
            json!({"wait": true}),
        )
        .await;
    assert_eq!(v["status"], "interrupted");
    sse.until_complete(&run).await;
    let (_, m) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    assert_eq!(m["messages"][0]["blocks"][0]["text"], "keep me");
    assert_eq!(m["messages"][1]["blocks"][0]["text"], "tok0 ");
}

#[tokio::test]
async fn token_auth_guards_the_api() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(
        &mock,
        Opts {
            token: Some("s3cret-token".into()),
            ..Opts::default()
        },
    );
    let (s, v) = raw(&d, "GET", "/v1/sessions", "", None).await;
    assert_eq!((s, code(&v)), (401, "unauthorized"));
    // A wrong token is answered as a missing one: the caller learns nothing more.
    let (s, v) = raw(&d, "GET", "/v1/sessions", "", Some("Bearer wrong-token!")).await;
    assert_eq!((s, code(&v)), (401, "unauthorized"));
    let (s, _) = raw(&d, "GET", "/v1/sessions", "", Some("bearer s3cret-token")).await;
    assert_eq!(s, 200, "the scheme name is case-insensitive");
    let (s, v) = raw(&d, "GET", "/v1/sessions", "", Some("Basic abc")).await;
    assert_eq!((s, code(&v)), (401, "unauthorized"));
    let (s, v) = raw(
        &d,
        "POST",
        "/v1/sessions",
        r#"{"engine":"chat","prompt":"x"}"#,
        None,
    )
    .await;
    assert_eq!((s, code(&v)), (401, "unauthorized"));
    // Liveness stays open for probes.
    let (s, _) = raw(&d, "GET", "/healthz", "", None).await;
    assert_eq!(s, 200);
    // With the token everything works (the harness sends it).
    let (sid, run) = d.create(chat("hi", "mock:tokens=1")).await;
    d.events(&sid, None).await.until_complete(&run).await;
    let (s, v) = d.get("/v1/sessions").await;
    assert_eq!(s, 200);
    assert_eq!(v["sessions"].as_array().unwrap().len(), 1);
    // Protected routes ask for the token first; the open ones answer 405 at once.
    let (s, v) = raw(&d, "PUT", "/v1/sessions", "", None).await;
    assert_eq!((s, code(&v)), (401, "unauthorized"));
    let (s, v) = raw(&d, "POST", "/healthz", "", None).await;
    assert_eq!((s, code(&v)), (405, "method_not_allowed"));
    let (s, v) = raw(&d, "PUT", "/v1/sessions", "", Some("Bearer s3cret-token")).await;
    assert_eq!((s, code(&v)), (405, "method_not_allowed"));
}

/// A session's first prompt in the list is its first one, cut to 200 characters, whatever came
/// after it; a single session's view does not carry it.
#[tokio::test]
async fn the_list_shows_a_sessions_first_prompt() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let long = "é".repeat(300);
    let (sid, run) = d
        .create(json!({"engine": "api", "prompt": long, "model": "mock:tokens=1"}))
        .await;
    d.events(&sid, None).await.until_complete(&run).await;
    let run2 = d
        .send(&sid, json!({"prompt": "later", "model": "mock:tokens=1"}))
        .await;
    d.events(&sid, None).await.until_complete(&run2).await;
    let (_, top) = d.get("/v1/sessions?limit=1").await;
    assert_eq!(top["sessions"][0]["id"], sid.as_str());
    assert_eq!(top["sessions"][0]["firstPrompt"], "é".repeat(200));
    let (_, one) = d.get(&format!("/v1/sessions/{sid}")).await;
    assert!(one.get("firstPrompt").is_none(), "{one}");
    assert_eq!(d.delete(&format!("/v1/sessions/{sid}")).await, 204);
}

#[tokio::test]
async fn sessions_list_pages_and_delete() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let mut ids = Vec::new();
    for i in 0..3 {
        let (sid, run) = d
            .create(
                json!({"engine": "api", "prompt": format!("p{i}"), "model": "mock:tokens=1",
                           "title": format!("t{i}")}),
            )
            .await;
        d.events(&sid, None).await.until_complete(&run).await;
        ids.push(sid);
    }
    let (_, page1) = d.get("/v1/sessions?limit=2").await;
    let got: Vec<&str> = page1["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(got, [ids[2].as_str(), ids[1].as_str()]);
    let cursor = page1["nextCursor"].as_str().unwrap();
    let (_, page2) = d
        .get(&format!("/v1/sessions?limit=2&cursor={cursor}"))
        .await;
    assert_eq!(page2["sessions"][0]["id"], ids[0].as_str());
    assert!(page2.get("nextCursor").is_none());
    assert_eq!(page2["sessions"][0]["title"], "t0");
    // Each listed session carries its first prompt (for one without a title), on every page.
    assert_eq!(page1["sessions"][0]["firstPrompt"], "p2");
    assert_eq!(page1["sessions"][1]["firstPrompt"], "p1");
    assert_eq!(page2["sessions"][0]["firstPrompt"], "p0");
    assert_eq!(d.delete(&format!("/v1/sessions/{}", ids[1])).await, 204);
    assert_eq!(d.delete(&format!("/v1/sessions/{}", ids[1])).await, 404);
    let (s, _) = d.get(&format!("/v1/sessions/{}/messages", ids[1])).await;
    assert_eq!(s, 404);
    let (_, all) = d.get("/v1/sessions").await;
    assert_eq!(all["sessions"].as_array().unwrap().len(), 2);

    // Deleting a running session interrupts it first.
    let (sid, _) = d.create(chat("x", "mock:tokens=50,stall_after=1")).await;
    d.events(&sid, None).await.until_text("tok0 ").await;
    assert_eq!(d.delete(&format!("/v1/sessions/{sid}")).await, 204);
    let (_, engines) = d.get("/v1/engines").await;
    assert!(
        engines["engines"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["activeSessions"] == 0)
    );

    let (s, body) = d.get_text("/metrics").await;
    assert_eq!(s, 200);
    assert!(
        body.contains("elfgate_runs_total{finish_reason=\"stop\"} 3"),
        "{body}"
    );
    assert!(
        body.contains("elfgate_runs_total{finish_reason=\"interrupted\"} 1"),
        "{body}"
    );
    assert!(body.contains("elfgate_active_runs 0"));
    assert!(
        body.contains("elfgate_time_to_first_token_seconds_count 4"),
        "{body}"
    );
}

#[tokio::test]
async fn sse_headers_and_keep_alive() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(
        &mock,
        Opts {
            env: vec![("ELFGATE_SERVER__KEEPALIVE_SECS".into(), "1".into())],
            ..Opts::default()
        },
    );
    let (sid, run) = d.create(chat("hi", "mock:tokens=1")).await;
    d.events(&sid, None).await.until_complete(&run).await;
    let resp = d
        .http
        .get(d.url(&format!("/v1/sessions/{sid}/events")))
        .send()
        .await
        .unwrap();
    let h = resp.headers();
    assert_eq!(h["content-type"], "text/event-stream");
    assert_eq!(h["cache-control"], "no-cache");
    assert_eq!(h["x-accel-buffering"], "no");
    assert!(h.get("content-encoding").is_none());
    // The session is idle: after the replay, only keep-alive comments arrive.
    use futures_util::StreamExt;
    let mut body = resp.bytes_stream();
    let mut seen = String::new();
    while !seen.contains(": keep-alive\n\n") {
        let chunk = tokio::time::timeout(common::GUARD, body.next())
            .await
            .expect("no keep-alive within the guard time")
            .unwrap()
            .unwrap();
        seen.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    assert!(seen.contains("event: complete"), "replay first: {seen}");
}

#[tokio::test]
async fn a_first_prompt_is_announced_even_when_the_run_fails_at_once() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let (sid, run) = d
        .create(
            // A provider whose key variable is unset: the run fails before any request.
            json!({"engine": "tinyelf", "prompt": "look around", "providerId": "openai"}),
        )
        .await;
    let evs = d.events(&sid, None).await.until_complete(&run).await;
    let types: Vec<&str> = evs.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(types[..2], ["sessionCreated", "userMessage"], "{types:?}");
    assert!(types.contains(&"error"), "{types:?}");
    assert_eq!(evs.last().unwrap().data["finishReason"], "error");
    // What the stream announced is what is stored.
    let (_, m) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    let stored = m["messages"].as_array().unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0]["id"], evs[1].data["message"]["id"]);
}

/// A request as a client sends it (with the harness's token); the status, the headers and the
/// body parsed as JSON (Null when it is not JSON).
async fn request(
    d: &Daemon,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut rb = d.http.request(method.parse().unwrap(), d.url(path));
    if let Some(body) = body {
        rb = rb.json(&body);
    }
    let r = rb.send().await.unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let text = r.text().await.unwrap();
    (
        status,
        headers,
        serde_json::from_str(&text).unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn every_rejection_is_a_json_error() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let (sid, run) = d.create(chat("hi", "mock:tokens=1")).await;
    d.events(&sid, None).await.until_complete(&run).await;
    let ghost = "01900000-0000-7000-8000-000000000000";

    // Every route of the document, with every method it lacks: 405, the JSON shape, and an
    // Allow header naming the methods it has.
    let (_, doc) = d.get("/openapi.json").await;
    let methods = ["GET", "POST", "PUT", "PATCH", "DELETE"];
    let mut checked = 0;
    for (template, item) in doc["paths"].as_object().unwrap() {
        let path = template
            .replace("{id}", &sid)
            .replace("{runId}", &run)
            .replace("{requestId}", ghost);
        let has: Vec<&str> = methods
            .iter()
            .copied()
            .filter(|m| item.get(m.to_lowercase()).is_some())
            .collect();
        for method in methods.iter().filter(|m| !has.contains(m)) {
            let (s, headers, v) = request(&d, method, &path, None).await;
            assert_eq!(s, 405, "{method} {template}: {v}");
            assert_eq!(code(&v), "method_not_allowed", "{method} {template}");
            assert!(
                v["error"]["message"].as_str().unwrap().contains(method),
                "{v}"
            );
            let allow = headers
                .get("allow")
                .unwrap_or_else(|| panic!("{method} {template}: no Allow header"))
                .to_str()
                .unwrap();
            for m in &has {
                assert!(allow.contains(m), "{method} {template}: Allow {allow:?}");
            }
            checked += 1;
        }
    }
    assert!(checked > 40, "only {checked} wrong methods tried");

    // Paths that cannot be decoded name nothing; malformed queries are 400; unknown routes 404.
    for (method, path, status, want) in [
        ("GET", "/v1/sessions/%FF".to_string(), 404, "not_found"),
        ("DELETE", "/v1/sessions/%FF".to_string(), 404, "not_found"),
        (
            "GET",
            format!("/v1/sessions/{sid}/runs/%C3%28"),
            404,
            "not_found",
        ),
        (
            "POST",
            format!("/v1/sessions/{sid}/permissions/%FF"),
            404,
            "not_found",
        ),
        (
            "GET",
            "/v1/sessions?limit=many".to_string(),
            400,
            "bad_request",
        ),
        (
            "GET",
            "/v1/sessions?limit=-1".to_string(),
            400,
            "bad_request",
        ),
        (
            "GET",
            format!("/v1/sessions/{sid}/messages?limit=x"),
            400,
            "bad_request",
        ),
        (
            "GET",
            format!("/v1/sessions/{sid}/events?afterSeq=x"),
            400,
            "bad_request",
        ),
        ("GET", "/v1/sessions/".to_string(), 404, "not_found"),
        (
            "GET",
            format!("/v1/sessions/{sid}/nothing"),
            404,
            "not_found",
        ),
        ("PUT", "/v1/nothing-here".to_string(), 404, "not_found"),
    ] {
        let (s, _, v) = request(&d, method, &path, None).await;
        assert_eq!((s, code(&v)), (status, want), "{method} {path}: {v}");
    }
}

/// Another process holding the database's write lock makes a write fail with SQLITE_BUSY once
/// the busy timeout has passed: the client gets 503 with Retry-After and a reference, not the
/// driver's text, and the same request succeeds once the lock is gone.
#[tokio::test]
async fn a_busy_database_is_503_with_retry_after() {
    use sqlx::Connection;
    let mock = MockServer::start().await.unwrap();
    let log = tempfile::NamedTempFile::new().unwrap();
    let d = Daemon::start(
        &mock,
        Opts {
            log_file: Some(log.path().to_path_buf()),
            ..Opts::default()
        },
    );
    let (sid, run) = d.create(chat("hi", "mock:tokens=1")).await;
    // Followed all along, so that the session's bus stays open and writes nothing meanwhile.
    let mut sse = d.events(&sid, None).await;
    sse.until_complete(&run).await;

    let url = format!("sqlite://{}", d.dir.join("elfgate.db").display());
    let mut other = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::raw_sql("BEGIN IMMEDIATE")
        .execute(&mut other)
        .await
        .unwrap();
    let path = format!("/v1/sessions/{sid}/messages");
    let (s, headers, v) = request(&d, "POST", &path, Some(json!({"prompt": "again"}))).await;
    assert_eq!((s, code(&v)), (503, "unavailable"), "{v}");
    assert_eq!(headers["retry-after"], "1");
    let message = v["error"]["message"].as_str().unwrap();
    // The answer names its request id, and the daemon logged the driver's text under it.
    let request_id = headers["x-request-id"].to_str().unwrap();
    assert!(
        message.contains("busy") && message.contains(&format!("(request {request_id})")),
        "{message}"
    );
    let logged = poll_until("the failure's log line", || {
        std::fs::read_to_string(log.path())
            .ok()
            .filter(|l| l.contains("storage failure") && l.contains(request_id))
    })
    .await;
    assert!(
        logged.contains("locked") || logged.contains("busy"),
        "{logged}"
    );
    assert!(
        !message.contains("locked") && !message.contains("code"),
        "{message}"
    );
    // Reads go on meanwhile (WAL).
    let (s, _) = d.get("/readyz").await;
    assert_eq!(s, 200);

    sqlx::raw_sql("ROLLBACK").execute(&mut other).await.unwrap();
    other.close().await.unwrap();
    let (s, v) = d.post(&path, json!({"prompt": "again"})).await;
    assert_eq!(s, 202, "{v}");
    sse.until_complete(v["runId"].as_str().unwrap()).await;
    // The refused prompt left nothing behind.
    let (_, m) = d.get(&path).await;
    assert_eq!(m["messages"].as_array().unwrap().len(), 4, "{m}");
}

#[tokio::test]
async fn every_answer_carries_a_request_id_and_keeps_the_clients_own() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let mut seen = Vec::new();
    // An answer, a refusal before auth, a 404 and a refused Host: all have one, each its own.
    for resp in [
        d.http.get(d.url("/v1/sessions")).send().await.unwrap(),
        d.anon.get(d.url("/v1/sessions")).send().await.unwrap(),
        d.http.get(d.url("/v1/no-such-route")).send().await.unwrap(),
        d.http
            .get(d.url("/healthz"))
            .header("host", "evil.example")
            .send()
            .await
            .unwrap(),
    ] {
        let id = resp.headers()["x-request-id"].to_str().unwrap().to_string();
        assert_eq!(id.len(), 36, "{id}");
        seen.push(id);
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 4, "{seen:?}");
    // A client's own id comes back; one that is not a short printable token is replaced.
    let resp = d
        .http
        .get(d.url("/v1/sessions"))
        .header("x-request-id", "trace-42")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["x-request-id"], "trace-42");
    let resp = d
        .http
        .get(d.url("/v1/sessions"))
        .header("x-request-id", "x".repeat(500))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["x-request-id"].len(), 36);
}
