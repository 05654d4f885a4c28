//! `[[rate_limits]]`: a team's requests per minute refused past its bucket with 429, `Retry-After`
//! and OpenAI's `x-ratelimit-*` headers on the native API and on every front door (each in its
//! own error shape); concurrent runs refused past their count and free again when a run ends;
//! tokens per minute waited for mid-run and refused at a door. The fleet's: rate_limits_fleet.rs.

use crate::common;

use common::{Daemon, GUARD, Opts, chat};
use elfgate_mockllm::MockServer;
use elfgate_test_support::keys::key_body;
use reqwest::Method;
use serde_json::{Value, json};

/// `[[rate_limits]]` rules for teams: `(team, key = value)`.
pub(super) fn rules(rules: &[(&str, &str)]) -> String {
    rules
        .iter()
        .map(|(team, limit)| {
            format!("\n[[rate_limits]]\nscope = {{ team = \"{team}\" }}\n{limit}\n")
        })
        .collect()
}

fn with_rules(r: &[(&str, &str)]) -> Opts {
    Opts {
        extra_toml: rules(r),
        ..Default::default()
    }
}

/// A rule that cannot work stops the daemon at start (and `config check`) naming its key.
#[test]
fn config_check_refuses_rules_that_cannot_work_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for (toml, want) in [
        (
            "[[rate_limits]]\nscope = { team = \"t\" }\nrequests_per_minute = 0\n",
            "rate_limits[0].requests_per_minute is 0",
        ),
        (
            "[[rate_limits]]\nscope = { key = \"k\" }\ntokens_per_minute = -1\n",
            "rate_limits[0].tokens_per_minute is -1",
        ),
        (
            "[[rate_limits]]\nscope = { user = \"u\" }\nconcurrent_runs = 1.5\n",
            "concurrent_runs",
        ),
        (
            "[[rate_limits]]\nscope = { team = \"t\" }\nrequests_per_minut = 5\n",
            "requests_per_minut",
        ),
        (
            "[[rate_limits]]\nscope = { org = \"t\" }\nrequests_per_minute = 5\n",
            "org",
        ),
        (
            "[[rate_limits]]\nscope = { team = \"t\" }\n",
            "rate_limits[0] (team:t) sets no limit",
        ),
    ] {
        let file = dir.path().join("bad.toml");
        std::fs::write(&file, toml).unwrap();
        let (ok, out) = super::restart::run_elfgate(
            &["config", "check", "--config", file.to_str().unwrap()],
            &[],
        );
        assert!(!ok, "{toml}: accepted: {out}");
        assert!(out.contains(want), "{toml}: {out}");
    }
}

/// A request's status, its `x-ratelimit-*`/`Retry-After` headers and its JSON body.
struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Value,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }
}

async fn send(req: reqwest::RequestBuilder) -> Answer {
    let resp = req.send().await.unwrap();
    Answer {
        status: resp.status().as_u16(),
        headers: resp.headers().clone(),
        body: resp.json().await.unwrap_or(Value::Null),
    }
}

/// Sends `request()` until the first refusal (at most `most` times): the answers that went
/// through and the refusal.
async fn until_refused(
    most: usize,
    mut request: impl FnMut() -> reqwest::RequestBuilder,
) -> (Vec<Answer>, Answer) {
    let mut through = Vec::new();
    for _ in 0..most {
        let answer = send(request()).await;
        if answer.status == 429 {
            return (through, answer);
        }
        through.push(answer);
    }
    panic!("{most} requests and none refused");
}

/// The 429's headers: `Retry-After` in whole seconds, the requests trio at its limit and empty.
fn assert_refused_with_headers(refused: &Answer, limit: u64, what: &str) {
    let retry: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "{what}: Retry-After {retry}");
    assert_eq!(
        refused.header("x-ratelimit-limit-requests"),
        Some(limit.to_string().as_str()),
        "{what}"
    );
    assert_eq!(
        refused.header("x-ratelimit-remaining-requests"),
        Some("0"),
        "{what}"
    );
    let reset = refused.header("x-ratelimit-reset-requests").unwrap();
    assert!(reset.ends_with('s'), "{what}: reset {reset}");
}

/// A limit of 3 a minute refills one request every 20 s: within one window the caller gets its
/// 3 (a fourth only if the machine took 20 s over them), then 429.
const PER_MINUTE: u64 = 3;

