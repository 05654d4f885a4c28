//! Budgets at the gateway's doors and past a soft limit: a door whose caller's budget is spent
//! answers 429 in its API's error shape naming the budget (OpenAI's `insufficient_quota`,
//! Anthropic's `rate_limit_error`, Gemini's `RESOURCE_EXHAUSTED`); a call that passes a budget's
//! `softUsd` brings a `budgetWarning` event and one signed webhook delivery, once per period.

use crate::common;
use crate::suite::workflows::receiver;

use common::{Daemon, Opts};
use elfgate_mockllm::MockServer;
use serde_json::{Value, json};

async fn post_raw(d: &Daemon, path: &str, body: Value) -> reqwest::Response {
    d.http.post(d.url(path)).json(&body).send().await.unwrap()
}

#[tokio::test]
async fn each_door_answers_a_spent_budget_with_429_in_its_own_shape() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let (s, budget) = d
        .post(
            "/v1/admin/budgets",
            json!({"scope": {"team": "root"}, "maxUsd": 0, "period": "month"}),
        )
        .await;
    assert_eq!(s, 201, "{budget}");
    let id = budget["id"].as_str().unwrap();

    let resp = post_raw(
        &d,
        "/v1/chat/completions",
        json!({"model": "mock/mock:tokens=3", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(resp.status(), 429);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["type"], "insufficient_quota", "{body}");
    assert_eq!(body["error"]["code"], "insufficient_quota", "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains(id),
        "{body}"
    );

    let resp = post_raw(
        &d,
        "/v1/messages",
        json!({"model": "mock/mock:tokens=3", "max_tokens": 5,
               "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(resp.status(), 429);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["type"], "rate_limit_error", "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains(id),
        "{body}"
    );

    let resp = post_raw(
        &d,
        "/v1beta/models/mock/mock:tokens=3:generateContent",
        json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}),
    )
    .await;
    assert_eq!(resp.status(), 429);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], 429, "{body}");
    assert_eq!(body["error"]["status"], "RESOURCE_EXHAUSTED", "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains(id),
        "{body}"
    );
    assert!(mock.requests().is_empty(), "no refused call went upstream");
}

#[tokio::test]
async fn a_soft_limit_is_announced_once_per_period_by_event_and_webhook() {
    let mock = MockServer::start().await.unwrap();
    let model = "mock:tokens=10";
    let hook = receiver(0).await;
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: format!(
                "[providers.mock.models.\"{model}\"]\ninput_usd_per_mtok = 0.0\n\
                 output_usd_per_mtok = 10000.0\n\
                 [webhooks]\nbackoff_ms = 20\nallow_private_addresses = true\n\
                 [[webhooks.targets]]\nname = \"ops\"\nurl = \"{}\"\n\
                 secret_env = \"OPS_WEBHOOK_SECRET\"\n",
                hook.url
            ),
            env: vec![("OPS_WEBHOOK_SECRET".into(), "s3cret".into())],
            ..Opts::default()
        },
    );
    let (s, budget) = d
        .post(
            "/v1/admin/budgets",
            json!({"scope": {"user": "root"}, "maxUsd": 100, "period": "day", "softUsd": 0.05}),
        )
        .await;
    assert_eq!(s, 201, "{budget}");
    let id = budget["id"].as_str().unwrap();
    // Each call costs $0.10: the first passes the soft limit, the second is past it already.
    let mut body = common::chat("one", model);
    body["engineConfig"] = json!({"maxTokens": 10});
    let (sid, run1) = d.create(body).await;
    let evs = d.all_events_until_complete_of(&sid, &run1).await;
    let warnings: Vec<&common::Ev> = evs.iter().filter(|e| e.event == "budgetWarning").collect();
    assert_eq!(warnings.len(), 1, "{evs:?}");
    let warned = &warnings[0].data["budget"];
    assert_eq!(warned["budgetId"], id);
    assert_eq!(warned["scope"], json!({"user": "root"}));
    assert_eq!(warned["limitUsd"], 0.05);
    assert!(
        (warned["spentUsd"].as_f64().unwrap() - 0.10).abs() < 1e-9,
        "{warned}"
    );
    let run2 = d.send(&sid, json!({"prompt": "two"})).await;
    let evs = d.all_events_until_complete_of(&sid, &run2).await;
    assert_eq!(
        evs.iter().filter(|e| e.event == "budgetWarning").count(),
        1,
        "once per period"
    );

    // The deliveries: the two runs' ends and the one warning.
    let seen = common::poll_until("the webhooks", || {
        let seen = hook.seen.lock().unwrap();
        let bodies: Vec<Value> = seen
            .iter()
            .map(|(_, b)| serde_json::from_str(b).unwrap())
            .collect();
        let ends = bodies.iter().filter(|b| b["type"] == "run.ended").count();
        let warned = bodies.iter().any(|b| b["type"] == "budget.warning");
        (ends == 2 && warned).then_some(bodies)
    })
    .await;
    let warnings: Vec<&Value> = seen
        .iter()
        .filter(|b| b["type"] == "budget.warning")
        .collect();
    assert_eq!(warnings.len(), 1, "{seen:?}");
    assert_eq!(warnings[0]["budget"]["budgetId"], id);
    assert_eq!(warnings[0]["sessionId"], sid.as_str());
    assert_eq!(warnings[0]["runId"], run1.as_str());
    let (_, after) = d.get(&format!("/v1/admin/budgets/{id}")).await;
    assert!(
        (after["spentUsd"].as_f64().unwrap() - 0.20).abs() < 1e-9,
        "{after}"
    );
}

