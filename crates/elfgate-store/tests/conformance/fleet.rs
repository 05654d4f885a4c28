//! Fleet nodes on one PostgreSQL database: leases, fencing, adoption. A node "paused past its
//! lease" is simulated by expiring its lease in the database, and adoption is driven by calling
//! the adopter's heartbeat, so that nothing here depends on timing.

use super::{run, session};
use elfgate_core::{
    EventEmitter, EventHub, EventPayload, FinishReason, Metrics, Run, RunLedger, RunOutcome,
    RunStatus, SEQ_RESERVE_BLOCK, Session,
};
use elfgate_store::{EventLog, FleetMember, NodeMode, PgStore, RunStore, SessionStore, StoreError};
use sqlx::Connection;
use std::sync::Arc;
use std::time::Duration;

/// A node whose heartbeat loop stays out of the way (its first beat at start, the next in an
/// hour): the test beats for it.
fn member(id: &str) -> NodeMode {
    NodeMode::Fleet(FleetMember {
        node_id: id.into(),
        address: format!("http://{id}.test:7420"),
        version: "test".into(),
        lease: Duration::from_secs(30),
        heartbeat: Duration::from_secs(3600),
    })
}

async fn node(url: &str, id: &str) -> PgStore {
    PgStore::open(url, member(id)).await.unwrap()
}

/// Nodes A and B on `url`, and a new session whose run A has started (A holds its lease).
async fn a_running_a_session(url: &str) -> (PgStore, PgStore, Session, Run) {
    let a = node(url, "a").await;
    let b = node(url, "b").await;
    let s = session();
    let r = run(s.id, RunStatus::Queued);
    a.create_session(&s, &r, None).await.unwrap();
    a.run_started(s.id, r.id, None).await.unwrap();
    (a, b, s, r)
}

/// What a node paused past its lease looks like to the others: its lease expired.
async fn expire_leases_of(url: &str, node: &str) {
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query(
        "UPDATE session_leases SET expires_at = now() - interval '1 second' WHERE node_id = $1",
    )
    .bind(node)
    .execute(&mut conn)
    .await
    .unwrap();
}

fn text(t: &str) -> EventPayload {
    EventPayload::StreamDelta {
        delta: elfgate_core::Delta {
            kind: elfgate_core::DeltaKind::Text,
            text: t.into(),
            signature: None,
        },
    }
}

#[tokio::test]
async fn a_run_is_owned_by_one_node_adopted_as_node_lost_and_the_old_owner_is_fenced() {
    let Some(url) = elfgate_test_support::services::postgres_database().await else {
        return;
    };
    let (a, b, s, r) = a_running_a_session(&url).await;
    let mut fenced = a.fenced_sessions().unwrap();
    let hub_a = EventHub::new(a.log_sender(), Arc::new(Metrics::default()));
    let (last, upto) = a.open_seq_range(s.id).await.unwrap();
    let on_a = EventEmitter::new(hub_a.open(s.id, last, upto), r.id);
    on_a.emit(text("one ")).await;
    on_a.emit(text("two ")).await;
    assert!(hub_a.flush().await);

    // While A's lease is live, B can neither run the session nor delete it.
    let second = run(s.id, RunStatus::Queued);
    match b.create_run(&second).await {
        Err(StoreError::OwnedElsewhere { node, .. }) => assert_eq!(node, "a"),
        other => panic!("B ran a session A owns: {other:?}"),
    }
    assert!(matches!(
        b.delete_session(s.id).await,
        Err(StoreError::OwnedElsewhere { .. })
    ));
    // Nothing to adopt yet.
    assert!(b.heartbeat().await.unwrap().is_empty());
    let nodes = b.nodes().await.unwrap();
    let ids: Vec<&str> = nodes.iter().map(|n| n.id.as_str()).collect();
    assert_eq!(ids, ["a", "b"]);
    assert_eq!(nodes[0].active_sessions, 1);
    assert_eq!(nodes[0].address, "http://a.test:7420");

    // A stops renewing (paused, cut off): B adopts and ends the run as node_lost.
    expire_leases_of(&url, "a").await;
    let ended = b.heartbeat().await.unwrap();
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0].run_id, r.id);
    assert_eq!(ended[0].partial_text_chars, "one two ".len());
    let done = b.get_run(s.id, r.id).await.unwrap().unwrap();
    assert_eq!(done.status, RunStatus::Interrupted);
    assert_eq!(done.finish_reason, Some(FinishReason::NodeLost));
    let log = b.events_after(s.id, 0, 100).await.unwrap();
    let types: Vec<&str> = log.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(types, ["streamDelta", "streamDelta", "result", "complete"]);
    assert!(log[3].json.contains("node_lost"));
    assert!(log.windows(2).all(|w| w[1].seq > w[0].seq));
    let adopters_complete = log[3].seq;

    // A comes back: its writes for the session are refused, its events do not land, and it
    // hears that it lost the session.
    on_a.emit(text("three ")).await;
    assert!(hub_a.flush().await);
    let refused = a
        .run_finished(s.id, r.id, &RunOutcome::new(FinishReason::Stop), None)
        .await;
    assert!(refused.is_err(), "a fenced node stored a run's end");
    assert_eq!(fenced.recv().await.unwrap(), s.id);
    let log = b.events_after(s.id, 0, 100).await.unwrap();
    assert_eq!(log.last().unwrap().seq, adopters_complete);
    assert_eq!(log.len(), 4, "an event of the fenced node landed");
    let still = b.get_run(s.id, r.id).await.unwrap().unwrap();
    assert_eq!(still.finish_reason, Some(FinishReason::NodeLost));

    // The session goes on, from any node: B runs it now, and A is refused while B holds it.
    b.create_run(&second).await.unwrap();
    match a.create_run(&run(s.id, RunStatus::Queued)).await {
        Err(StoreError::OwnedElsewhere { node, .. }) => assert_eq!(node, "b"),
        other => panic!("A ran a session B owns: {other:?}"),
    }
    a.close().await;
    b.close().await;
}

