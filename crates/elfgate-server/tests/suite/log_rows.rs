//! The event log stores a run's consecutive deltas that share a commit as one row; a client
//! replaying the log sees exactly what was sent live, frame for frame, from the start or from a
//! cursor inside such a row, before and after a restart.

use crate::common;

use common::{Daemon, Ev, GUARD, Opts, Sse, chat};
use elfgate_mockllm::MockServer;
use elfgate_store::SqliteStore;
use std::time::Duration;

/// A paced stream's deltas wait up to this long for the log (instead of 50 ms), so that every
/// delta of the run shares one commit whatever the machine's speed, and merges into one row.
fn slow_log_opts() -> Opts {
    Opts {
        env: vec![("ELFGATE_STORAGE__LOG_LINGER_MS".into(), "3000".into())],
        ..Opts::default()
    }
}

/// The session's events after `after` until the first `complete`, in the frames the daemon sent.
async fn events_after(d: &Daemon, sid: &str, after: Option<u64>) -> Vec<Ev> {
    let mut rb = d
        .http
        .get(d.url(&format!("/v1/sessions/{sid}/events?until=complete")));
    if let Some(id) = after {
        rb = rb.header("Last-Event-ID", id.to_string());
    }
    let resp = rb.send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let mut sse = Sse::new(resp);
    let mut out = Vec::new();
    while let Some(ev) = sse.next().await {
        out.push(ev);
    }
    out
}

fn raw(evs: &[Ev]) -> Vec<&str> {
    evs.iter().map(|e| e.raw.as_str()).collect()
}

/// Waits until the session's bus has closed and its log is committed: a closing bus releases its
/// seq reservation down to its last seq, through the log writer, after the session's events.
async fn wait_log_settled(d: &Daemon, sid: &str, last_seq: u64) {
    use sqlx::Connection;
    let url = format!("sqlite://{}?mode=ro", d.dir.join("elfgate.db").display());
    let mut db = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        let reserved: i64 =
            sqlx::query_scalar("SELECT event_seq_reserved FROM sessions WHERE id = ?")
                .bind(sid)
                .fetch_one(&mut db)
                .await
                .unwrap();
        if reserved as u64 == last_seq {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the session's bus did not close within {GUARD:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    db.close().await.unwrap();
}

/// Replays from the start and from a cursor in the middle of the run's deltas, and checks both
/// against the live frames.
async fn assert_replays_match(d: &Daemon, sid: &str, live: &[Ev], cursor: u64) {
    let from_start = events_after(d, sid, None).await;
    assert_eq!(raw(&from_start), raw(live));
    let from_cursor = events_after(d, sid, Some(cursor)).await;
    let expected: Vec<&Ev> = live.iter().filter(|e| e.seq() > cursor).collect();
    assert_eq!(
        raw(&from_cursor),
        expected.iter().map(|e| e.raw.as_str()).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn merged_delta_rows_replay_exactly_what_was_sent_live() {
    let mock = MockServer::start().await.unwrap();
    let mut d = Daemon::start(&mock, slow_log_opts());
    let (sid, _run) = d.create(chat("count", "mock:tokens=30,delay_ms=5")).await;
    let live = events_after(&d, &sid, None).await;
    assert_eq!(live.last().unwrap().event, "complete");
    let deltas: Vec<u64> = live
        .iter()
        .filter(|e| e.event == "streamDelta")
        .map(Ev::seq)
        .collect();
    assert!(deltas.len() >= 3, "too few deltas to merge: {deltas:?}");
    // A cursor inside the run's deltas: its row starts before it and goes on after it.
    let cursor = deltas[deltas.len() / 2];

    // Once the session's bus has closed, a new stream reads the log.
    let last = live.last().unwrap().seq();
    wait_log_settled(&d, &sid, last).await;
    assert_replays_match(&d, &sid, &live, cursor).await;

    // Fewer rows than events: the deltas share rows.
    assert!(d.terminate().success());
    let url = format!("sqlite://{}", d.dir.join("elfgate.db").display());
    let store = SqliteStore::open(&url).await.unwrap();
    let (rows, events) = store.event_log_rows(sid.parse().unwrap()).await.unwrap();
    store.close().await;
    drop(store);
    assert_eq!(events, live.len() as u64);
    let others = (live.len() - deltas.len()) as u64;
    assert!(
        rows < events && rows > others,
        "{rows} rows for {events} events, {} of them deltas",
        deltas.len()
    );

    // The same after a restart.
    let d = Daemon::start_in(d.dir.clone(), &mock, slow_log_opts());
    assert_replays_match(&d, &sid, &live, cursor).await;
}
