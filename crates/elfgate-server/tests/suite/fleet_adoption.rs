//! Adoption across the fleet: the sessions of a node that died are each adopted once, by one
//! node, whichever nodes look for them at once.

use super::fleet::{node_on, node_opts};
use crate::common;

use common::{Daemon, chat};
use elfgate_mockllm::MockServer;
use elfgate_test_support::services::fleet_services;

/// How many sessions the node that dies runs: enough that the other nodes' heartbeats overlap in
/// adopting them.
const SESSIONS: usize = 30;

/// The log line of an adoption.
const ADOPTING: &str = "adopting a session whose owner's lease expired";

/// A node whose log goes to `log`.
fn logged_node(
    mock: &MockServer,
    database: &str,
    nats: &str,
    id: &str,
) -> (Daemon, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap().keep();
    let log = dir.join(format!("{id}.log"));
    let mut opts = node_opts(&dir, database, nats, id, "");
    opts.env.push(("ELFGATE_LOG".into(), "info".into()));
    opts.log_file = Some(log.clone());
    (Daemon::start_in(dir, mock, opts), log)
}

/// Waits until `node` has seen each of `others` renew its heartbeat twice from now (the heartbeat
/// age it reports falls twice): every adoption pass they had begun before has ended.
async fn two_beats_of(node: &Daemon, others: &[&str]) {
    let deadline = tokio::time::Instant::now() + common::GUARD;
    let mut last: Vec<u64> = vec![u64::MAX; others.len()];
    let mut beats = vec![0; others.len()];
    while beats.iter().any(|b| *b < 2) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no heartbeat of {others:?}"
        );
        let (status, cluster) = node.get("/v1/cluster").await;
        assert_eq!(status, 200, "{cluster}");
        for n in cluster["nodes"].as_array().unwrap() {
            let Some(i) = others.iter().position(|o| n["id"] == *o) else {
                continue;
            };
            let age = n["heartbeatAgeMs"].as_u64().unwrap();
            if age < last[i] && last[i] != u64::MAX {
                beats[i] += 1;
            }
            last[i] = age;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_session_of_a_dead_node_is_adopted_once_by_one_node() {
    let Some((database, nats)) = fleet_services().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let mut a = node_on(&mock, &database, &nats, "a");
    let (b, b_log) = logged_node(&mock, &database, &nats, "b");
    let (_c, c_log) = logged_node(&mock, &database, &nats, "c");
    let mut runs = Vec::new();
    for _ in 0..SESSIONS {
        runs.push(a.create(chat("long", "mock:tokens=2000,delay_ms=50")).await);
    }

    // A dies: B and C both look for its sessions at each heartbeat.
    a.kill();
    for (sid, run) in &runs {
        let deadline = tokio::time::Instant::now() + common::GUARD;
        loop {
            let (status, r) = b.get(&format!("/v1/sessions/{sid}/runs/{run}")).await;
            assert_eq!(status, 200, "{r}");
            if r["finishReason"] == "node_lost" {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "not adopted: {r}");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
    two_beats_of(&b, &["b", "c"]).await;

    // Each session was adopted by one node, once: no node claimed one another had adopted.
    let mut adopted: Vec<String> = Vec::new();
    for log in [&b_log, &c_log] {
        let text = std::fs::read_to_string(log).unwrap();
        adopted.extend(
            text.lines()
                .filter(|l| l.contains(ADOPTING))
                .filter_map(|l| runs.iter().find(|(sid, _)| l.contains(sid.as_str())))
                .map(|(sid, _)| sid.clone()),
        );
    }
    adopted.sort();
    let mut each: Vec<String> = runs.iter().map(|(sid, _)| sid.clone()).collect();
    each.sort();
    assert_eq!(adopted, each, "adoptions logged per session");
}