#[tokio::test]
async fn a_run_left_running_with_no_lease_at_all_is_adopted_as_node_lost() {
    let Some(url) = elfgate_test_support::services::postgres_database().await else {
        return;
    };
    let (a, b, s, r) = a_running_a_session(&url).await;
    // A run `running` whose session has no lease row at all (what the cluster must never leave
    // standing): the next heartbeat of any node ends it.
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query("DELETE FROM session_leases WHERE session_id = $1")
        .bind(s.id.to_string())
        .execute(&mut conn)
        .await
        .unwrap();
    let ended = b.heartbeat().await.unwrap();
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0].run_id, r.id);
    let done = b.get_run(s.id, r.id).await.unwrap().unwrap();
    assert_eq!(done.status, RunStatus::Interrupted);
    assert_eq!(done.finish_reason, Some(FinishReason::NodeLost));
    let log = b.events_after(s.id, 0, 100).await.unwrap();
    let types: Vec<&str> = log.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(types, ["result", "complete"]);
    assert!(log[1].json.contains("node_lost"));
    // Nothing left to adopt, and the session runs again.
    assert!(b.heartbeat().await.unwrap().is_empty());
    b.create_run(&run(s.id, RunStatus::Queued)).await.unwrap();
    a.close().await;
    b.close().await;
}

#[tokio::test]
async fn a_lease_ends_with_its_sessions_last_complete_and_another_node_may_run_it() {
    let Some(url) = elfgate_test_support::services::postgres_database().await else {
        return;
    };
    let (a, b, s, r) = a_running_a_session(&url).await;
    let hub = EventHub::new(a.log_sender(), Arc::new(Metrics::default()));
    let on_a = EventEmitter::new(hub.open(s.id, 0, SEQ_RESERVE_BLOCK), r.id);
    on_a.emit(text("answer")).await;
    a.run_finished(s.id, r.id, &RunOutcome::new(FinishReason::Stop), None)
        .await
        .unwrap();
    assert!(hub.flush().await);
    // The run has ended but its `complete` is not logged: A still owns the session.
    assert!(matches!(
        b.create_run(&run(s.id, RunStatus::Queued)).await,
        Err(StoreError::OwnedElsewhere { .. })
    ));
    on_a.emit(EventPayload::Complete {
        finish_reason: FinishReason::Stop,
    })
    .await;
    assert!(hub.flush().await);
    // Logged: the lease is gone with it, and B takes the next run.
    let next = run(s.id, RunStatus::Queued);
    b.create_run(&next).await.unwrap();
    assert!(b.get_run(s.id, next.id).await.unwrap().is_some());
    a.close().await;
    b.close().await;
}

#[tokio::test]
async fn a_restarted_node_ends_its_own_runs_as_daemon_restart_and_not_the_others() {
    let Some(url) = elfgate_test_support::services::postgres_database().await else {
        return;
    };
    let a = node(&url, "a").await;
    let b = node(&url, "b").await;
    let (s1, s2) = (session(), session());
    let (r1, r2) = (run(s1.id, RunStatus::Queued), run(s2.id, RunStatus::Queued));
    a.create_session(&s1, &r1, None).await.unwrap();
    a.run_started(s1.id, r1.id, None).await.unwrap();
    b.create_session(&s2, &r2, None).await.unwrap();
    b.run_started(s2.id, r2.id, None).await.unwrap();
    // A dies (its lease still live) and comes back at once under the same id.
    a.close().await;
    let a = node(&url, "a").await;
    let ended = a.recover_unfinished_runs().await.unwrap();
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0].run_id, r1.id);
    let done = a.get_run(s1.id, r1.id).await.unwrap().unwrap();
    assert_eq!(done.finish_reason, Some(FinishReason::DaemonRestart));
    // B's live run is B's.
    let live = a.get_run(s2.id, r2.id).await.unwrap().unwrap();
    assert_eq!(live.status, RunStatus::Running);
    assert!(b.heartbeat().await.unwrap().is_empty());
    a.close().await;
    b.close().await;
}