#[tokio::test]
async fn the_native_api_refuses_a_team_over_its_requests_per_minute_with_429_and_headers() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(
        &mock,
        with_rules(&[("t", &format!("requests_per_minute = {PER_MINUTE}"))]),
    );
    // Two members of the team share its bucket; a member of another team has none.
    let alice = d.create_key(key_body("alice", "t", "member")).await;
    let bob = d.create_key(key_body("bob", "t", "member")).await;
    let carol = d.create_key(key_body("carol", "other", "member")).await;
    let mut n = 0;
    let (through, refused) = until_refused(10, || {
        n += 1;
        let key = if n % 2 == 0 { &alice } else { &bob };
        d.as_key(key).builder(
            Method::POST,
            "/v1/sessions",
            Some(chat("hi", "mock:tokens=1")),
        )
    })
    .await;
    assert!(
        (PER_MINUTE as usize..=PER_MINUTE as usize + 1).contains(&through.len()),
        "{} went through",
        through.len()
    );
    // Every answer that went through says what is left.
    for (i, a) in through.iter().enumerate() {
        assert_eq!(a.status, 201, "{}", a.body);
        assert_eq!(a.header("x-ratelimit-limit-requests"), Some("3"));
        let left: usize = a
            .header("x-ratelimit-remaining-requests")
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            left < PER_MINUTE as usize - i + 1,
            "answer {i}: {left} left"
        );
    }
    assert_eq!(
        refused.body["error"]["code"], "rate_limited",
        "{}",
        refused.body
    );
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("team:t") && message.contains("3 requests per minute"),
        "{message}"
    );
    assert_refused_with_headers(&refused, PER_MINUTE, "native");
    // A prompt counts too; a read does not.
    let (sid, _) = common::created_session(
        d.as_key(&carol)
            .post("/v1/sessions", chat("hi", "mock:tokens=1"))
            .await,
    );
    assert_eq!(d.as_key(&alice).get("/v1/sessions").await.0, 200);
    let prompt = send(d.as_key(&alice).builder(
        Method::POST,
        &format!("/v1/sessions/{sid}/messages"),
        Some(json!({"prompt": "again"})),
    ))
    .await;
    assert_eq!(prompt.status, 429, "{}", prompt.body);
    // Carol's team has no rule: her answers carry no rate-limit headers.
    let hers = send(d.as_key(&carol).builder(
        Method::POST,
        "/v1/sessions",
        Some(chat("hi", "mock:tokens=1")),
    ))
    .await;
    assert_eq!(hers.status, 201);
    assert_eq!(hers.header("x-ratelimit-limit-requests"), None);
}

/// One door: its path, its body, and whether a body is its 429 (its own error shape).
type DoorCase = (&'static str, Value, fn(&Value) -> bool);

fn doors() -> Vec<DoorCase> {
    let messages = json!([{"role": "user", "content": "hi"}]);
    vec![
        (
            "/v1/chat/completions",
            json!({"model": "mock/mock:tokens=1", "messages": messages}),
            |b| {
                b["error"]["type"] == "rate_limit_error"
                    && b["error"]["code"] == "rate_limit_exceeded"
            },
        ),
        (
            "/v1/responses",
            json!({"model": "mock/mock:tokens=1", "input": "hi"}),
            |b| {
                b["error"]["type"] == "rate_limit_error"
                    && b["error"]["code"] == "rate_limit_exceeded"
            },
        ),
        (
            "/v1/messages",
            json!({"model": "mock/mock:tokens=1", "max_tokens": 10, "messages": messages}),
            |b| b["type"] == "error" && b["error"]["type"] == "rate_limit_error",
        ),
        (
            "/v1beta/models/mock/mock:tokens=1:generateContent",
            json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}),
            |b| b["error"]["code"] == 429 && b["error"]["status"] == "RESOURCE_EXHAUSTED",
        ),
    ]
}

#[tokio::test]
async fn every_door_refuses_over_the_limit_in_its_own_shape_with_the_headers() {
    let mock = MockServer::start().await.unwrap();
    // One team per door, so that each door starts with a full bucket.
    let teams: Vec<String> = (0..doors().len()).map(|i| format!("door{i}")).collect();
    let limit = format!("requests_per_minute = {PER_MINUTE}");
    let rules: Vec<(&str, &str)> = teams.iter().map(|t| (t.as_str(), limit.as_str())).collect();
    let d = Daemon::start(&mock, with_rules(&rules));
    for ((path, body, is_rate_limit), team) in doors().into_iter().zip(&teams) {
        let key = d.create_key(key_body("u", team, "member")).await;
        let (through, refused) = until_refused(10, || {
            d.as_key(&key)
                .builder(Method::POST, path, Some(body.clone()))
        })
        .await;
        assert!(
            (PER_MINUTE as usize..=PER_MINUTE as usize + 1).contains(&through.len()),
            "{path}: {} went through",
            through.len()
        );
        for a in &through {
            assert_eq!(a.status, 200, "{path}: {}", a.body);
            assert!(
                a.header("x-ratelimit-remaining-requests").is_some(),
                "{path}"
            );
        }
        assert!(is_rate_limit(&refused.body), "{path}: {}", refused.body);
        assert_refused_with_headers(&refused, PER_MINUTE, path);
        // A read of the door is not counted.
        if path == "/v1/chat/completions" {
            assert_eq!(d.as_key(&key).get("/v1/models").await.0, 200);
        }
    }
}

