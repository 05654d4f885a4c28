//! Helpers shared by the wire-level test files.

// Each test file uses its own subset of the helpers.
#![allow(
    dead_code,
    reason = "each test binary uses its own part of the helpers"
)]

use std::time::Duration;

use elfgate_mockllm::{MockServer, Outcome, RecordedRequest};
use futures_util::StreamExt;

/// One SSE frame: (event name, data).
pub type SseFrame = (Option<String>, String);

pub fn parse_sse(text: &str) -> Vec<SseFrame> {
    text.split("\n\n")
        .filter(|f| !f.trim().is_empty())
        .map(|f| {
            let mut event = None;
            let mut data = String::new();
            for line in f.lines() {
                if let Some(e) = line.strip_prefix("event: ") {
                    event = Some(e.to_string());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push_str(d);
                }
            }
            (event, data)
        })
        .collect()
}

/// A safety net so that a broken mock fails a test instead of hanging it; never used to wait for
/// something to happen.
pub const GUARD: Duration = Duration::from_secs(30);

/// Polls (for at most the guard time) until request `index` has the outcome `want`: the mock
/// records an outcome when the response body ends or is dropped, a moment after the client saw it.
pub async fn wait_for_outcome(server: &MockServer, index: usize, want: Outcome) -> RecordedRequest {
    let deadline = tokio::time::Instant::now() + GUARD;
    let mut last = None;
    while tokio::time::Instant::now() < deadline {
        let reqs = server.requests();
        if let Some(r) = reqs.get(index) {
            if r.outcome == want {
                return r.clone();
            }
            last = Some(r.outcome);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("request {index} never reached {want:?}; last outcome {last:?}");
}

/// Reads a response body to its end and says whether it ended with a transport error (the mock
/// dropped the connection) rather than normally.
pub async fn read_until_end(resp: reqwest::Response) -> (String, bool) {
    let mut stream = resp.bytes_stream();
    let mut buf = Vec::new();
    let mut errored = false;
    while let Some(item) = stream.next().await {
        match item {
            Ok(b) => buf.extend_from_slice(&b),
            Err(_) => {
                errored = true;
                break;
            }
        }
    }
    (String::from_utf8(buf).unwrap(), errored)
}

/// Checks a streamed answer of 5 tokens that `drop_after=2` cut: the body ends with a transport
/// error right after `tok1`, and request `index` is recorded as dropped. Returns the body.
pub async fn assert_dropped_after_two(
    server: &MockServer,
    index: usize,
    resp: reqwest::Response,
) -> String {
    assert_eq!(resp.status(), 200);
    let (text, errored) = read_until_end(resp).await;
    assert!(errored, "body should end with a transport error");
    assert!(
        text.contains("\"tok0 \"") && text.contains("\"tok1 \"") && !text.contains("tok2"),
        "{text}"
    );
    wait_for_outcome(server, index, Outcome::Dropped).await;
    text
}

/// The request log as a client reads it: `GET /_mock/requests`, as raw JSON.
pub async fn request_log(server: &MockServer) -> serde_json::Value {
    reqwest::get(format!("{}/_mock/requests", server.base_url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Reads a streamed body until `marker` has arrived (within the guard time).
pub async fn read_until(
    body: &mut (impl futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin),
    marker: &str,
) {
    let mut buf = Vec::new();
    while !String::from_utf8_lossy(&buf).contains(marker) {
        let chunk = tokio::time::timeout(GUARD, body.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        buf.extend_from_slice(&chunk);
    }
}
