//! The daemon on PostgreSQL (`storage.url = "postgres://…"`), one node: what it does on SQLite
//! it does there (sessions, the event stream, restart recovery, a second node on the same
//! database refused), and a PostgreSQL restart under a running run loses nothing.

use crate::common;

use common::{Daemon, Opts, assert_contiguous, chat, text_of, types};
use elfgate_mockllm::MockServer;
use elfgate_test_support::services::{PrivatePostgres, postgres_database};
use serde_json::json;
use std::path::PathBuf;

/// A daemon's options for `database` (a postgres:// URL), its token and files in `dir`.
fn on_postgres(database: &str, dir: &std::path::Path) -> Opts {
    Opts {
        env: vec![
            ("ELFGATE_DATABASE_URL".into(), database.into()),
            (
                "ELFGATE_STORAGE__DATA_DIR".into(),
                dir.display().to_string(),
            ),
        ],
        ..Opts::default()
    }
}

fn new_dir() -> PathBuf {
    tempfile::tempdir().unwrap().keep()
}

#[tokio::test]
async fn a_session_on_postgresql_streams_replays_and_recovers_after_a_crash() {
    let Some(database) = postgres_database().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let dir = new_dir();
    let mut d = Daemon::start_in(dir.clone(), &mock, on_postgres(&database, &dir));

    let (sid, run1) = d.create(chat("first", "mock:tokens=3")).await;
    let mut sse = d.events(&sid, None).await;
    let first = sse.until_complete(&run1).await;
    assert_eq!(text_of(&first), "tok0 tok1 tok2 ");
    assert_eq!(first[0].seq(), 1);
    assert_contiguous(&first);
    // Replay from a cursor inside the run gives exactly the rest, from the database.
    let mut replay = d.events(&sid, Some(2)).await;
    let rest = replay.until_complete(&run1).await;
    assert_eq!(rest[0].seq(), 3);
    assert_eq!(rest.len(), first.len() - 2);
    drop(replay);

    // A second run killed mid-stream with the daemon.
    let run2 = d
        .send(
            &sid,
            json!({"prompt": "second", "model": "mock:tokens=50,stall_after=4"}),
        )
        .await;
    let seen = sse.until_text("tok0 tok1 tok2 tok3 ").await;
    let last_seen = seen.last().unwrap().seq();
    d.kill();
    drop(sse);

    // The restarted node ends it as a restart does on SQLite.
    let d = Daemon::start_in(dir.clone(), &mock, on_postgres(&database, &dir));
    let (status, r) = d.get(&format!("/v1/sessions/{sid}/runs/{run2}")).await;
    assert_eq!(status, 200);
    assert_eq!(r["status"], "interrupted");
    assert_eq!(r["finishReason"], "daemon_restart");
    let mut sse = d.events(&sid, None).await;
    let evs = sse.until_complete(&run2).await;
    // What lingered unwritten at the kill (up to log_linger_ms) is gone; the recovered ends sit
    // above every seq handed out: increasing, never reused.
    for w in evs.windows(2) {
        assert!(
            w[1].seq() > w[0].seq(),
            "seq not increasing: {:?}",
            types(&evs)
        );
    }
    let n = evs.len();
    assert_eq!(evs[n - 1].data["finishReason"], "daemon_restart");
    assert_eq!(evs[n - 2].event, "result");
    assert!(evs[n - 1].seq() > last_seen);
    assert_eq!(
        evs.iter().filter(|e| e.event == "complete").count(),
        2,
        "one complete per run: {:?}",
        types(&evs)
    );
    let (_, m) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    let msgs = m["messages"].as_array().unwrap();
    assert_eq!(msgs[0]["blocks"][0]["text"], "first");
    assert_eq!(msgs[1]["blocks"][0]["text"], "tok0 tok1 tok2 ");
    assert_eq!(msgs[2]["blocks"][0]["text"], "second");

    // The session goes on, its seqs after the recovered ones.
    let run3 = d
        .send(&sid, json!({"prompt": "third", "model": "mock:tokens=2"}))
        .await;
    let more = sse.until_complete(&run3).await;
    assert_eq!(more[0].seq(), evs[n - 1].seq() + 1);
    assert_eq!(text_of(&more), "tok0 tok1 ");
    let (_, list) = d.get("/v1/sessions").await;
    assert_eq!(list["sessions"][0]["id"], sid.as_str());
    // A single node is no fleet.
    let (status, cluster) = d.get("/v1/cluster").await;
    assert_eq!(status, 200);
    assert_eq!(
        cluster,
        json!({"nodeId": null, "busConnected": null, "nodes": []})
    );
}

