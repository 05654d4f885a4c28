//! Store conformance: what any Store implementation must do. Every test runs twice: on SQLite in
//! a temp dir, and on a database of its own on the tests' PostgreSQL server (skipped, saying so,
//! when there is none, unless REQUIRE_CLUSTER_TESTS=require).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly; the helpers outside #[test] functions too"
)]

use chrono::Utc;
use elfgate_core::{
    ContentBlock, EngineType, EventHub, EventPayload, FinishReason, Message, Metrics, Ownership,
    Role, Run, RunId, RunOutcome, RunStatus, SEQ_RESERVE_BLOCK, Session, SessionId, TokenUsage,
};
use elfgate_store::{
    DeliveryStatus, NodeMode, PgStore, SessionReads, SessionStore, SqliteStore, Store,
    StoreOptions, WebhookDelivery, WorkflowWrite,
};
use std::sync::Arc;

#[path = "conformance/budgets.rs"]
mod budgets;
use budgets::{
    a_budgets_account_starts_again_each_period, budgets_are_stored_changed_and_config_ones_synced,
    reservations_never_pass_a_budgets_limit,
};
#[path = "conformance/fleet.rs"]
mod fleet;
#[path = "conformance/keys.rs"]
mod keys;
use keys::{
    access_events_are_appended_in_batches_and_read_newest_first,
    api_keys_are_created_read_changed_and_revoked,
};
#[path = "conformance/run_end_outbox.rs"]
mod run_end_outbox;
use run_end_outbox::{
    a_runs_end_waits_in_the_outbox_until_it_is_queued_once,
    a_store_with_nothing_to_deliver_writes_no_run_end_to_the_outbox,
};
#[path = "conformance/ownership.rs"]
mod ownership;
use ownership::{
    a_list_holds_what_its_reader_sees_page_by_page,
    a_workflow_keeps_its_creators_team_across_versions,
    what_was_stored_before_owners_is_the_root_keys,
};
#[path = "conformance/spend.rs"]
mod spend;
use spend::a_runs_model_calls_are_stored_with_its_end_and_summed;
#[path = "conformance/run_errors.rs"]
mod run_errors;
use run_errors::{
    a_runs_error_is_stored_as_code_and_message,
    an_earlier_versions_error_text_is_split_by_the_migration,
};

/// Where a test's database lives.
enum Db {
    Sqlite(tempfile::TempDir),
    Postgres(String),
}

/// An open store of either backend, used as `dyn Store`.
#[derive(Clone)]
enum TestStore {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

impl std::ops::Deref for TestStore {
    type Target = dyn Store;
    fn deref(&self) -> &(dyn Store + 'static) {
        match self {
            TestStore::Sqlite(s) => s,
            TestStore::Postgres(s) => s,
        }
    }
}

impl TestStore {
    fn log_sender(&self) -> elfgate_core::LogSender {
        match self {
            TestStore::Sqlite(s) => s.log_sender(),
            TestStore::Postgres(s) => s.log_sender(),
        }
    }
    async fn close(&self) {
        match self {
            TestStore::Sqlite(s) => s.close().await,
            TestStore::Postgres(s) => s.close().await,
        }
    }
    async fn event_log_rows(&self, id: SessionId) -> (u64, u64) {
        match self {
            TestStore::Sqlite(s) => s.event_log_rows(id).await.unwrap(),
            TestStore::Postgres(s) => s.event_log_rows(id).await.unwrap(),
        }
    }
}

impl Db {
    fn sqlite() -> Option<Db> {
        Some(Db::Sqlite(tempfile::tempdir().unwrap()))
    }

    async fn postgres() -> Option<Db> {
        elfgate_test_support::services::postgres_database()
            .await
            .map(Db::Postgres)
    }

    async fn open(&self) -> TestStore {
        self.open_with(StoreOptions::default()).await
    }

    async fn open_with(&self, opts: StoreOptions) -> TestStore {
        match self {
            Db::Sqlite(dir) => {
                let url = format!("sqlite://{}/t.db", dir.path().display());
                TestStore::Sqlite(SqliteStore::open_with(&url, opts).await.unwrap())
            }
            Db::Postgres(url) => TestStore::Postgres(
                PgStore::open_with(url, NodeMode::Single, opts)
                    .await
                    .unwrap(),
            ),
        }
    }
}

impl Db {
    /// Applies the migrations older than `version` to the test's database, then runs `rows` (SQL
    /// of the test's own constants): what an earlier version left, for the migrations from
    /// `version` on to take up when the store opens.
    async fn stored_before(&self, version: i64, rows: String) {
        let (folder, url) = match self {
            Db::Sqlite(dir) => (
                "sqlite",
                format!("sqlite://{}/t.db?mode=rwc", dir.path().display()),
            ),
            Db::Postgres(url) => ("postgres", url.clone()),
        };
        let mut before = sqlx::migrate::Migrator::new(std::path::Path::new(&format!(
            "{}/../../migrations/{folder}",
            env!("CARGO_MANIFEST_DIR")
        )))
        .await
        .unwrap();
        before.migrations = std::borrow::Cow::Owned(
            before
                .migrations
                .iter()
                .filter(|m| m.version < version)
                .cloned()
                .collect(),
        );
        let rows = sqlx::AssertSqlSafe(rows);
        match folder {
            "sqlite" => {
                let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
                before.run(&pool).await.unwrap();
                sqlx::raw_sql(rows).execute(&pool).await.unwrap();
                pool.close().await;
            }
            _ => {
                let pool = sqlx::PgPool::connect(&url).await.unwrap();
                before.run(&pool).await.unwrap();
                sqlx::raw_sql(rows).execute(&pool).await.unwrap();
                pool.close().await;
            }
        }
    }
}

/// Runs each named test (an `async fn(Db)`) on both backends.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $name() {
                    if let Some(db) = super::Db::sqlite() {
                        super::$name(db).await;
                    }
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $name() {
                    if let Some(db) = super::Db::postgres().await {
                        super::$name(db).await;
                    }
                }
            )*
        }
    };
}

