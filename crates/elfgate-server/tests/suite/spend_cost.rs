//! What runs cost, through the API: `costUsd` on each engine's `result` and each gateway door's
//! answer equals the configured prices × the usage the mock reported; the session sums it; the
//! ledger (`GET /v1/spend`) sums it by key, user, team, model and day, everyone's for an admin and
//! the caller's own for anyone else; SQLite and PostgreSQL.

use crate::common;

use common::{Daemon, Opts};
use elfgate_mockllm::MockServer;
use elfgate_test_support::keys::key_body;
use elfgate_test_support::services::postgres_database;
use serde_json::{Value, json};

/// US dollars per million input and output tokens of the `priced` provider.
const INPUT_PRICE: f64 = 2.0;
const OUTPUT_PRICE: f64 = 8.0;

/// A provider `priced` on the mock with prices, beside the harness's unpriced `mock`.
fn priced(mock: &MockServer) -> String {
    format!(
        "\n[providers.priced]\nkind = \"openai\"\nbase_url = \"{}/v1\"\ndefault_model = \"mock\"\n\
         input_usd_per_mtok = {INPUT_PRICE}\noutput_usd_per_mtok = {OUTPUT_PRICE}\n\
         cache_read_usd_per_mtok = 0.5\n",
        mock.base_url()
    )
}

/// What `input` and `output` tokens cost at the `priced` provider's prices (nothing cached).
fn cost_of(input: &Value, output: &Value) -> f64 {
    (input.as_u64().unwrap() as f64 * INPUT_PRICE + output.as_u64().unwrap() as f64 * OUTPUT_PRICE)
        / 1_000_000.0
}

fn assert_close(got: &Value, want: f64, what: &str) {
    let got = got
        .as_f64()
        .unwrap_or_else(|| panic!("{what}: no cost in {got}"));
    assert!((got - want).abs() < 1e-8, "{what}: {got} != {want}");
}

/// The `result` stats of `run` of session `sid`.
async fn result_of(d: &Daemon, sid: &str, run: &str) -> Value {
    let evs = d.all_events_until_complete_of(sid, run).await;
    evs.iter()
        .find(|e| e.event == "result" && e.run() == run)
        .expect("a result")
        .data["stats"]
        .clone()
}

/// A run on the priced provider: its result's cost is prices × its tokens; returns the cost.
async fn priced_run(d: &Daemon, body: Value) -> (String, f64) {
    let (sid, run) = d.create(body).await;
    let stats = result_of(d, &sid, &run).await;
    assert_eq!(stats["finishReason"], "stop", "{stats}");
    let want = cost_of(&stats["inputTokens"], &stats["outputTokens"]);
    assert!(want > 0.0, "{stats}");
    assert_close(&stats["costUsd"], want, "result");
    (sid, want)
}