#[tokio::test]
async fn a_second_single_node_on_the_same_postgresql_database_refuses_to_start() {
    let Some(database) = postgres_database().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let dir = new_dir();
    let d = Daemon::start_in(dir.clone(), &mock, on_postgres(&database, &dir));
    let other = new_dir();
    let out = Daemon::start_refused(&other, &mock, on_postgres(&database, &other));
    assert!(
        out.contains("in use by another elfgate node that runs without [cluster]"),
        "{out}"
    );
    // The first one is untouched.
    let (sid, run) = d.create(chat("still here", "mock:tokens=2")).await;
    let evs = d.all_events_until_complete_of(&sid, &run).await;
    assert_eq!(text_of(&evs), "tok0 tok1 ");
}

#[tokio::test]
async fn a_postgresql_restart_mid_run_loses_no_event_and_requests_meanwhile_are_503() {
    let Some(pg) = PrivatePostgres::start() else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let dir = new_dir();
    let d = Daemon::start_in(dir.clone(), &mock, on_postgres(&pg.url, &dir));
    let (sid, run) = d.create(chat("long", "mock:tokens=60,delay_ms=20")).await;
    let mut sse = d.events(&sid, None).await;
    let mut live = sse.until_text("tok0 tok1 tok2 ").await;

    pg.stop();
    // While the server is down, what needs the database answers 503 with Retry-After.
    let resp = d
        .http
        .get(d.url(&format!("/v1/sessions/{sid}/messages")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    assert!(resp.headers().get("retry-after").is_some());
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unavailable", "{body}");
    let (status, body) = d
        .post("/v1/sessions", chat("refused", "mock:tokens=2"))
        .await;
    assert_eq!(status, 503, "{body}");
    pg.start_again();

    // The run streamed on; it ends once, with the storage error that says its events were late,
    // and every one of them is in the log.
    live.extend(sse.until_complete(&run).await);
    assert_eq!(live[0].seq(), 1);
    assert_contiguous(&live);
    let complete = live.last().unwrap();
    assert_eq!(complete.event, "complete");
    assert!(text_of(&live).ends_with("tok59 "), "{}", text_of(&live));
    let mut replay = d.events(&sid, None).await;
    let logged = replay.until_complete(&run).await;
    assert_eq!(logged[0].seq(), 1);
    assert_contiguous(&logged);
    assert_eq!(text_of(&logged), text_of(&live));
    assert_eq!(logged.iter().filter(|e| e.event == "complete").count(), 1);
    assert!(
        logged
            .iter()
            .any(|e| e.event == "error" && e.data["error"]["code"] == "storage"),
        "{:?}",
        types(&logged)
    );
    let (status, r) = d.get(&format!("/v1/sessions/{sid}/runs/{run}")).await;
    assert_eq!(status, 200);
    assert_eq!(r["status"], "failed", "{r}");

    // And the daemon serves new sessions again without a restart.
    let (sid2, run2) = d.create(chat("after", "mock:tokens=2")).await;
    let evs = d.all_events_until_complete_of(&sid2, &run2).await;
    assert_eq!(text_of(&evs), "tok0 tok1 ");
}

#[tokio::test]
async fn a_cluster_section_is_refused_with_sqlite_and_checked_with_postgresql() {
    let mock = MockServer::start().await.unwrap();
    let cluster = |keys: &str| Opts {
        extra_toml: format!(
            "\n[cluster]\nnats_url = \"nats://127.0.0.1:4222\"\n{}{keys}\n",
            elfgate_test_support::services::fleet_secret_key()
        ),
        env: vec![elfgate_test_support::services::fleet_secret_var()],
        ..Opts::default()
    };
    // SQLite cannot be shared: refused by name, whatever the rest says.
    let out = Daemon::start_refused(&new_dir(), &mock, cluster(""));
    assert!(
        out.contains("[cluster] needs storage.url = \"postgres://")
            && out.contains("cannot be shared"),
        "{out}"
    );

    let Some(database) = postgres_database().await else {
        return;
    };
    let dir = new_dir();
    let with_pg = |keys: &str| {
        let mut o = cluster(keys);
        o.env.extend(on_postgres(&database, &dir).env);
        o
    };
    for (keys, says) in [
        (
            "lease_secs = 1",
            "cluster.lease_secs (1) must be at least 2",
        ),
        (
            "heartbeat_secs = 3\nlease_secs = 5",
            "at least twice cluster.heartbeat_secs (3)",
        ),
        ("node_id = \"a b\"", "cluster.node_id 'a b' must be"),
    ] {
        let out = Daemon::start_refused(&dir, &mock, with_pg(keys));
        assert!(out.contains(says), "{keys}: {out}");
    }
    // A port the system picks cannot name the node: its id must be given.
    let out = Daemon::start_refused(&dir, &mock, with_pg(""));
    assert!(out.contains("cluster.node_id is required"), "{out}");
    // The database was not touched by the refused starts: a single node starts on it.
    let d = Daemon::start_in(dir.clone(), &mock, on_postgres(&database, &dir));
    let (status, list) = d.get("/v1/sessions").await;
    assert_eq!(status, 200);
    assert_eq!(list["sessions"].as_array().unwrap().len(), 0);
}