on_both_backends!(
    sessions_runs_and_messages_round_trip,
    event_log_is_written_in_order_and_survives_reopen,
    recovery_ends_unfinished_runs_and_keeps_the_transcript_valid,
    recovery_logs_the_end_of_a_run_whose_last_events_were_lost,
    a_runs_answer_is_stored_with_its_end_in_one_commit,
    a_runs_consecutive_deltas_share_a_log_row_and_read_back_byte_for_byte,
    a_second_single_node_on_one_database_is_refused,
    workflows_keep_every_version_and_their_deletion,
    webhook_deliveries_queue_claim_and_record,
    webhook_queues_are_per_target_and_hook_ids_are_taken_once,
    a_runs_end_waits_in_the_outbox_until_it_is_queued_once,
    a_store_with_nothing_to_deliver_writes_no_run_end_to_the_outbox,
    a_runs_error_is_stored_as_code_and_message,
    an_earlier_versions_error_text_is_split_by_the_migration,
    a_list_holds_what_its_reader_sees_page_by_page,
    a_workflow_keeps_its_creators_team_across_versions,
    what_was_stored_before_owners_is_the_root_keys,
    api_keys_are_created_read_changed_and_revoked,
    access_events_are_appended_in_batches_and_read_newest_first,
    budgets_are_stored_changed_and_config_ones_synced,
    reservations_never_pass_a_budgets_limit,
    a_budgets_account_starts_again_each_period,
    a_runs_model_calls_are_stored_with_its_end_and_summed,
);

fn session() -> Session {
    Session {
        id: SessionId::new(),
        engine: EngineType::Chat,
        title: Some("t".into()),
        provider_id: None,
        model: None,
        cli_backend: None,
        project_path: None,
        agent_id: None,
        system_prompt: None,
        permission_mode: None,
        engine_config: serde_json::json!({"k": 1}),
        cli_session_id: None,
        created_at: Utc::now(),
        updated_at: Utc::now(),
        ownership: Ownership::root(),
    }
}

fn run(session_id: SessionId, status: RunStatus) -> Run {
    Run {
        id: RunId::new(),
        session_id,
        status,
        finish_reason: None,
        usage: TokenUsage::default(),
        iterations: 0,
        started_at: Utc::now(),
        ended_at: None,
        error: None,
        client_msg_id: None,
        channel: Default::default(),
        cost_usd: None,
        trace_id: None,
    }
}