/// A whole (not streamed) answer of a gateway door: its `x-elfgate-cost-usd` and its body.
async fn door_call(d: &Daemon, path: &str, body: Value) -> (f64, Value) {
    let resp = d.http.post(d.url(path)).json(&body).send().await.unwrap();
    assert_eq!(resp.status(), 200, "{path}");
    let header = resp.headers()["x-elfgate-cost-usd"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    (header, resp.json().await.unwrap())
}

#[tokio::test]
async fn each_engines_result_and_each_doors_answer_cost_prices_times_the_reported_usage() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: priced(&mock),
            ..Opts::default()
        },
    );
    for engine in ["chat", "st-chat", "api", "tinyelf"] {
        priced_run(
            &d,
            json!({"engine": engine, "prompt": "hello", "providerId": "priced",
                   "model": "mock:tokens=4"}),
        )
        .await;
    }
    // A model without prices has no cost: absent, not 0.
    let (sid, run) = d
        .create(json!({"engine": "chat", "prompt": "hello", "model": "mock:tokens=4"}))
        .await;
    let stats = result_of(&d, &sid, &run).await;
    assert!(stats.get("costUsd").is_none(), "{stats}");
    let (status, view) = d.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(status, 200);
    assert!(view.get("costUsd").is_none(), "{view}");
    assert_eq!(view["tokens"]["outputTokens"], 4, "{view}");

    // The OpenAI door: the header and usage.cost_usd.
    let (header, body) = door_call(
        &d,
        "/v1/chat/completions",
        json!({"model": "priced/mock:tokens=3",
               "messages": [{"role": "user", "content": "hello"}]}),
    )
    .await;
    let want = cost_of(
        &body["usage"]["prompt_tokens"],
        &body["usage"]["completion_tokens"],
    );
    assert_close(&json!(header), want, "x-elfgate-cost-usd");
    assert_close(&body["usage"]["cost_usd"], want, "usage.cost_usd");

    // The Anthropic door: the header.
    let (header, body) = door_call(
        &d,
        "/v1/messages",
        json!({"model": "priced/mock:tokens=2", "max_tokens": 100,
               "messages": [{"role": "user", "content": "hello"}]}),
    )
    .await;
    let want = cost_of(
        &body["usage"]["input_tokens"],
        &body["usage"]["output_tokens"],
    );
    assert_close(&json!(header), want, "x-elfgate-cost-usd of /v1/messages");

    // The Responses and Gemini doors: the header.
    let (header, body) = door_call(
        &d,
        "/v1/responses",
        json!({"model": "priced/mock:tokens=2", "input": "hello"}),
    )
    .await;
    let want = cost_of(
        &body["usage"]["input_tokens"],
        &body["usage"]["output_tokens"],
    );
    assert_close(&json!(header), want, "x-elfgate-cost-usd of /v1/responses");
    let (header, body) = door_call(
        &d,
        "/v1beta/models/priced/mock:tokens=2:generateContent",
        json!({"contents": [{"role": "user", "parts": [{"text": "hello"}]}]}),
    )
    .await;
    let usage = &body["usageMetadata"];
    let want = cost_of(&usage["promptTokenCount"], &usage["candidatesTokenCount"]);
    assert_close(
        &json!(header),
        want,
        "x-elfgate-cost-usd of generateContent",
    );

    // The metrics count it by team and model.
    let (status, metrics) = d.get_text("/metrics").await;
    assert_eq!(status, 200);
    assert!(
        metrics.contains("elfgate_spend_usd_total{team=\"root\",model=\"mock:tokens=4\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "elfgate_tokens_total{team=\"root\",model=\"mock:tokens=4\",kind=\"output\"}"
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn an_interrupted_call_is_priced_from_its_estimated_figures() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: priced(&mock),
            ..Opts::default()
        },
    );
    let (sid, run) = d
        .create(
            json!({"engine": "chat", "prompt": "count", "providerId": "priced",
                       "model": "mock:tokens=200,delay_ms=20"}),
        )
        .await;
    d.events(&sid, None).await.until_text("tok0 ").await;
    let (status, v) = d.interrupt_and_wait(&sid).await;
    assert_eq!(status, 200, "{v}");
    let stats = result_of(&d, &sid, &run).await;
    assert_eq!(stats["finishReason"], "interrupted", "{stats}");
    assert_eq!(stats["outputTokensEstimated"], true, "{stats}");
    let want = cost_of(&stats["inputTokens"], &stats["outputTokens"]);
    assert!(want > 0.0, "{stats}");
    assert_close(&stats["costUsd"], want, "an interrupted call");
    let (_, spent) = d.get("/v1/spend?groupBy=model").await;
    assert_close(&spent["groups"][0]["costUsd"], want, "its ledger row");
}

