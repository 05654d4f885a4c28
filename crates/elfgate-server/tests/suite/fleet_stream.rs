//! The fleet's recent events kept by the NATS server (a JetStream stream): a client following a
//! session through another node catches up from it, without the owner's answer.

use super::fleet::{metric, node_opts, signal};
use crate::common;

use common::{Daemon, chat};
use elfgate_mockllm::MockServer;
use elfgate_test_support::services::fleet_services;

/// The start of the mock's answer.
pub(super) const FIRST_TOKENS: &str = "tok0 tok1 tok2 tok3 ";

/// Node `id`, its lease long enough to outlast a pause of the test's.
fn node(mock: &MockServer, database: &str, nats: &str, id: &str) -> Daemon {
    let dir = tempfile::tempdir().unwrap().keep();
    let mut opts = node_opts(&dir, database, nats, id, "");
    opts.env
        .push(("ELFGATE_CLUSTER__LEASE_SECS".into(), "120".into()));
    // Its log writes wait as long as they may: while it is stopped, what it published is not in
    // the log, and a follower elsewhere has the bus alone to get it from.
    opts.env
        .push(("ELFGATE_STORAGE__LOG_LINGER_MS".into(), "10000".into()));
    Daemon::start_in(dir, mock, opts)
}

/// Polls `node` until it says the NATS server keeps the fleet's recent events.
pub(super) async fn until_stream_kept(node: &Daemon) {
    let deadline = tokio::time::Instant::now() + common::GUARD;
    while metric(node, "elfgate_fleet_recent_stream").await != 1.0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the NATS server does not keep the fleet's events"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A long run on `owner` whose first tokens it has published: its session and run.
pub(super) async fn a_run_under_way(owner: &Daemon) -> (String, String) {
    let (sid, run) = owner
        .create(chat("long", "mock:tokens=5000,delay_ms=10"))
        .await;
    owner
        .events(&sid, None)
        .await
        .until_text(FIRST_TOKENS)
        .await;
    (sid, run)
}

#[tokio::test]
async fn a_follower_on_another_node_catches_up_from_the_nats_server_while_the_owner_is_stopped() {
    let Some((database, nats)) = fleet_services().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let a = node(&mock, &database, &nats, "a");
    let b = node(&mock, &database, &nats, "b");
    until_stream_kept(&b).await;
    let (sid, run) = a_run_under_way(&a).await;

    // The owner stops answering anything (it still holds the lease): what B's client gets from
    // the start of the session comes from the NATS server.
    signal(&a, "STOP");
    let mut through_b = b.events(&sid, None).await;
    let mut seen = through_b.until_text(FIRST_TOKENS).await;
    assert!(metric(&b, "elfgate_fleet_stream_reads_total").await >= 1.0);
    signal(&a, "CONT");

    let (status, body) = a.interrupt_and_wait(&sid).await;
    assert_eq!(status, 200, "{body}");
    seen.extend(through_b.until_complete(&run).await);
    assert_eq!(seen.last().unwrap().data["finishReason"], "interrupted");
    // Every event once, in order, from the session's first.
    let seqs: Vec<u64> = seen.iter().filter_map(|e| e.id).collect();
    assert_eq!(seqs.first(), Some(&1), "{seqs:?}");
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
}