async fn sessions_runs_and_messages_round_trip(db: Db) {
    let store = db.open().await;
    let s = session();
    let mut r = run(s.id, RunStatus::Queued);
    r.channel = elfgate_core::ChannelOrigin {
        channel_source: Some("slack".into()),
        channel_id: None,
        channel_sender_id: Some("U7".into()),
    };
    store.create_session(&s, &r, None).await.unwrap();
    assert_eq!(
        store
            .get_session(s.id)
            .await
            .unwrap()
            .unwrap()
            .engine_config["k"],
        1
    );
    store
        .set_session_engine_config(s.id, &serde_json::json!({"k": 2, "c": true}))
        .await
        .unwrap();
    let changed = store.get_session(s.id).await.unwrap().unwrap();
    assert_eq!(
        changed.engine_config,
        serde_json::json!({"k": 2, "c": true})
    );
    assert_eq!(
        store.get_run(s.id, r.id).await.unwrap().unwrap().trace_id,
        None
    );
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    store
        .run_started(s.id, r.id, Some(trace_id.into()))
        .await
        .unwrap();
    let started = store.get_run(s.id, r.id).await.unwrap().unwrap();
    assert_eq!(started.status, RunStatus::Running);
    assert_eq!(started.channel, r.channel);
    assert_eq!(started.trace_id.as_deref(), Some(trace_id));
    // A run stored as running before its trace began (a session's first) gets it later.
    let other = "0af7651916cd43dd8448eb211c80319c";
    store.run_traced(s.id, r.id, other).await.unwrap();
    let traced = store.get_run(s.id, r.id).await.unwrap().unwrap();
    assert_eq!(traced.trace_id.as_deref(), Some(other));
    assert_eq!(traced.started_at, started.started_at);

    let user = Message::new(
        s.id,
        Some(r.id),
        None,
        Role::User,
        vec![ContentBlock::text("q")],
    );
    store.insert_message(&user).await.unwrap();
    let mut answer = Message::new(
        s.id,
        Some(r.id),
        Some(user.id),
        Role::Assistant,
        vec![
            ContentBlock::Thinking {
                thinking: "hmm".into(),
                signature: Some("sig".into()),
            },
            ContentBlock::text("a"),
        ],
    );
    answer.output_tokens = Some(7);
    store.insert_message(&answer).await.unwrap();
    let side = Message::new(
        s.id,
        None,
        Some(user.id),
        Role::Assistant,
        vec![ContentBlock::text("b")],
    );
    store.insert_message(&side).await.unwrap();

    let all = store.list_messages(s.id, 100).await.unwrap();
    assert_eq!(all.len(), 3);
    // Stored timestamps keep milliseconds; everything else comes back as it went in.
    let mut back = all[1].clone();
    assert_eq!(
        back.created_at.timestamp_millis(),
        answer.created_at.timestamp_millis()
    );
    back.created_at = answer.created_at;
    assert_eq!(back, answer);
    assert_eq!(
        store.latest_message(s.id).await.unwrap().unwrap().id,
        side.id
    );
    // The branch follows parent ids, not insertion order.
    let branch = store.branch(s.id, answer.id, 100).await.unwrap();
    assert_eq!(
        branch.iter().map(|m| m.id).collect::<Vec<_>>(),
        [user.id, answer.id]
    );
    assert_eq!(store.branch(s.id, answer.id, 1).await.unwrap().len(), 1);

    // A run still going counts nothing towards the session's tokens yet.
    assert_eq!(
        store.session_usage(s.id).await.unwrap(),
        TokenUsage::default()
    );
    let outcome = RunOutcome {
        usage: TokenUsage {
            input_tokens: 3,
            output_tokens: 7,
            cache_read_tokens: 2,
            cache_write_tokens: 1,
        },
        iterations: 1,
        ..RunOutcome::new(FinishReason::Stop)
    };
    store
        .run_finished(s.id, r.id, &outcome, None)
        .await
        .unwrap();
    let done = store.get_run(s.id, r.id).await.unwrap().unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.usage.output_tokens, 7);
    assert_eq!(
        (done.usage.cache_read_tokens, done.usage.cache_write_tokens),
        (2, 1)
    );
    assert!(done.ended_at.is_some());
    let used = store.session_usage(s.id).await.unwrap();
    assert_eq!((used.input_tokens, used.output_tokens), (3, 7));

    // Blocked calls: kept in order, the latest `limit` of them, gone with the session.
    for (i, gate) in [
        elfgate_core::Gate::Firewall,
        elfgate_core::Gate::Hook,
        elfgate_core::Gate::Permission,
    ]
    .into_iter()
    .enumerate()
    {
        store
            .record_blocked(&elfgate_core::AuditRecord {
                session_id: s.id,
                run_id: r.id,
                call: elfgate_core::BlockedCall {
                    tool_use_id: format!("t{i}"),
                    tool_name: "write_file".into(),
                    gate,
                    reason: format!("reason {i}"),
                },
                input: serde_json::json!({"path": "/etc/passwd", "n": i}),
                created_at: chrono::Utc::now(),
            })
            .await
            .unwrap();
    }
    let audit = store.list_audit(s.id, 100).await.unwrap();
    assert_eq!(
        audit.iter().map(|a| a.call.gate).collect::<Vec<_>>(),
        [
            elfgate_core::Gate::Firewall,
            elfgate_core::Gate::Hook,
            elfgate_core::Gate::Permission
        ]
    );
    assert_eq!(audit[2].input["n"], 2);
    assert_eq!(audit[1].call.reason, "reason 1");
    let latest = store.list_audit(s.id, 2).await.unwrap();
    assert_eq!(latest[0].call.tool_use_id, "t1");

    assert!(store.delete_session(s.id).await.unwrap());
    assert!(store.list_audit(s.id, 100).await.unwrap().is_empty());
    assert!(store.get_session(s.id).await.unwrap().is_none());
    assert!(store.list_messages(s.id, 10).await.unwrap().is_empty());
    assert!(!store.delete_session(s.id).await.unwrap());
}

