//! The outbox of run-end webhooks: a run's end is written to it with the end itself, whatever
//! ends the run (its own end, a restart's recovery), and it is turned into deliveries once.

use super::{Db, delivery_to, run, session};
use elfgate_core::{FinishReason, RunOutcome, RunStatus};

pub(crate) async fn a_runs_end_waits_in_the_outbox_until_it_is_queued_once(db: Db) {
    let store = db.open().await;
    let s = session();
    let ended = run(s.id, RunStatus::Running);
    store.create_session(&s, &ended, None).await.unwrap();
    let crashed = run(s.id, RunStatus::Running);
    store.create_run(&crashed).await.unwrap();
    assert!(store.pending_run_ends(10).await.unwrap().is_empty());

    store
        .run_finished(s.id, ended.id, &RunOutcome::new(FinishReason::Stop), None)
        .await
        .unwrap();
    let recovered = store.recover_unfinished_runs().await.unwrap();
    assert_eq!(recovered.len(), 1);
    let mut waiting: Vec<_> = store
        .pending_run_ends(10)
        .await
        .unwrap()
        .into_iter()
        .map(|n| (n.session_id, n.run_id))
        .collect();
    waiting.sort();
    let mut want = vec![(s.id, ended.id), (s.id, crashed.id)];
    want.sort();
    assert_eq!(waiting, want);

    // Queued once: a second worker racing for the same end queues nothing.
    let first = delivery_to("d1", "ops", "2026-12-06T07:00:00Z");
    assert_eq!(
        store.queue_run_end(ended.id, &[first], 1).await.unwrap(),
        Some(Vec::new())
    );
    let again = delivery_to("d2", "ops", "2026-12-06T07:00:00Z");
    assert_eq!(
        store.queue_run_end(ended.id, &[again], 1).await.unwrap(),
        None
    );
    // A target whose queue is full misses this end; the end leaves the outbox all the same.
    let full = delivery_to("d3", "ops", "2026-12-06T07:00:01Z");
    assert_eq!(
        store.queue_run_end(crashed.id, &[full], 1).await.unwrap(),
        Some(vec!["ops".to_string()])
    );
    assert!(store.pending_run_ends(10).await.unwrap().is_empty());
    let listed: Vec<String> = store
        .list_deliveries(10)
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.id)
        .collect();
    assert_eq!(listed, ["d1"]);
}

/// A store told that nothing can be delivered for a run's end writes no outbox row for it,
/// whatever ends the run, and still ends it as before.
pub(crate) async fn a_store_with_nothing_to_deliver_writes_no_run_end_to_the_outbox(db: Db) {
    let opts = elfgate_store::StoreOptions {
        record_run_ends: false,
        ..elfgate_store::StoreOptions::default()
    };
    let store = db.open_with(opts).await;
    let s = session();
    let ended = run(s.id, RunStatus::Running);
    store.create_session(&s, &ended, None).await.unwrap();
    let crashed = run(s.id, RunStatus::Running);
    store.create_run(&crashed).await.unwrap();

    store
        .run_finished(s.id, ended.id, &RunOutcome::new(FinishReason::Stop), None)
        .await
        .unwrap();
    assert_eq!(store.recover_unfinished_runs().await.unwrap().len(), 1);
    assert!(store.pending_run_ends(10).await.unwrap().is_empty());
    let ended = store.get_run(s.id, ended.id).await.unwrap().unwrap();
    assert_eq!(ended.status, RunStatus::Completed);
    let crashed = store.get_run(s.id, crashed.id).await.unwrap().unwrap();
    assert_eq!(crashed.status, RunStatus::Interrupted);
}