#[tokio::test]
async fn a_team_over_its_concurrent_runs_is_refused_until_a_run_ends() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, with_rules(&[("c", "concurrent_runs = 1")]));
    let key = d.create_key(key_body("alice", "c", "member")).await;
    let alice = d.as_key(&key);
    // A run that stalls after its first token holds the team's one slot.
    let (sid, _) = alice
        .create(chat("hi", "mock:tokens=50,stall_after=1"))
        .await;
    let (status, refused) = alice
        .post("/v1/sessions", chat("hi", "mock:tokens=1"))
        .await;
    assert_eq!(status, 429, "{refused}");
    assert_eq!(refused["error"]["code"], "rate_limited");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("1 concurrent runs"),
        "{refused}"
    );
    // A prompt queued behind the running run is admitted work too: refused.
    let (status, queued) = alice
        .post(
            &format!("/v1/sessions/{sid}/messages"),
            json!({"prompt": "next", "onBusy": "enqueue"}),
        )
        .await;
    assert_eq!(status, 429, "{queued}");
    // Once the run has ended its slot is free (told a moment after its `complete`).
    assert_eq!(d.interrupt_and_wait(&sid).await.0, 200);
    until_a_run_is_admitted(&alice).await;
}

/// Creates sessions as `client` until one is admitted (201), refused meanwhile only for the rule
/// (429): a run's slot is freed a moment after its `complete`.
pub(super) async fn until_a_run_is_admitted(client: &elfgate_test_support::keys::AsKey<'_>) {
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        let (status, v) = client
            .post("/v1/sessions", chat("hi", "mock:tokens=1"))
            .await;
        if status == 201 {
            return;
        }
        assert_eq!(status, 429, "{v}");
        assert!(
            tokio::time::Instant::now() < deadline,
            "the slot stayed held"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// An agent loop past its team's tokens per minute waits for the bucket instead of failing: the
/// first call's answer (3000 words) leaves the bucket (1000 a second, `window_secs = 1`) in
/// debt, so the call after the tool waits, with a `retry` event saying why, then completes.
#[tokio::test]
async fn an_agent_loop_over_its_tokens_per_minute_waits_with_a_retry_event_then_completes() {
    use crate::scripted::{call, finish_of, of, project, script, session};
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(
        &mock,
        with_rules(&[("tt", "tokens_per_minute = 1000\nwindow_secs = 1")]),
    );
    let key = d.create_key(key_body("alice", "tt", "member")).await;
    let long_answer = "word ".repeat(3000);
    script(
        &mock,
        "tpm",
        json!([
            {"text": long_answer, "toolCalls": [call("c1", "read_file", json!({"path": "a.txt"}))]},
            {"text": "The file says hello."}
        ]),
    );
    let (sid, run) = d
        .as_key(&key)
        .create(session(
            "what is in a.txt?",
            "mock:script=tpm",
            &project(),
            json!({}),
        ))
        .await;
    let evs = d.all_events_until_complete_of(&sid, &run).await;
    assert_eq!(finish_of(&evs), "stop", "{:?}", common::types(&evs));
    let retries = of(&evs, "retry");
    assert!(!retries.is_empty(), "{:?}", common::types(&evs));
    let reason = retries[0].data["retry"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("tokens-per-minute bucket") && reason.contains("team:tt"),
        "{reason}"
    );
    assert!(retries[0].data["retry"]["delayMs"].as_u64().unwrap() > 0);
    // Both calls were made, the second after the wait.
    assert!(common::text_of(&evs).ends_with("The file says hello."));
}

/// A door's call when its team's tokens-per-minute bucket is spent is refused before any model
/// call, with 429 and the tokens trio; the call that spent it carried the trio too.
#[tokio::test]
async fn a_door_over_its_tokens_per_minute_is_refused_before_any_call() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, with_rules(&[("dt", "tokens_per_minute = 1000")]));
    let key = d.create_key(key_body("u", "dt", "member")).await;
    let body = json!({
        "model": "mock/mock:tokens=3000",
        "messages": [{"role": "user", "content": "hi"}],
    });
    let first = send(d.as_key(&key).builder(
        Method::POST,
        "/v1/chat/completions",
        Some(body.clone()),
    ))
    .await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.header("x-ratelimit-limit-tokens"), Some("1000"));
    assert!(first.header("x-ratelimit-remaining-tokens").is_some());
    let calls = mock.requests().len();
    let refused = send(
        d.as_key(&key)
            .builder(Method::POST, "/v1/chat/completions", Some(body)),
    )
    .await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(refused.body["error"]["type"], "rate_limit_error");
    assert_eq!(refused.header("x-ratelimit-limit-tokens"), Some("1000"));
    assert_eq!(refused.header("x-ratelimit-remaining-tokens"), Some("0"));
    assert!(refused.header("retry-after").is_some());
    assert_eq!(mock.requests().len(), calls, "a refused call went upstream");
}