/// A workflow is created once, replaced by new versions, read by version, listed at its latest,
/// and deleted with its versions kept; a new one of that name goes on counting.
async fn workflows_keep_every_version_and_their_deletion(db: Db) {
    let store = db.open().await;
    let def = |n: u32| serde_json::json!({"name": "w", "steps": [{"id": format!("s{n}")}]});
    assert_eq!(store.get_workflow("w", None).await.unwrap(), None);
    // Replacing what is not there, creating what is: refused.
    assert_eq!(
        store
            .put_workflow("w", &def(0), WorkflowWrite::Replace, &Ownership::root())
            .await
            .unwrap(),
        None
    );
    let v1 = store
        .put_workflow("w", &def(1), WorkflowWrite::Create, &Ownership::root())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (v1.name.as_str(), v1.version, v1.deleted_at),
        ("w", 1, None)
    );
    assert_eq!(v1.definition, def(1));
    assert_eq!(
        store
            .put_workflow("w", &def(9), WorkflowWrite::Create, &Ownership::root())
            .await
            .unwrap(),
        None
    );
    let v2 = store
        .put_workflow("w", &def(2), WorkflowWrite::Replace, &Ownership::root())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(v2.version, 2);
    store
        .put_workflow("a", &def(1), WorkflowWrite::Create, &Ownership::root())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store
            .get_workflow("w", None)
            .await
            .unwrap()
            .unwrap()
            .definition,
        def(2)
    );
    assert_eq!(
        store
            .get_workflow("w", Some(1))
            .await
            .unwrap()
            .unwrap()
            .definition,
        def(1)
    );
    assert_eq!(store.get_workflow("w", Some(3)).await.unwrap(), None);
    let listed: Vec<(String, u32)> = store
        .list_workflows()
        .await
        .unwrap()
        .into_iter()
        .map(|w| (w.name, w.version))
        .collect();
    assert_eq!(listed, [("a".to_string(), 1), ("w".to_string(), 2)]);
    // The revision counts the versions stored and those deleted: each change moves it, a
    // refused one does not.
    assert_eq!(store.workflows_revision().await.unwrap(), (3, 0));

    assert!(store.delete_workflow("w").await.unwrap());
    assert!(!store.delete_workflow("w").await.unwrap());
    assert_eq!(store.workflows_revision().await.unwrap(), (3, 2));
    let gone = store.get_workflow("w", None).await.unwrap().unwrap();
    assert!(
        gone.deleted_at.is_some(),
        "its versions are kept, marked deleted"
    );
    assert!(store.get_workflow("w", Some(1)).await.unwrap().is_some());
    assert_eq!(store.list_workflows().await.unwrap().len(), 1);
    assert_eq!(
        store
            .put_workflow("w", &def(3), WorkflowWrite::Replace, &Ownership::root())
            .await
            .unwrap(),
        None
    );
    let again = store
        .put_workflow("w", &def(3), WorkflowWrite::Create, &Ownership::root())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.version, 3, "versions are never reused");
    assert_eq!(store.workflows_revision().await.unwrap(), (4, 2));
    // A schedule's fire time is claimed once: never again, never an earlier one; of claims made
    // at once, one wins.
    let t = |s: &str| {
        chrono::DateTime::parse_from_rfc3339(s)
            .unwrap()
            .with_timezone(&Utc)
    };
    assert!(
        store
            .claim_workflow_fire("w", t("2026-12-06T07:00:00Z"))
            .await
            .unwrap()
    );
    assert!(
        !store
            .claim_workflow_fire("w", t("2026-12-06T07:00:00Z"))
            .await
            .unwrap()
    );
    assert!(
        !store
            .claim_workflow_fire("w", t("2026-12-06T06:59:58Z"))
            .await
            .unwrap()
    );
    assert!(
        store
            .claim_workflow_fire("a", t("2026-12-06T07:00:00Z"))
            .await
            .unwrap()
    );
    let at = t("2026-12-06T07:00:02Z");
    let claims = futures_util::future::join_all((0..8).map(|_| store.claim_workflow_fire("w", at)))
        .await
        .into_iter()
        .filter(|won| *won.as_ref().unwrap())
        .count();
    assert_eq!(claims, 1, "one of eight simultaneous claims wins");

    // Reopened, all of it is still there.
    store.close().await;
    drop(store);
    let store = db.open().await;
    assert!(
        !store.claim_workflow_fire("w", at).await.unwrap(),
        "a claim survives a restart"
    );
    assert_eq!(
        store
            .get_workflow("w", Some(2))
            .await
            .unwrap()
            .unwrap()
            .definition,
        def(2)
    );
    assert_eq!(store.list_workflows().await.unwrap().len(), 2);
}

/// A time of the tests, from RFC 3339.
fn at(s: &str) -> chrono::DateTime<Utc> {
    chrono::DateTime::parse_from_rfc3339(s)
        .unwrap()
        .with_timezone(&Utc)
}

/// A pending delivery `id` to `target` (its URL named after it), due at `due`.
fn delivery_to(id: &str, target: &str, due: &str) -> WebhookDelivery {
    WebhookDelivery {
        id: id.to_string(),
        target: target.into(),
        url: format!("https://{target}.example/elfgate"),
        body: serde_json::json!({"id": id}),
        status: DeliveryStatus::Pending,
        attempts: 0,
        next_attempt_at: at(due),
        last_status: None,
        last_error: None,
        created_at: at(due),
        updated_at: at(due),
    }
}

