//! The NATS accounts configuration that docs/security.md and docs/scaling.md give for a fleet,
//! run as written: each node may publish and subscribe only the fleet's subjects (its own
//! control subject the only node subject it may subscribe to) and use the fleet's JetStream
//! stream; the fleet works under it, and a node's credentials cannot read the rest of the bus.

use super::fleet_stream::{FIRST_TOKENS, a_run_under_way, until_stream_kept};
use super::fleet_transport::{assert_on_one_bus, node};
use elfgate_mockllm::MockServer;
use elfgate_test_support::services::{PrivateNats, postgres_database};
use std::sync::{Arc, Mutex};

/// The variable the nodes of this test read their NATS password from.
const SECRET_VAR: &str = "FLEET_NATS_SECRET";

/// Node `id`'s user in the documented configuration.
fn node_user(id: &str) -> String {
    format!(
        r#"      {{ user: {id}, password: {id}-pass, permissions: {{
          publish: ["elfgate.*.events.*", "elfgate.*.recent.*", "elfgate.*.keys",
                    "elfgate.*.node.*.http", "_INBOX.>", "$JS.API.STREAM.CREATE.*",
                    "$JS.API.CONSUMER.CREATE.*"]
          subscribe: ["elfgate.*.events.*", "elfgate.*.recent.*", "elfgate.*.keys",
                      "elfgate.*.node.{id}.http", "_INBOX.>"]
      }} }}
"#
    )
}

/// The documented configuration for nodes `a` and `b`, JetStream's store in `store`.
fn documented_config(store: &std::path::Path) -> String {
    format!(
        "jetstream: {{ store_dir: \"{}\" }}\naccounts: {{\n  FLEET: {{\n    jetstream: enabled\n    \
         users: [\n{}{}    ]\n  }}\n}}\n",
        store.display(),
        node_user("a"),
        node_user("b"),
    )
}

#[tokio::test]
async fn a_fleet_works_under_per_node_nats_permissions_and_a_node_user_cannot_read_the_bus() {
    let dir = tempfile::tempdir().unwrap().keep();
    let conf = dir.join("nats.conf");
    std::fs::write(&conf, documented_config(&dir.join("jetstream"))).unwrap();
    let Some(nats) = PrivateNats::start_with(&["-c", conf.to_str().unwrap()]) else {
        return;
    };
    let Some(database) = postgres_database().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let keys = |id: &str| format!("nats_user = \"{id}\"\nnats_password_env = \"{SECRET_VAR}\"");
    let [(a, log_a), (b, log_b)] = ["a", "b"].map(|id| {
        let password = format!("{id}-pass");
        node(
            &mock,
            &database,
            &nats.url,
            id,
            &keys(id),
            &[(SECRET_VAR, password.as_str())],
        )
    });
    // Both keep the fleet's stream on the server (JetStream allowed), and work as a fleet.
    until_stream_kept(&a).await;
    until_stream_kept(&b).await;
    assert_on_one_bus(&a, &b).await;
    // A session followed through B from its start catches up from the stream (the consumer the
    // permissions allow).
    let (sid, _) = a_run_under_way(&a).await;
    b.events(&sid, None).await.until_text(FIRST_TOKENS).await;
    assert!(super::fleet::metric(&b, "elfgate_fleet_stream_reads_total").await >= 1.0);
    let (status, body) = a.interrupt_and_wait(&sid).await;
    assert_eq!(status, 200, "{body}");
    // Nothing the nodes did was refused by the server.
    for log in [&log_a, &log_b] {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        assert!(!text.contains("Permissions Violation"), "{text}");
    }

    // Node a's credentials in another hand: subscribing to everything, or to node b's control
    // requests, is refused by the server.
    let refusals = Arc::new(Mutex::new(Vec::new()));
    let seen = refusals.clone();
    let thief = async_nats::ConnectOptions::with_user_and_password("a".into(), "a-pass".into())
        .event_callback(move |event| {
            let seen = seen.clone();
            async move {
                if let async_nats::Event::ServerError(e) = event {
                    seen.lock().unwrap().push(e.to_string());
                }
            }
        })
        .connect(nats.url.as_str())
        .await
        .unwrap();
    let _everything = thief.subscribe(">").await.unwrap();
    let _b_requests = thief.subscribe("elfgate.*.node.b.http").await.unwrap();
    thief.flush().await.unwrap();
    crate::common::poll_until("the server refusing both subscriptions", || {
        let said = refusals.lock().unwrap();
        (said.iter().any(|e| e.contains("Subscription to \">\""))
            && said
                .iter()
                .any(|e| e.contains("Subscription to \"elfgate.*.node.b.http\"")))
        .then_some(())
    })
    .await;
}
