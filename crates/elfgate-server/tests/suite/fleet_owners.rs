//! Control forwarded between the nodes of a fleet carries its principal, and the node running
//! the session checks it again: another team's key is answered as if the session did not exist,
//! a viewer's change is refused, the owner's goes through.

use super::fleet::{metric, node_on};
use crate::common;

use common::chat;
use elfgate_mockllm::MockServer;
use elfgate_test_support::keys::key_body;
use elfgate_test_support::services::fleet_services;
use serde_json::json;

#[tokio::test]
async fn a_forwarded_control_request_is_checked_for_its_principal_on_the_owner_node() {
    let Some((database, nats)) = fleet_services().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let a = node_on(&mock, &database, &nats, "a");
    let b = node_on(&mock, &database, &nats, "b");
    let alice_key = a.create_key(key_body("alice", "a", "member")).await;
    let vera_key = a.create_key(key_body("vera", "a", "viewer")).await;
    let carol_key = a.create_key(key_body("carol", "b", "member")).await;

    // Team A's member's shared session, run on A.
    let (sid, run) = a
        .as_key(&alice_key)
        .create(chat("long", "mock:tokens=2000,delay_ms=10"))
        .await;
    let mut on_a = a.as_key(&alice_key).events(&sid, None).await;
    on_a.until_text("tok0 tok1 ").await;

    // Each sent to B, which forwards it to A, the owner.
    let interrupt = format!("/v1/sessions/{sid}/interrupt");
    let (status, body) = b.as_key(&carol_key).post(&interrupt, json!({})).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(
        body["error"]["message"],
        format!("unknown session '{sid}'"),
        "{body}"
    );
    let (status, body) = b.as_key(&vera_key).post(&interrupt, json!({})).await;
    assert_eq!(status, 403, "{body}");
    let (status, body) = b.as_key(&alice_key).post(&interrupt, json!({})).await;
    assert_eq!(status, 200, "{body}");
    let end = on_a.until_complete(&run).await;
    assert_eq!(end.last().unwrap().data["finishReason"], "interrupted");
    assert_eq!(
        metric(&b, "elfgate_fleet_requests_forwarded_total").await,
        3.0
    );
}