/// Webhook deliveries: queued up to a bound of pending ones, due in order of their next attempt,
/// each attempt claimed once, recorded, listed newest first, and kept across a restart.
async fn webhook_deliveries_queue_claim_and_record(db: Db) {
    let store = db.open().await;
    let t = at;
    let delivery = |id: &str, due: &str| delivery_to(id, "ops", due);
    assert!(
        store
            .enqueue_delivery(&delivery("d1", "2026-12-06T07:00:01Z"), 2)
            .await
            .unwrap()
    );
    assert!(
        store
            .enqueue_delivery(&delivery("d2", "2026-12-06T07:00:00Z"), 2)
            .await
            .unwrap()
    );
    assert!(
        !store
            .enqueue_delivery(&delivery("d3", "2026-12-06T07:00:02Z"), 2)
            .await
            .unwrap(),
        "two wait already: the third is refused"
    );
    let due = store
        .due_deliveries(t("2026-12-06T07:00:01Z"), 10, 10)
        .await
        .unwrap();
    let ids: Vec<&str> = due.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, ["d2", "d1"], "oldest attempt first");
    assert!(
        store
            .due_deliveries(t("2026-12-06T06:59:59Z"), 10, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // One claim of an attempt wins.
    let lease = t("2026-12-06T07:00:30Z");
    let first = due[0].clone();
    assert!(
        store
            .claim_delivery("d2", first.next_attempt_at, lease)
            .await
            .unwrap()
    );
    assert!(
        !store
            .claim_delivery("d2", first.next_attempt_at, lease)
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .due_deliveries(t("2026-12-06T07:00:10Z"), 10, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    let mut failed_once = first;
    failed_once.attempts = 1;
    failed_once.last_status = Some(500);
    failed_once.last_error = Some("HTTP 500".into());
    failed_once.next_attempt_at = t("2026-12-06T07:00:05Z");
    failed_once.updated_at = t("2026-12-06T07:00:01Z");
    store.record_delivery(&failed_once).await.unwrap();
    let mut delivered = delivery("d1", "2026-12-06T07:00:01Z");
    delivered.status = DeliveryStatus::Delivered;
    delivered.attempts = 1;
    delivered.last_status = Some(204);
    store.record_delivery(&delivered).await.unwrap();
    assert!(
        store
            .enqueue_delivery(&delivery("d3", "2026-12-06T07:00:02Z"), 2)
            .await
            .unwrap(),
        "one waits now"
    );
    store.close().await;
    drop(store);
    let store = db.open().await;
    let listed = store.list_deliveries(10).await.unwrap();
    let ids: Vec<&str> = listed.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, ["d3", "d1", "d2"], "newest first");
    assert_eq!(listed[2], failed_once);
    assert_eq!(listed[1].status, DeliveryStatus::Delivered);
    assert_eq!(listed[1].last_status, Some(204));
}

/// Each target (name and URL) has its own queue bound and its own share of the due deliveries;
/// an inbound hook's delivery id is taken once until it expires, and can be given back.
async fn webhook_queues_are_per_target_and_hook_ids_are_taken_once(db: Db) {
    let store = db.open().await;
    let t = at;
    let delivery = delivery_to;
    for (id, due) in [("dead1", "07:00:00"), ("dead2", "07:00:01")] {
        let d = delivery(id, "dead", &format!("2026-12-06T{due}Z"));
        assert!(store.enqueue_delivery(&d, 2).await.unwrap());
    }
    let d = delivery("dead3", "dead", "2026-12-06T07:00:02Z");
    assert!(
        !store.enqueue_delivery(&d, 2).await.unwrap(),
        "dead's queue is full"
    );
    let d = delivery("ok1", "ok", "2026-12-06T07:00:03Z");
    assert!(store.enqueue_delivery(&d, 2).await.unwrap(), "ok's is not");
    let due = store
        .due_deliveries(t("2026-12-06T07:00:10Z"), 1, 10)
        .await
        .unwrap();
    let ids: Vec<&str> = due.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, ["dead1", "ok1"], "the oldest of each target");

    let (now, until) = (t("2026-12-06T07:00:00Z"), t("2026-12-06T07:05:01Z"));
    assert!(
        store
            .claim_hook_delivery("deploy", "msg_1", now, until)
            .await
            .unwrap()
    );
    assert!(
        !store
            .claim_hook_delivery("deploy", "msg_1", now, until)
            .await
            .unwrap()
    );
    assert!(
        store
            .claim_hook_delivery("other", "msg_1", now, until)
            .await
            .unwrap(),
        "ids are per hook"
    );
    store
        .release_hook_delivery("deploy", "msg_1")
        .await
        .unwrap();
    assert!(
        store
            .claim_hook_delivery("deploy", "msg_1", now, until)
            .await
            .unwrap()
    );
    let later = t("2026-12-06T07:06:00Z");
    assert!(
        store
            .claim_hook_delivery("deploy", "msg_1", later, later)
            .await
            .unwrap(),
        "forgotten past its time"
    );
}

async fn event_log_is_written_in_order_and_survives_reopen(db: Db) {
    let s = session();
    {
        let store = db.open().await;
        store
            .create_session(&s, &run(s.id, RunStatus::Queued), None)
            .await
            .unwrap();
        let hub = EventHub::new(store.log_sender(), Arc::new(Metrics::default()));
        let bus = hub.open(s.id, 0, SEQ_RESERVE_BLOCK);
        for i in 0..2500 {
            bus.publish(
                None,
                EventPayload::Processing {
                    message: format!("m{i}"),
                },
            )
            .await;
        }
        assert!(hub.flush().await);
        let page = store.events_after(s.id, 100, 1000).await.unwrap();
        assert_eq!(page.len(), 1000);
        assert_eq!(page[0].seq, 101);
        assert!(page.windows(2).all(|w| w[1].seq == w[0].seq + 1));
        assert_eq!(store.last_seq(s.id).await.unwrap(), 2500);
        // The bus closes cleanly: its reservation is released to what it used.
        drop(bus);
        hub.close_if_idle(s.id, || false);
        assert!(hub.flush().await);
        store.close().await;
    }
    let store = db.open().await;
    assert_eq!(store.last_seq(s.id).await.unwrap(), 2500);
    let (last, reserved) = store.open_seq_range(s.id).await.unwrap();
    assert_eq!(last, 2500);
    assert_eq!(reserved, 2500 + SEQ_RESERVE_BLOCK);
    // Reopened again without a clean close (as after a crash): numbering resumes above the
    // reservation, never below it.
    let (last, _) = store.open_seq_range(s.id).await.unwrap();
    assert_eq!(last, 2500 + SEQ_RESERVE_BLOCK);
}

async fn recovery_ends_unfinished_runs_and_keeps_the_transcript_valid(db: Db) {
    let store = db.open().await;
    let s = session();
    let r = run(s.id, RunStatus::Queued);
    store.create_session(&s, &r, None).await.unwrap();
    store.run_started(s.id, r.id, None).await.unwrap();
    let user = Message::new(
        s.id,
        Some(r.id),
        None,
        Role::User,
        vec![ContentBlock::text("q")],
    );
    store.insert_message(&user).await.unwrap();
    let call = Message::new(
        s.id,
        Some(r.id),
        Some(user.id),
        Role::Assistant,
        vec![ContentBlock::ToolUse {
            id: "c1".into(),
            name: "shell".into(),
            input: serde_json::json!({}),
        }],
    );
    store.insert_message(&call).await.unwrap();
    let hub = EventHub::new(store.log_sender(), Arc::new(Metrics::default()));
    let bus = hub.open(s.id, 0, SEQ_RESERVE_BLOCK);
    let emitter = elfgate_core::EventEmitter::new(bus.clone(), r.id);
    emitter
        .emit(EventPayload::StreamDelta {
            delta: elfgate_core::Delta {
                kind: elfgate_core::DeltaKind::Text,
                text: "part".into(),
                signature: None,
            },
        })
        .await;
    assert!(hub.flush().await);

    let recovered = store.recover_unfinished_runs().await.unwrap();
    assert_eq!(recovered.len(), 1);
    assert_eq!(recovered[0].partial_text_chars, 4);
    assert_eq!(recovered[0].synthetic_tool_results, 1);
    let done = store.get_run(s.id, r.id).await.unwrap().unwrap();
    assert_eq!(done.status, RunStatus::Interrupted);
    assert_eq!(done.finish_reason, Some(FinishReason::DaemonRestart));
    let msgs = store.list_messages(s.id, 10).await.unwrap();
    assert_eq!(msgs.len(), 4);
    assert_eq!(msgs[2].text(), "part");
    assert!(
        matches!(&msgs[3].blocks[0], ContentBlock::ToolResult { tool_use_id, is_error: true, .. } if tool_use_id == "c1")
    );
    let events = store.events_after(s.id, 0, 100).await.unwrap();
    let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(types, ["streamDelta", "result", "complete"]);
    // Recovered events sit above the session's reservation: no seq a client saw is reused.
    assert!(events[1].seq > SEQ_RESERVE_BLOCK);
    assert!(events[2].json.contains("daemon_restart"));
    // Nothing is left to recover.
    assert!(store.recover_unfinished_runs().await.unwrap().is_empty());
}

async fn recovery_logs_the_end_of_a_run_whose_last_events_were_lost(db: Db) {
    let store = db.open().await;
    let s = session();
    let ended = run(s.id, RunStatus::Running);
    store.create_session(&s, &ended, None).await.unwrap();
    let hub = EventHub::new(store.log_sender(), Arc::new(Metrics::default()));
    let bus = hub.open(s.id, 0, SEQ_RESERVE_BLOCK);
    let emitter = elfgate_core::EventEmitter::new(bus.clone(), ended.id);
    emitter.emit(EventPayload::SessionCreated {}).await;
    assert!(hub.flush().await);
    // The run's end is recorded, then the daemon dies before `result` and `complete` are logged
    // (its bus is never closed: the reservation stays unreleased).
    let outcome = RunOutcome {
        usage: TokenUsage {
            output_tokens: 7,
            ..TokenUsage::default()
        },
        ..RunOutcome::new(FinishReason::Stop)
    };
    store
        .run_finished(s.id, ended.id, &outcome, None)
        .await
        .unwrap();
    // A run whose end was logged is left alone.
    let other = SessionId::new();
    let mut s2 = session();
    s2.id = other;
    let fine = run(other, RunStatus::Running);
    store.create_session(&s2, &fine, None).await.unwrap();
    store
        .run_finished(other, fine.id, &outcome, None)
        .await
        .unwrap();
    let bus2 = hub.open(other, 0, SEQ_RESERVE_BLOCK);
    elfgate_core::EventEmitter::new(bus2.clone(), fine.id)
        .emit(EventPayload::Complete {
            finish_reason: FinishReason::Stop,
        })
        .await;
    // A run whose `result` reached the log but not its `complete`.
    let mut s3 = session();
    s3.id = SessionId::new();
    let half = run(s3.id, RunStatus::Running);
    store.create_session(&s3, &half, None).await.unwrap();
    store
        .run_finished(s3.id, half.id, &outcome, None)
        .await
        .unwrap();
    let bus3 = hub.open(s3.id, 0, SEQ_RESERVE_BLOCK);
    elfgate_core::EventEmitter::new(bus3.clone(), half.id)
        .emit(EventPayload::Result {
            stats: elfgate_core::RunStats {
                usage: TokenUsage {
                    output_tokens: 7,
                    ..TokenUsage::default()
                },
                output_tokens_estimated: false,
                input_tokens_estimated: false,
                iterations: 1,
                duration_ms: 1,
                finish_reason: FinishReason::Stop,
                model_finish_reason: None,
                stop_sequence: None,
                steps: Vec::new(),
                cost_usd: None,
            },
        })
        .await;
    assert!(hub.flush().await);

    assert!(store.recover_unfinished_runs().await.unwrap().is_empty());
    let third = store.events_after(s3.id, 0, 100).await.unwrap();
    let types3: Vec<&str> = third.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(types3, ["result", "complete"], "{third:?}");
    let events = store.events_after(s.id, 0, 100).await.unwrap();
    let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(types, ["sessionCreated", "result", "complete"]);
    assert!(events[1].seq > SEQ_RESERVE_BLOCK, "{events:?}");
    assert_eq!(events[2].seq, events[1].seq + 1);
    assert!(
        events[1].json.contains("\"outputTokens\":7"),
        "{}",
        events[1].json
    );
    assert!(
        events[2].json.contains("\"finishReason\":\"stop\""),
        "{}",
        events[2].json
    );
    assert_eq!(store.events_after(other, 0, 100).await.unwrap().len(), 1);
    // Logged once: a second start finds nothing to do.
    assert!(store.recover_unfinished_runs().await.unwrap().is_empty());
    assert_eq!(store.events_after(s.id, 0, 100).await.unwrap().len(), 3);
}

async fn a_runs_answer_is_stored_with_its_end_in_one_commit(db: Db) {
    let store = db.open().await;
    let s = session();
    let r = run(s.id, RunStatus::Running);
    let user = Message::new(
        s.id,
        Some(r.id),
        None,
        Role::User,
        vec![ContentBlock::text("q")],
    );
    store.create_session(&s, &r, Some(&user)).await.unwrap();
    let mut answer = Message::new(
        s.id,
        Some(r.id),
        Some(user.id),
        Role::Assistant,
        vec![ContentBlock::text("a")],
    );
    answer.output_tokens = Some(2);
    let outcome = RunOutcome {
        usage: TokenUsage {
            output_tokens: 2,
            ..TokenUsage::default()
        },
        iterations: 1,
        ..RunOutcome::new(FinishReason::Stop)
    };
    store
        .run_finished(s.id, r.id, &outcome, Some(&answer))
        .await
        .unwrap();
    let done = store.get_run(s.id, r.id).await.unwrap().unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.usage.output_tokens, 2);
    let all = store.list_messages(s.id, 100).await.unwrap();
    assert_eq!(
        all.iter().map(|m| m.id).collect::<Vec<_>>(),
        [user.id, answer.id]
    );
    assert_eq!(all[1].parent_id, Some(user.id));

    // An answer that cannot be stored (its session does not exist) fails the whole commit: the
    // run is not recorded as ended without it.
    let r2 = run(s.id, RunStatus::Running);
    store.create_run(&r2).await.unwrap();
    let orphan = Message::new(
        SessionId::new(),
        Some(r2.id),
        None,
        Role::Assistant,
        vec![ContentBlock::text("lost")],
    );
    let stop = RunOutcome::new(FinishReason::Stop);
    assert!(
        store
            .run_finished(s.id, r2.id, &stop, Some(&orphan))
            .await
            .is_err()
    );
    let still = store.get_run(s.id, r2.id).await.unwrap().unwrap();
    assert_eq!(still.status, RunStatus::Running);
    assert!(still.ended_at.is_none());
    assert_eq!(store.list_messages(s.id, 100).await.unwrap().len(), 2);
}

