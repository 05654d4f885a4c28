//! A session at its budget pauses: the run ends with `budget_paused` after a `budgetPaused`
//! event naming the budget, the session is `paused` with its history (and tinyelf's answered
//! tool calls) kept, `POST …/resume` is refused while the budget has no room and goes on once it
//! has. And twenty concurrent runs of one key never spend past its budget by more than one
//! call's estimate each, every refused one told why. Prices are configured on the mock's models
//! (output only, so that a call's estimate is its output limit times the price).

use crate::common;
use crate::scripted;

use common::{Daemon, Ev, Opts};
use elfgate_mockllm::MockServer;
use elfgate_test_support::keys::key_body;
use scripted::events::next_of;
use scripted::{call, of, project, script, session, stored};
use serde_json::{Value, json};

/// One cent per output token, nothing for input.
fn priced(model: &str) -> String {
    format!(
        "[providers.mock.models.\"{model}\"]\ninput_usd_per_mtok = 0.0\noutput_usd_per_mtok = 10000.0\n"
    )
}

fn message_of(v: &Value) -> &str {
    v["error"]["message"].as_str().unwrap_or_default()
}

fn finish(evs: &[Ev], run: &str) -> String {
    evs.iter()
        .rfind(|e| e.event == "complete" && e.data["runId"] == run)
        .map(|e| e.data["finishReason"].as_str().unwrap().to_string())
        .unwrap_or_default()
}

async fn status_of(d: &Daemon, sid: &str) -> String {
    let (_, v) = d.get(&format!("/v1/sessions/{sid}")).await;
    v["status"].as_str().unwrap_or_default().to_string()
}

#[tokio::test]
async fn a_chat_session_pauses_at_its_max_cost_and_resumes_after_a_raise() {
    let mock = MockServer::start().await.unwrap();
    let model = "mock:tokens=10";
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: priced(model),
            ..Opts::default()
        },
    );
    // Each call reserves 5 tokens' worth ($0.05, its output limit) and costs 10 ($0.10).
    let mut body = common::chat("one", model);
    body["engineConfig"] = json!({"maxTokens": 5, "maxCostUsd": 0.05});
    let (sid, run1) = d.create(body).await;
    let evs = d.all_events_until_complete_of(&sid, &run1).await;
    assert_eq!(finish(&evs, &run1), "stop");

    let run2 = d.send(&sid, json!({"prompt": "two"})).await;
    let evs = d.all_events_until_complete_of(&sid, &run2).await;
    assert_eq!(finish(&evs, &run2), "budget_paused");
    let paused = of(&evs, "budgetPaused");
    let paused = paused
        .iter()
        .find(|e| e.data["runId"] == run2.as_str())
        .unwrap();
    assert_eq!(paused.data["budget"]["scope"], json!({"session": sid}));
    assert_eq!(paused.data["budget"]["limitUsd"], 0.05);
    assert!(
        (paused.data["budget"]["spentUsd"].as_f64().unwrap() - 0.10).abs() < 1e-9,
        "{}",
        paused.data
    );
    assert!(
        !evs.iter()
            .any(|e| e.event == "error" && e.data["runId"] == run2.as_str()),
        "a pause is no error"
    );
    assert_eq!(status_of(&d, &sid).await, "paused");
    let (_, r) = d.get(&format!("/v1/sessions/{sid}/runs/{run2}")).await;
    assert_eq!(r["finishReason"], "budget_paused");

    // Still spent: refused, naming the budget.
    let path = format!("/v1/sessions/{sid}/resume");
    let (s, v) = d.post(&path, json!({})).await;
    assert_eq!(s, 409, "{v}");
    assert!(message_of(&v).contains(&format!("session '{sid}'")), "{v}");
    assert!(message_of(&v).contains("maxCostUsd"), "{v}");

    // Raised for the resumed run: it goes on from the history.
    let (s, v) = d
        .post(&path, json!({"engineConfig": {"maxCostUsd": 1.0}}))
        .await;
    assert_eq!(s, 202, "{v}");
    let run3 = v["runId"].as_str().unwrap().to_string();
    let evs = d.all_events_until_complete_of(&sid, &run3).await;
    assert_eq!(finish(&evs, &run3), "stop");
    assert_eq!(status_of(&d, &sid).await, "idle");
    let msgs = stored(&d, &sid).await;
    let texts: Vec<&str> = msgs
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["blocks"][0]["text"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(texts, ["one", "two", "Continue from where you stopped."]);
    assert_eq!(msgs.last().unwrap()["role"], "assistant");
    // Not paused any more: nothing to resume.
    let (s, v) = d.post(&path, json!({})).await;
    assert_eq!(s, 409, "{v}");
}

