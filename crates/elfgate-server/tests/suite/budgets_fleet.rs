//! A budget on a fleet: three nodes share its account in PostgreSQL, so runs of one key spread
//! over them spend no more than the budget between them, and every refused one is told why.

use super::fleet::node_with;
use elfgate_mockllm::MockServer;
use elfgate_test_support::keys::key_body;
use elfgate_test_support::services::fleet_services;
use serde_json::json;

#[tokio::test]
async fn runs_of_one_key_over_three_nodes_stay_within_its_budget() {
    let Some((database, nats)) = fleet_services().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let model = "mock:tokens=10,delay_ms=5";
    // A cent per output token: each call is estimated at, and costs, $0.10.
    let prices = format!(
        "\n[providers.mock.models.\"{model}\"]\ninput_usd_per_mtok = 0.0\n\
         output_usd_per_mtok = 10000.0\n"
    );
    let a = node_with(&mock, &database, &nats, "a", &prices);
    let made = a
        .create_key_answer(key_body("runner", "load", "member"))
        .await;
    let key = made["key"].as_str().unwrap().to_string();
    let key_id = made["id"].as_str().unwrap().to_string();
    let (s, budget) = a
        .post(
            "/v1/admin/budgets",
            json!({"scope": {"key": key_id}, "maxUsd": 0.5, "period": "day"}),
        )
        .await;
    assert_eq!(s, 201, "{budget}");
    let id = budget["id"].as_str().unwrap().to_string();
    // Started after the budget exists: they read it at start.
    let b = node_with(&mock, &database, &nats, "b", &prices);
    let c = node_with(&mock, &database, &nats, "c", &prices);
    let nodes = [&a, &b, &c];
    let starts = (0..15).map(|i| {
        let node = nodes[i % 3];
        let key = key.clone();
        async move {
            let mut body = elfgate_test_support::common::chat(&format!("run {i}"), model);
            body["engineConfig"] = json!({"maxTokens": 10});
            let (sid, run) = node.as_key(&key).create(body).await;
            (node, sid, run)
        }
    });
    let runs = futures_util::future::join_all(starts).await;
    let mut stopped = 0u32;
    for (node, sid, run) in &runs {
        let evs = node.all_events_until_complete_of(sid, run).await;
        let end = evs.last().unwrap().data["finishReason"]
            .as_str()
            .unwrap()
            .to_string();
        if end == "stop" {
            stopped += 1;
            continue;
        }
        assert_eq!(end, "budget_paused", "{}", node.base);
        let why = evs.iter().find(|e| e.event == "budgetPaused").unwrap();
        assert_eq!(why.data["budget"]["budgetId"], id.as_str());
    }
    assert!(stopped <= 5, "{stopped} runs of $0.10 in a $0.50 budget");
    let (_, after) = c.get(&format!("/v1/admin/budgets/{id}")).await;
    let spent = after["spentUsd"].as_f64().unwrap();
    assert!(spent <= 0.5 + 1e-9, "{after}");
    assert!((spent - f64::from(stopped) * 0.10).abs() < 1e-9, "{after}");
}