/// A workflow's run is paid by the workflow's team, whoever starts it, and pauses at the
/// workflow's own `maxCostUsd` or its team's budget; the workflow's resume goes on once there is
/// room.
#[tokio::test]
async fn a_workflow_run_counts_to_its_team_and_pauses_at_its_budgets() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let alice = d
        .create_key(elfgate_test_support::keys::key_body("alice", "a", "member"))
        .await;
    let step = json!([{"id": "talk", "model": {"model": "mock:tokens=2", "prompt": "Hi."}}]);
    for (name, extra) in [("capped", json!({"maxCostUsd": 0})), ("teamed", json!({}))] {
        let mut def = json!({"name": name, "steps": step});
        for (k, v) in extra.as_object().unwrap() {
            def[k] = v.clone();
        }
        let (s, v) = d.as_key(&alice).post("/v1/workflows", def).await;
        assert_eq!(s, 201, "{v}");
    }
    let (s, v) = d
        .post(
            "/v1/workflows",
            json!({"name": "bad", "maxCostUsd": -1, "steps": step}),
        )
        .await;
    assert_eq!(s, 422, "{v}");
    assert!(v.to_string().contains("maxCostUsd"), "{v}");

    // Its own maxCostUsd.
    let (s, started) = d.post("/v1/workflows/capped/runs", json!({})).await;
    assert_eq!(s, 201, "{started}");
    let sid = started["sessionId"].as_str().unwrap();
    let run = started["runId"].as_str().unwrap();
    let evs = d.all_events_until_complete_of(sid, run).await;
    let last = evs.last().unwrap();
    assert_eq!(last.data["finishReason"], "budget_paused", "{evs:?}");
    let paused = evs.iter().find(|e| e.event == "budgetPaused").unwrap();
    assert_eq!(paused.data["budget"]["scope"], json!({"session": sid}));

    // The team's budget, though the root token (team root) starts the run.
    let (s, budget) = d
        .post(
            "/v1/admin/budgets",
            json!({"scope": {"team": "a"}, "maxUsd": 0, "period": "total"}),
        )
        .await;
    assert_eq!(s, 201, "{budget}");
    let id = budget["id"].as_str().unwrap();
    let (s, started) = d.post("/v1/workflows/teamed/runs", json!({})).await;
    assert_eq!(s, 201, "{started}");
    let sid = started["sessionId"].as_str().unwrap();
    let run = started["runId"].as_str().unwrap();
    let evs = d.all_events_until_complete_of(sid, run).await;
    assert_eq!(evs.last().unwrap().data["finishReason"], "budget_paused");
    let paused = evs.iter().find(|e| e.event == "budgetPaused").unwrap();
    assert_eq!(paused.data["budget"]["budgetId"], id);
    assert_eq!(paused.data["budget"]["scope"], json!({"team": "a"}));
    assert!(mock.requests().is_empty(), "no refused call went upstream");
    // The session's own resume points to the workflow's.
    let (s, v) = d
        .post(&format!("/v1/sessions/{sid}/resume"), json!({}))
        .await;
    assert_eq!(s, 409, "{v}");

    let (s, v) = d
        .as_key(d.token.as_deref().unwrap())
        .patch(&format!("/v1/admin/budgets/{id}"), json!({"maxUsd": 5}))
        .await;
    assert_eq!(s, 200, "{v}");
    let (s, resumed) = d
        .post(
            &format!("/v1/workflows/teamed/runs/{run}/resume"),
            json!({}),
        )
        .await;
    assert_eq!(s, 201, "{resumed}");
    let run2 = resumed["runId"].as_str().unwrap();
    let evs = d.all_events_until_complete_of(sid, run2).await;
    assert_eq!(evs.last().unwrap().data["finishReason"], "stop", "{evs:?}");
}
