//! `[[rate_limits]]` on a fleet: one key's requests spread over three nodes are held to the one
//! shared rule, and a team's concurrent runs are counted across the nodes.

use super::rate_limits::{rules, until_a_run_is_admitted};
use crate::common::chat;
use elfgate_mockllm::MockServer;
use elfgate_test_support::keys::key_body;
use elfgate_test_support::services::fleet_services;
use reqwest::Method;
use serde_json::json;

/// Three nodes sharing PostgreSQL and NATS, one key, its requests spread over the three at once:
/// the team's one rule holds across them (a node's own counter would let each node grant the
/// whole limit, three times it in all). What went through is at most the limit, plus what the
/// bucket refilled while the requests ran, plus 10 %.
#[tokio::test]
async fn one_rule_holds_within_ten_percent_across_three_nodes() {
    let Some((database, nats)) = fleet_services().await else {
        return;
    };
    const LIMIT: u64 = 60;
    const REQUESTS: usize = 180;
    let mock = MockServer::start().await.unwrap();
    let rule = rules(&[
        ("fleet", &format!("requests_per_minute = {LIMIT}")),
        ("big", "requests_per_minute = 1000000"),
    ]);
    let nodes =
        ["a", "b", "c"].map(|id| super::fleet::node_with(&mock, &database, &nats, id, &rule));
    let key = nodes[0]
        .create_key(key_body("alice", "fleet", "member"))
        .await;
    // A counted request that runs nothing: a prompt to a session that does not exist (404 once
    // it has taken its token; 429 when it may not).
    let started = std::time::Instant::now();
    let calls = (0..REQUESTS).map(|i| {
        let d = &nodes[i % nodes.len()];
        let req = d.as_key(&key).builder(
            Method::POST,
            &format!("/v1/sessions/{}/messages", uuid::Uuid::new_v4()),
            Some(json!({"prompt": "hi"})),
        );
        async move { req.send().await.unwrap().status().as_u16() }
    });
    let statuses = futures_util::future::join_all(calls).await;
    let took = started.elapsed();
    let refused = statuses.iter().filter(|s| **s == 429).count();
    let through = (REQUESTS - refused) as f64;
    assert!(
        statuses.iter().all(|s| [404, 429].contains(s)),
        "{statuses:?}"
    );
    let refilled = took.as_secs_f64() * LIMIT as f64 / 60.0;
    let most = (LIMIT as f64 + refilled) * 1.1;
    assert!(
        through >= LIMIT as f64,
        "only {through} of {LIMIT} went through"
    );
    assert!(
        through <= most,
        "{through} went through; the rule allows {LIMIT} + {refilled:.1} refilled (+10 %)"
    );
    eprintln!(
        "{REQUESTS} requests over three nodes in {took:?}: {through} through, {refused} refused"
    );
    // What the shared bucket adds to one request, for the docs (no goal is asserted): the same
    // counted request, one after the other, by a key whose (large) rule lets it through and by a
    // key no rule limits.
    let big = nodes[0]
        .create_key(key_body("carol", "big", "member"))
        .await;
    let free = nodes[0].create_key(key_body("bob", "free", "member")).await;
    for (who, key) in [("with a rule", &big), ("without", &free)] {
        let started = std::time::Instant::now();
        for _ in 0..50 {
            let path = format!("/v1/sessions/{}/messages", uuid::Uuid::new_v4());
            let (status, _) = nodes[1]
                .as_key(key)
                .post(&path, json!({"prompt": "hi"}))
                .await;
            assert_eq!(status, 404);
        }
        eprintln!("{who}: {:?} a request", started.elapsed() / 50);
    }
}

/// On a fleet a team's concurrent runs are counted across the nodes: two stalled runs started on
/// two nodes fill a rule of two, a third on the third node is refused, and once one ends it goes.
#[tokio::test]
async fn concurrent_runs_are_counted_across_three_nodes() {
    let Some((database, nats)) = fleet_services().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let rule = rules(&[("crew", "concurrent_runs = 2")]);
    let nodes =
        ["a", "b", "c"].map(|id| super::fleet::node_with(&mock, &database, &nats, id, &rule));
    let key = nodes[0]
        .create_key(key_body("alice", "crew", "member"))
        .await;
    let stalled = chat("hi", "mock:tokens=50,stall_after=1");
    let (first, _) = nodes[0].as_key(&key).create(stalled.clone()).await;
    nodes[1].as_key(&key).create(stalled.clone()).await;
    let (status, refused) = nodes[2].as_key(&key).post("/v1/sessions", stalled).await;
    assert_eq!(status, 429, "{refused}");
    assert_eq!(refused["error"]["code"], "rate_limited");
    assert_eq!(nodes[0].interrupt_and_wait(&first).await.0, 200);
    until_a_run_is_admitted(&nodes[2].as_key(&key)).await;
}