async fn a_runs_consecutive_deltas_share_a_log_row_and_read_back_byte_for_byte(db: Db) {
    use elfgate_core::{Delta, DeltaKind, EventEmitter, EventRecord};
    // Events wait for the flush below, whatever the machine's speed: one commit.
    let opts = StoreOptions {
        log_linger: std::time::Duration::from_secs(30),
        ..StoreOptions::default()
    };
    let store = db.open_with(opts).await;
    let s = session();
    let r = run(s.id, RunStatus::Running);
    store.create_session(&s, &r, None).await.unwrap();
    let hub = EventHub::new(store.log_sender(), Arc::new(Metrics::default()));
    let bus = hub.open(s.id, 0, SEQ_RESERVE_BLOCK);
    let emitter = EventEmitter::new(bus.clone(), r.id);
    let note = |m: &str| EventPayload::Processing { message: m.into() };
    let delta = |kind, text: String| EventPayload::StreamDelta {
        delta: Delta {
            kind,
            text,
            signature: None,
        },
    };
    let texts = ["tok ", "", "a \"quoted\"\nline\t\u{1}é😀\\", "}}\"}}\n"];
    let mut published: Vec<Arc<EventRecord>> = vec![emitter.emit(note("start")).await];
    let (mut text, mut thinking) = (String::new(), String::new());
    for i in 0..40 {
        let t = format!("{}{i}", texts[i % texts.len()]);
        let kind = if i % 7 == 3 {
            thinking.push_str(&t);
            DeltaKind::Thinking
        } else {
            text.push_str(&t);
            DeltaKind::Text
        };
        published.push(emitter.emit(delta(kind, t)).await);
    }
    published.push(emitter.emit(note("middle")).await);
    for i in 0..5 {
        let t = format!("end{i}");
        text.push_str(&t);
        published.push(emitter.emit(delta(DeltaKind::Text, t)).await);
    }
    assert!(hub.flush().await);

    // A note, 40 deltas, a note, 5 deltas.
    assert_eq!(
        store.event_log_rows(s.id).await,
        (4, published.len() as u64)
    );
    let last = published.last().unwrap().seq;
    assert_eq!(store.last_seq(s.id).await.unwrap(), last);
    let sid = s.id;
    let check = |store: TestStore, published: Vec<Arc<EventRecord>>| async move {
        for after in 0..=last + 1 {
            for limit in [1, 3, 1000] {
                let got = store.events_after(sid, after, limit).await.unwrap();
                let want: Vec<(u64, String, String)> = published
                    .iter()
                    .filter(|e| e.seq > after)
                    .take(limit as usize)
                    .map(|e| (e.seq, e.event_type().to_string(), e.json.clone()))
                    .collect();
                let got: Vec<(u64, String, String)> = got
                    .into_iter()
                    .map(|e| (e.seq, e.event_type.as_str().to_string(), e.json))
                    .collect();
                assert_eq!(got, want, "after {after}, limit {limit}");
            }
        }
    };
    check(store.clone(), published.clone()).await;

    // Reopened as after a crash: the rows read back the same, numbering resumes above the
    // reservation, and the partial answer is rebuilt from the merged deltas.
    drop(bus);
    store.close().await;
    drop(store);
    let store = db.open().await;
    check(store.clone(), published.clone()).await;
    let recovered = store.recover_unfinished_runs().await.unwrap();
    assert_eq!(recovered.len(), 1);
    assert_eq!(recovered[0].partial_text_chars, text.chars().count());
    let answer = store.latest_message(s.id).await.unwrap().unwrap();
    assert_eq!(answer.text(), text);
    assert!(
        matches!(&answer.blocks[0], ContentBlock::Thinking { thinking: t, .. } if *t == thinking),
        "{:?}",
        answer.blocks
    );
    let after = store.events_after(s.id, last, 10).await.unwrap();
    let types: Vec<&str> = after.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(types, ["result", "complete"]);
    assert!(after[0].seq > SEQ_RESERVE_BLOCK);
}

