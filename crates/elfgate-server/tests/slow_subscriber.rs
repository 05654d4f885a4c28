//! The slow-subscriber rule, through HTTP/SSE on loopback: a client that stops reading falls
//! behind, is sent `reset` and disconnected, nobody else is held up, and reconnecting with its
//! cursor it misses nothing. The daemon runs in this process so that the test can publish a burst
//! on the session's bus much larger than the buffers between the daemon and that client.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Ev, Sse};
use elfgate_core::{EventPayload, RunId, SessionId};
use elfgate_mockllm::MockServer;
use elfgate_server::app::Daemon;
use elfgate_server::config::Config;
use serde_json::{Value, json};

/// Events in the burst and the size of each one's message: ~13 MB in all, over twice what the
/// socket buffers (up to 4 MB for sending on Linux by default) and the HTTP layers on both sides
/// can hold, so that far more than a subscriber's buffer (1024 events) is left for the client
/// that stopped reading.
const BURST: usize = 12_000;
const MESSAGE_BYTES: usize = 1000;
/// The burst is published in batches, each once the reading subscriber has the previous one, so
/// that it is never more than a batch behind: the burst must not reset it too.
const BATCH: usize = 500;

/// Reads `sse` up to seq `upto`, asserting every event from `from` on arrives once, in order.
async fn read_through(sse: &mut Sse, from: u64, upto: u64) -> Vec<Ev> {
    let mut out = Vec::new();
    let mut next = from;
    while next <= upto {
        let ev = sse.next().await.expect("stream ended early");
        assert_ne!(ev.event, "reset", "a reading subscriber was reset");
        assert_eq!(ev.seq(), next, "gap or duplicate");
        next += 1;
        out.push(ev);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_stops_reading_is_reset_and_resumes_from_its_cursor() {
    let mock = MockServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config_file = common::write_config(dir.path(), &mock, "");
    let daemon = Daemon::build(Config::load(Some(&config_file)).unwrap())
        .await
        .unwrap();
    let state = daemon.state.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(daemon.serve(listener, async move {
        let _ = stopped.await;
    }));

    let http = reqwest::Client::new();
    // A run that streams one token and then stalls keeps the session live.
    let created: Value = http
        .post(format!("{base}/v1/sessions"))
        .json(&json!({"engine": "chat", "prompt": "hi", "model": "mock:stall_after=1"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let sid: SessionId = created["sessionId"].as_str().unwrap().parse().unwrap();
    let run: RunId = created["runId"].as_str().unwrap().parse().unwrap();
    let events = format!("{base}/v1/sessions/{sid}/events");

    // Two subscribers, both caught up with the run's first token.
    let mut slow = Sse::new(http.get(&events).send().await.unwrap());
    let mut held = slow.until_n("streamDelta", 1).await;
    let mut reader = Sse::new(http.get(&events).send().await.unwrap());
    let start = reader.until_n("streamDelta", 1).await.last().unwrap().seq();

    // The burst: the reader reads along, the slow subscriber reads nothing.
    let bus = state.dispatcher.hub().get(sid).expect("the session's bus");
    let message = "x".repeat(MESSAGE_BYTES);
    let mut last = start;
    while last < start + BURST as u64 {
        let from = last + 1;
        for _ in 0..BATCH {
            let payload = EventPayload::Processing {
                message: message.clone(),
            };
            last = bus.publish(Some(run), &payload).seq;
        }
        read_through(&mut reader, from, last).await;
    }

    // Now the slow subscriber reads: what the buffers held, in order, then `reset` from the first
    // seq it lacks (without an id, so its Last-Event-ID stays put), then the end of its stream.
    let reset = loop {
        let ev = slow.next().await.expect("stream ended without reset");
        if ev.event == "reset" {
            break ev;
        }
        held.push(ev);
    };
    assert!(
        slow.next().await.is_none(),
        "the stream went on after reset"
    );
    for (i, e) in held.iter().enumerate() {
        assert_eq!(e.seq(), i as u64 + 1, "gap or duplicate before the reset");
    }
    let cursor = held.last().unwrap().seq();
    assert!(cursor < last, "the slow subscriber was not behind");
    assert_eq!(reset.data["fromSeq"], cursor + 1);
    assert_eq!(reset.data["sessionId"], sid.to_string());
    assert_eq!(reset.id, None);

    // Reconnecting with its cursor, it gets every event it lacked, once, in order.
    let mut again = Sse::new(
        http.get(&events)
            .header("Last-Event-ID", cursor.to_string())
            .send()
            .await
            .unwrap(),
    );
    read_through(&mut again, cursor + 1, last).await;

    // The run still ends normally; both live subscribers see its one `complete`.
    let interrupted = http
        .post(format!("{base}/v1/sessions/{sid}/interrupt"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(interrupted.status().as_u16(), 200);
    for sse in [&mut reader, &mut again] {
        let tail = sse.until_complete(&run.to_string()).await;
        assert_eq!(tail.last().unwrap().data["finishReason"], "interrupted");
        assert_eq!(tail.iter().filter(|e| e.event == "complete").count(), 1);
    }

    let _ = stop.send(());
    server.await.unwrap().unwrap();
}
