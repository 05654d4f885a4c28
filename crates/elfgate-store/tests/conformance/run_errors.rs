//! A run's error: stored as a code and a message in columns of their own and read back typed,
//! whatever ends the run; the one text `code: message` of earlier versions parsed once by the
//! migration that made the columns.

use super::{Db, run, session};
use elfgate_core::{ErrorCode, ErrorInfo, RunError, RunOutcome, RunStatus};

/// The migration that split the error in two.
const SPLIT: i64 = 20261207000041;

pub(crate) async fn a_runs_error_is_stored_as_code_and_message(db: Db) {
    let store = db.open().await;
    let s = session();
    let failed = run(s.id, RunStatus::Running);
    store.create_session(&s, &failed, None).await.unwrap();
    let crashed = run(s.id, RunStatus::Running);
    store.create_run(&crashed).await.unwrap();

    // A message with ": " in it stays whole.
    let why = ErrorInfo::new(ErrorCode::UpstreamStatus, "the provider answered 503: busy");
    store
        .run_finished(s.id, failed.id, &RunOutcome::failed(why), None)
        .await
        .unwrap();
    let stored = store.get_run(s.id, failed.id).await.unwrap().unwrap();
    assert_eq!(
        stored.error,
        Some(RunError::new(
            "upstream_status",
            "the provider answered 503: busy"
        ))
    );
    // The wire keeps the one string.
    assert_eq!(
        serde_json::to_value(&stored).unwrap()["error"],
        "upstream_status: the provider answered 503: busy"
    );

    store.recover_unfinished_runs().await.unwrap();
    let recovered = store.get_run(s.id, crashed.id).await.unwrap().unwrap();
    assert_eq!(
        recovered.error,
        Some(RunError::new(
            "daemon_restart",
            "the daemon stopped while the run was going"
        ))
    );
    store.close().await;
}

pub(crate) async fn an_earlier_versions_error_text_is_split_by_the_migration(db: Db) {
    let s = session();
    let runs = [
        (
            run(s.id, RunStatus::Failed),
            Some("upstream_status: the provider answered 503: busy"),
        ),
        (run(s.id, RunStatus::Completed), None),
        (run(s.id, RunStatus::Failed), Some("Not a code: text")),
        (
            run(s.id, RunStatus::Interrupted),
            Some("node_lost: the node running it went away; another node ended it"),
        ),
    ];
    let mut old_rows = format!(
        "INSERT INTO sessions (id, engine, created_at, updated_at) \
         VALUES ('{}', 'chat', '2026-12-01T00:00:00.000Z', '2026-12-01T00:00:00.000Z');",
        s.id
    );
    for (r, error) in &runs {
        old_rows.push_str(&format!(
            "INSERT INTO runs (id, session_id, status, started_at, error) \
             VALUES ('{}', '{}', '{}', '2026-12-01T00:00:00.000Z', {});",
            r.id,
            s.id,
            r.status.as_str(),
            error.map_or("NULL".to_string(), |e| format!("'{e}'"))
        ));
    }
    // The texts are this test's constants, without quotes.
    db.stored_before(SPLIT, old_rows).await;

    let store = db.open().await;
    let errors: Vec<Option<RunError>> = {
        let mut errors = Vec::new();
        for (r, _) in &runs {
            errors.push(store.get_run(s.id, r.id).await.unwrap().unwrap().error);
        }
        errors
    };
    assert_eq!(
        errors,
        [
            Some(RunError::new(
                "upstream_status",
                "the provider answered 503: busy"
            )),
            None,
            Some(RunError::new("other", "Not a code: text")),
            Some(RunError::new(
                "node_lost",
                "the node running it went away; another node ended it"
            )),
        ]
    );
    store.close().await;
}