#[tokio::test]
async fn a_tinyelf_run_pauses_after_its_answered_tool_call_and_resumes_with_it() {
    let mock = MockServer::start().await.unwrap();
    let model = "mock:script=paused";
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: priced(model),
            ..Opts::default()
        },
    );
    let dir = project();
    script(
        &mock,
        "paused",
        json!([
            {"toolCalls": [call("w1", "write_file", json!({"path": "one.txt", "content": "1"}))]},
            {"text": "written"}
        ]),
    );
    let (sid, run1) = d.create(session("write", model, &dir, json!({}))).await;
    let mut sse = d.events(&sid, None).await;
    // While the tool call waits for its permission, the root user's budget is set to nothing.
    let req = next_of(&mut sse, "permissionRequest").await;
    let (s, budget) = d
        .post(
            "/v1/admin/budgets",
            json!({"scope": {"user": "root"}, "maxUsd": 0, "period": "day"}),
        )
        .await;
    assert_eq!(s, 201, "{budget}");
    let budget_id = budget["id"].as_str().unwrap().to_string();
    common::allow(&d, &sid, req.data["requestId"].as_str().unwrap()).await;
    let evs = sse.until_complete(&run1).await;
    assert_eq!(finish(&evs, &run1), "budget_paused");
    let paused = next_paused(&evs);
    assert_eq!(paused["budget"]["budgetId"], budget_id.as_str());
    assert_eq!(paused["budget"]["scope"], json!({"user": "root"}));
    assert_eq!(paused["budget"]["period"], "day");
    assert!(dir.join("one.txt").exists(), "the answered tool call ran");
    assert_eq!(status_of(&d, &sid).await, "paused");

    let path = format!("/v1/sessions/{sid}/resume");
    let (s, v) = d.post(&path, json!({})).await;
    assert_eq!(s, 409, "{v}");
    assert!(message_of(&v).contains(&budget_id), "{v}");
    let (s, v) = d
        .as_key(d.token.as_deref().unwrap())
        .patch(
            &format!("/v1/admin/budgets/{budget_id}"),
            // Room for a call's estimate: tinyelf's output limit (8192 tokens) at a cent each.
            json!({"maxUsd": 1000}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = d.post(&path, json!({})).await;
    assert_eq!(s, 202, "{v}");
    let run2 = v["runId"].as_str().unwrap().to_string();
    let evs = d.all_events_until_complete_of(&sid, &run2).await;
    assert_eq!(finish(&evs, &run2), "stop");
    // The resumed call saw the answered tool call: its result is in the history sent.
    let bodies = scripted::bodies_for(&mock, model);
    let last = bodies.last().unwrap().to_string();
    assert!(last.contains("w1"), "{last}");
    let msgs = stored(&d, &sid).await;
    assert_eq!(msgs.last().unwrap()["blocks"][0]["text"], "written");
}

fn next_paused(evs: &[Ev]) -> Value {
    of(evs, "budgetPaused")
        .last()
        .map(|e| e.data.clone())
        .unwrap_or(Value::Null)
}

const CONCURRENT_MODEL: &str = "mock:tokens=10,delay_ms=5";

#[tokio::test]
async fn twenty_concurrent_runs_of_one_key_stay_within_its_budget() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: priced(CONCURRENT_MODEL),
            ..Opts::default()
        },
    );
    twenty_concurrent_runs(&d).await;
}

/// The same on PostgreSQL, where the budget's row is what a fleet's nodes share.
#[tokio::test]
async fn twenty_concurrent_runs_of_one_key_stay_within_its_budget_on_postgresql() {
    let Some(database) = elfgate_test_support::services::postgres_database().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap().keep();
    let d = Daemon::start_in(
        dir.clone(),
        &mock,
        Opts {
            extra_toml: priced(CONCURRENT_MODEL),
            env: vec![
                ("ELFGATE_DATABASE_URL".into(), database),
                (
                    "ELFGATE_STORAGE__DATA_DIR".into(),
                    dir.display().to_string(),
                ),
            ],
            ..Opts::default()
        },
    );
    twenty_concurrent_runs(&d).await;
}