/// Sums of `GET /v1/spend?…` as (group, cost) pairs.
fn groups(report: &Value) -> Vec<(Value, f64)> {
    report["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["group"].clone(), g["costUsd"].as_f64().unwrap_or(0.0)))
        .collect()
}

/// Two keys of two teams run priced sessions; the session and the ledger sum them.
async fn sessions_and_ledger_sum_the_costs(d: &Daemon) {
    let alice = d.create_key(key_body("alice", "a", "member")).await;
    let bob = d.create_key(key_body("bob", "b", "member")).await;
    let as_alice = d.as_key(&alice);
    let (sid, run1) = as_alice
        .create(
            json!({"engine": "chat", "prompt": "one", "providerId": "priced",
                       "model": "mock:tokens=4"}),
        )
        .await;
    let first = result_of(d, &sid, &run1).await;
    let run2 = as_alice
        .send(&sid, json!({"prompt": "two", "model": "mock:tokens=6"}))
        .await;
    let second = result_of(d, &sid, &run2).await;
    let alice_cost = cost_of(&first["inputTokens"], &first["outputTokens"])
        + cost_of(&second["inputTokens"], &second["outputTokens"]);
    let (status, stored) = as_alice
        .get(&format!("/v1/sessions/{sid}/runs/{run2}"))
        .await;
    assert_eq!(status, 200, "{stored}");
    assert_close(
        &stored["costUsd"],
        cost_of(&second["inputTokens"], &second["outputTokens"]),
        "the run's record",
    );
    let (status, view) = as_alice.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(status, 200, "{view}");
    assert_close(&view["costUsd"], alice_cost, "the session's cost");
    assert_eq!(view["tokens"]["outputTokens"], 10, "{view}");

    let as_bob = d.as_key(&bob);
    let (bsid, brun) = as_bob
        .create(
            json!({"engine": "api", "prompt": "three", "providerId": "priced",
                       "model": "mock:tokens=2"}),
        )
        .await;
    let b = result_of(d, &bsid, &brun).await;
    let bob_cost = cost_of(&b["inputTokens"], &b["outputTokens"]);

    // The admin sees everyone's rows.
    let (status, by_team) = d.get("/v1/spend?groupBy=team").await;
    assert_eq!(status, 200, "{by_team}");
    let teams = groups(&by_team);
    assert_eq!(teams.len(), 2, "{by_team}");
    assert_eq!(teams[0].0, "a");
    assert!((teams[0].1 - alice_cost).abs() < 1e-8, "{by_team}");
    assert_eq!(teams[1].0, "b");
    assert!((teams[1].1 - bob_cost).abs() < 1e-8, "{by_team}");
    assert_eq!(by_team["groups"][0]["calls"], 2);
    let (_, by_model) = d.get("/v1/spend?groupBy=model").await;
    let models: Vec<Value> = groups(&by_model).into_iter().map(|g| g.0).collect();
    assert_eq!(
        models,
        [
            json!("mock:tokens=2"),
            json!("mock:tokens=4"),
            json!("mock:tokens=6")
        ]
    );
    let (_, by_key) = d.get("/v1/spend?groupBy=key").await;
    assert_eq!(groups(&by_key).len(), 2, "{by_key}");
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let (_, by_day) = d.get(&format!("/v1/spend?groupBy=day&from={today}")).await;
    let days = groups(&by_day);
    assert_eq!(days.len(), 1, "{by_day}");
    assert_eq!(days[0].0, json!(today));
    assert!((days[0].1 - alice_cost - bob_cost).abs() < 1e-8, "{by_day}");
    let (_, before) = d.get(&format!("/v1/spend?groupBy=day&to={today}")).await;
    assert!(groups(&before).is_empty(), "{before}");

    // Anyone else sees their own rows only.
    let (status, own) = as_bob.get("/v1/spend?groupBy=user").await;
    assert_eq!(status, 200, "{own}");
    let users = groups(&own);
    assert_eq!(users.len(), 1, "{own}");
    assert_eq!(users[0].0, "bob");
    assert!((users[0].1 - bob_cost).abs() < 1e-8, "{own}");

    // Bad parameters name themselves.
    for (query, field) in [
        ("groupBy=week", "groupBy"),
        ("groupBy=day&from=yesterday", "from"),
        ("groupBy=day&to=2026-13-01", "to"),
    ] {
        let (status, v) = d.get(&format!("/v1/spend?{query}")).await;
        assert_eq!(status, 422, "{query}: {v}");
        assert!(v.to_string().contains(field), "{query}: {v}");
    }
}

#[tokio::test]
async fn sessions_and_the_ledger_sum_costs_by_key_user_team_model_and_day() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: priced(&mock),
            ..Opts::default()
        },
    );
    sessions_and_ledger_sum_the_costs(&d).await;
}

#[tokio::test]
async fn on_postgresql_sessions_and_the_ledger_sum_costs_alike() {
    let Some(database) = postgres_database().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap().keep();
    let d = Daemon::start_in(
        dir.clone(),
        &mock,
        Opts {
            env: vec![
                ("ELFGATE_DATABASE_URL".into(), database),
                (
                    "ELFGATE_STORAGE__DATA_DIR".into(),
                    dir.display().to_string(),
                ),
            ],
            extra_toml: priced(&mock),
            ..Opts::default()
        },
    );
    sessions_and_ledger_sum_the_costs(&d).await;
}
