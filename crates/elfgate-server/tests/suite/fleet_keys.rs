//! API keys on a fleet: a key created on one node works on every node (they share the store),
//! and once it is revoked on one node, every node refuses it within 2 s (the bus tells them; the
//! key cache's lifetime bounds it when the bus is away).

use super::fleet::node_with;
use elfgate_mockllm::MockServer;
use elfgate_test_support::keys::key_body;
use elfgate_test_support::services::fleet_services;
use std::time::{Duration, Instant};

/// The bound: a revoked key stops working on every node within this long.
const REVOKED_EVERYWHERE_WITHIN: Duration = Duration::from_secs(2);

#[tokio::test]
async fn a_key_revoked_on_one_node_is_refused_by_all_three_within_two_seconds() {
    let Some((database, nats)) = fleet_services().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    // The longest cache the configuration takes, so that the bus, not the cache's expiry, is
    // what ends the key on the other nodes.
    let cache = "\n[auth]\nkey_cache_ms = 2000\n";
    let nodes = ["a", "b", "c"].map(|id| node_with(&mock, &database, &nats, id, cache));
    let key = nodes[0]
        .create_key(key_body("alice", "research", "member"))
        .await;
    let id = key.split('_').nth(1).unwrap().to_string();
    // Works on every node, and every node now has it cached.
    for d in &nodes {
        let (s, me) = d.as_key(&key).get("/v1/me").await;
        assert_eq!(s, 200, "{}: {me}", d.base);
        assert_eq!(me["keyId"], id.as_str());
    }

    // Revoked on B; each node is polled from the revoke's answer on.
    assert_eq!(nodes[1].delete(&format!("/v1/admin/keys/{id}")).await, 204);
    let revoked_at = Instant::now();
    for d in &nodes {
        loop {
            let (s, v) = d.as_key(&key).get("/v1/me").await;
            if s == 401 {
                break;
            }
            assert_eq!(s, 200, "{}: {v}", d.base);
            assert!(
                revoked_at.elapsed() < REVOKED_EVERYWHERE_WITHIN,
                "{} still takes the key {:?} after it was revoked",
                d.base,
                revoked_at.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let took = revoked_at.elapsed();
    assert!(took < REVOKED_EVERYWHERE_WITHIN, "{took:?}");
    eprintln!("revoked on every node within {took:?}");
}