/// Twenty runs of one key at once against its $0.50 budget, each call estimated at (and
/// costing) $0.10: those refused are told why, and the spend stays within the budget.
async fn twenty_concurrent_runs(d: &Daemon) {
    let model = CONCURRENT_MODEL;
    let made = d
        .create_key_answer(key_body("runner", "load", "member"))
        .await;
    let key = made["key"].as_str().unwrap().to_string();
    let key_id = made["id"].as_str().unwrap().to_string();
    let (s, budget) = d
        .post(
            "/v1/admin/budgets",
            json!({"scope": {"key": key_id}, "maxUsd": 0.5, "period": "total"}),
        )
        .await;
    assert_eq!(s, 201, "{budget}");
    let budget_id = budget["id"].as_str().unwrap().to_string();
    // Each call's estimate: 10 output tokens at a cent ($0.10); each costs as much.
    let estimate = 0.10;
    let starts = (0..20).map(|i| {
        let key = key.clone();
        async move {
            let mut body = common::chat(&format!("run {i}"), model);
            body["engineConfig"] = json!({"maxTokens": 10});
            d.as_key(&key).create(body).await
        }
    });
    let runs = futures_util::future::join_all(starts).await;
    let mut stopped = 0;
    let mut paused = 0;
    for (sid, run) in &runs {
        let evs = d.all_events_until_complete_of(sid, run).await;
        let ended = finish(&evs, run);
        if ended == "stop" {
            stopped += 1;
            continue;
        }
        assert_eq!(ended, "budget_paused", "run {run}");
        paused += 1;
        let why = next_paused(&evs);
        assert_eq!(why["budget"]["budgetId"], budget_id.as_str(), "{why}");
        assert_eq!(why["budget"]["scope"], json!({"key": key_id}));
        assert_eq!(why["budget"]["limitUsd"], 0.5);
    }
    assert_eq!(stopped + paused, 20);
    assert!(
        paused > 0,
        "a $0.50 budget cannot pay for twenty $0.10 calls"
    );
    let (_, after) = d.get(&format!("/v1/admin/budgets/{budget_id}")).await;
    let spent = after["spentUsd"].as_f64().unwrap();
    assert!(spent <= 0.5 + 20.0 * estimate, "{after}");
    // With estimates that match the costs, the budget is not passed at all.
    assert!(spent <= 0.5 + 1e-9, "{after}");
    assert!(
        (spent - f64::from(stopped) * estimate).abs() < 1e-9,
        "{after}"
    );
    assert_eq!(after["reservedUsd"], 0.0, "{after}");
}

/// The cli engine's CLI calls its provider itself: the budgets are asked before the CLI starts.
/// A spent budget pauses the prompt without starting the CLI; once raised, the resume runs the
/// CLI on its own session, which the pause kept.
#[tokio::test]
async fn a_cli_session_pauses_before_its_cli_starts_and_resumes_its_own_session() {
    let mock = MockServer::start().await.unwrap();
    let c = crate::suite::cli_engine::start(&mock, "", "");
    let d = &c.d;
    let (sid, run1) = d.create(c.session("claude-code", "text first")).await;
    let evs = d.all_events_until_complete_of(&sid, &run1).await;
    assert_eq!(finish(&evs, &run1), "stop");
    c.until_record("claude-code", "text first", false).await;
    let (_, s) = d.get(&format!("/v1/sessions/{sid}")).await;
    let cli_session = s["cliSessionId"].as_str().unwrap().to_string();

    let (s, budget) = d
        .post(
            "/v1/admin/budgets",
            json!({"scope": {"user": "root"}, "maxUsd": 0, "period": "week"}),
        )
        .await;
    assert_eq!(s, 201, "{budget}");
    let budget_id = budget["id"].as_str().unwrap().to_string();
    let run2 = d.send(&sid, json!({"prompt": "text again"})).await;
    let evs = d.all_events_until_complete_of(&sid, &run2).await;
    assert_eq!(finish(&evs, &run2), "budget_paused");
    assert_eq!(next_paused(&evs)["budget"]["budgetId"], budget_id.as_str());
    // The CLI did not run: its last record is still the first prompt's.
    c.until_record("claude-code", "text first", false).await;
    assert_eq!(status_of(d, &sid).await, "paused");

    let (s, v) = d
        .as_key(d.token.as_deref().unwrap())
        .patch(
            &format!("/v1/admin/budgets/{budget_id}"),
            json!({"reset": true, "maxUsd": 5}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = d
        .post(
            &format!("/v1/sessions/{sid}/resume"),
            json!({"prompt": "text resumed"}),
        )
        .await;
    assert_eq!(s, 202, "{v}");
    let run3 = v["runId"].as_str().unwrap().to_string();
    let evs = d.all_events_until_complete_of(&sid, &run3).await;
    assert_eq!(finish(&evs, &run3), "stop");
    let args = c
        .until_record("claude-code", "text resumed", false)
        .await
        .args();
    let at = args.iter().position(|a| a == "--resume").unwrap();
    assert_eq!(args[at + 1], cli_session, "{args:?}");
}