/// A second store on a database that a single node holds is refused, until the first closes.
async fn a_second_single_node_on_one_database_is_refused(db: Db) {
    let first = db.open().await;
    let second = match &db {
        Db::Sqlite(dir) => {
            let url = format!("sqlite://{}/t.db", dir.path().display());
            SqliteStore::open(&url).await.map(|_| ())
        }
        Db::Postgres(url) => PgStore::open(url, NodeMode::Single).await.map(|_| ()),
    };
    let err = second.unwrap_err();
    assert!(
        matches!(
            err,
            elfgate_store::StoreError::Locked { .. } | elfgate_store::StoreError::InUse
        ),
        "{err}"
    );
    first.close().await;
    drop(first);
    db.open().await.close().await;
}

/// Nodes of a fleet starting together on a new database: one applies the migrations (under the
/// migrator's advisory lock), the others find them applied; none fails.
#[tokio::test]
async fn postgres_nodes_starting_together_migrate_once() {
    let Some(url) = elfgate_test_support::services::postgres_database().await else {
        return;
    };
    let opened = futures_util::future::join_all((0..3).map(|i| {
        PgStore::open(
            &url,
            NodeMode::Fleet(elfgate_store::FleetMember {
                node_id: format!("n{i}"),
                address: format!("http://n{i}.test:7420"),
                version: "test".into(),
                lease: std::time::Duration::from_secs(30),
                heartbeat: std::time::Duration::from_secs(3600),
            }),
        )
    }))
    .await;
    let stores: Vec<PgStore> = opened.into_iter().map(Result::unwrap).collect();
    let s = session();
    stores[0]
        .create_session(&s, &run(s.id, RunStatus::Queued), None)
        .await
        .unwrap();
    for store in &stores {
        assert!(store.get_session(s.id).await.unwrap().is_some());
    }
    for store in &stores {
        store.close().await;
    }
}
