//! A gateway answer owes its caller the whole run: when its caller stops reading and the run's
//! events outrun the live channel, the answer reads what it missed from the session's log and
//! goes on, every piece once and in order (where an SSE client of the session is sent `reset`,
//! see slow_subscriber.rs). The daemon runs in this process so that the test can publish a burst
//! of the run's text on its session's bus, larger than every buffer before that caller.

use super::slow_subscriber::{InProcess, MESSAGE_BYTES, SlowClient, burst_events, interrupt};
use crate::common;
use elfgate_core::{Delta, DeltaKind, EventPayload, SessionId};
use elfgate_mockllm::MockServer;
use serde_json::{Value, json};

/// The pieces of text the answer's chunks carry, in order.
fn answer_pieces(body: &[u8]) -> Vec<String> {
    let body = std::str::from_utf8(body).unwrap();
    body.split("\n\n")
        .filter_map(|frame| frame.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .filter_map(|data| {
            let chunk: Value = serde_json::from_str(data).unwrap();
            chunk["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_answer_whose_caller_stalls_reads_what_it_missed_from_the_log() {
    let mock = MockServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let daemon = InProcess::start(&common::write_config(dir.path(), &mock, "")).await;
    let (state, token, addr, base) = daemon.parts();

    // A streamed answer whose run sends one token and stalls; its caller reads only the head.
    let mut caller = SlowClient::post(
        addr,
        "/v1/chat/completions",
        &token,
        &json!({"model": "mock/mock:tokens=5,stall_after=1", "stream": true,
                "messages": [{"role": "user", "content": "hello"}]}),
    )
    .await;
    let sid: SessionId = caller
        .head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("x-elfgate-session-id")
                .then(|| value.trim().to_string())
        })
        .expect("the answer names its session")
        .parse()
        .unwrap();
    let run = state.dispatcher.active().get(sid).expect("its run").run_id;

    // The burst: the run's text, far more than the buffers before the caller and the live
    // channel hold together.
    let bus = state.dispatcher.hub().get(sid).expect("the session's bus");
    let burst = burst_events();
    let pad = "x".repeat(MESSAGE_BYTES);
    for i in 0..burst {
        let payload = EventPayload::StreamDelta {
            delta: Delta {
                kind: DeltaKind::Text,
                text: format!("<{i}>{pad}"),
                signature: None,
            },
        };
        bus.publish(Some(run), payload).await;
    }
    // The run ends; then the caller reads its answer through.
    let http = common::authenticated_client(Some(&token));
    interrupt(&http, &base, sid).await;
    let body = caller.rest().await;
    assert!(
        std::str::from_utf8(&body)
            .unwrap()
            .trim_end()
            .ends_with("data: [DONE]"),
        "the answer did not end"
    );
    let burst_seen: Vec<String> = answer_pieces(&body)
        .into_iter()
        .filter_map(|p| Some(p.strip_prefix('<')?.split_once('>')?.0.to_string()))
        .collect();
    let expected: Vec<String> = (0..burst).map(|i| i.to_string()).collect();
    assert!(
        burst_seen == expected,
        "the burst's {burst} pieces did not come once each and in order: {} came, first {:?}",
        burst_seen.len(),
        &burst_seen[..burst_seen.len().min(5)]
    );

    daemon.stop().await;
}
