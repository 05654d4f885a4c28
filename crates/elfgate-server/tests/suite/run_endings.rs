//! An accepted prompt is never lost and no run hangs: a gateway request that fails or whose
//! caller leaves ends its own run only (the prompts queued behind it still run); a run whose log
//! writes fail (a full disk) ends once space returns, its events all logged; a gateway caller of
//! an engine route is never left waiting on a permission request nobody can answer.

use crate::common;

use common::{Daemon, Opts, Sse};
use elfgate_mockllm::MockServer;
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Notify, watch};

/// A provider whose first request is held until the test opens the gate; then it, and every
/// later request, is answered `503`. It tells the test when a request has arrived.
struct HeldUpstream {
    base: String,
    arrived: Arc<Notify>,
    gate: watch::Sender<bool>,
}

impl HeldUpstream {
    async fn start() -> HeldUpstream {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let arrived = Arc::new(Notify::new());
        let (gate, open) = watch::channel(false);
        let told = arrived.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let told = told.clone();
                let mut open = open.clone();
                tokio::spawn(async move {
                    read_request(&mut conn).await;
                    told.notify_one();
                    let _ = open.wait_for(|o| *o).await;
                    let body = r#"{"error":{"message":"overloaded","type":"server_error"}}"#;
                    let resp = format!(
                        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
                         content-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = conn.write_all(resp.as_bytes()).await;
                    let _ = conn.shutdown().await;
                });
            }
        });
        HeldUpstream {
            base,
            arrived,
            gate,
        }
    }

    /// The provider's config table, named `held`.
    fn toml(&self) -> String {
        format!(
            "[providers.held]\nkind = \"openai\"\nbase_url = \"{}/v1\"\ndefault_model = \"m\"\n\
             idle_timeout_secs = 30\nrequest_timeout_secs = 10\n",
            self.base
        )
    }

    fn open(&self) {
        self.gate.send_replace(true);
    }
}

/// Reads one HTTP request (head and a `content-length` body), so that answering it does not
/// reset a connection with unread data.
async fn read_request(conn: &mut tokio::net::TcpStream) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = conn.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        if buf.len() >= end + 4 + len {
            return;
        }
    }
}

/// A gateway session made by one quick request; its id.
async fn gateway_session(d: &Daemon) -> String {
    let resp = d
        .http
        .post(d.url("/v1/chat/completions"))
        .json(&json!({"model": "mock/mock:tokens=1",
                      "messages": [{"role": "user", "content": "first"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let sid = resp.headers()["x-elfgate-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    resp.text().await.unwrap();
    sid
}

/// Another client's prompt, queued behind the session's run; its run id.
async fn enqueue(d: &Daemon, sid: &str, prompt: &str) -> String {
    let (status, v) = d
        .post(
            &format!("/v1/sessions/{sid}/messages"),
            json!({"prompt": prompt, "onBusy": "enqueue",
                   "providerId": "mock", "model": "mock:tokens=2"}),
        )
        .await;
    assert_eq!(status, 202, "{v}");
    assert_eq!(v["status"], "queued", "{v}");
    v["runId"].as_str().unwrap().to_string()
}

/// The queued prompt ran to its end and both its messages are stored.
async fn assert_ran_and_stored(d: &Daemon, sid: &str, run: &str, prompt: &str) {
    let evs = d.all_events_until_complete_of(sid, run).await;
    let complete = evs.last().unwrap();
    assert_eq!(
        complete.data["finishReason"],
        "stop",
        "the queued run's events: {:?}",
        common::types(&evs)
    );
    let (status, r) = d.get(&format!("/v1/sessions/{sid}/runs/{run}")).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["status"], "completed", "{r}");
    let (_, msgs) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    let of_run: Vec<&Value> = msgs["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["runId"] == run)
        .collect();
    let text = serde_json::to_string(&of_run).unwrap();
    assert!(
        of_run.len() == 2 && text.contains(prompt) && text.contains("tok0 tok1 "),
        "the queued prompt's messages: {text}"
    );
}

/// The status of the run a gateway request made: the session's run other than `others`.
async fn run_status_besides(d: &Daemon, sid: &str, others: &[&str]) -> (String, Value) {
    let mut sse: Sse = d.events(sid, None).await;
    let mut runs = Vec::new();
    // The first request's run and the gateway request's run, then the queued ones.
    while runs.len() < 2 + others.len() {
        let ev = sse.next().await.expect("stream ended");
        if ev.event == "complete" {
            runs.push(ev);
        }
    }
    let gw = runs
        .iter()
        .skip(1)
        .find(|e| !others.contains(&e.run()))
        .unwrap();
    let (_, r) = d
        .get(&format!("/v1/sessions/{sid}/runs/{}", gw.run()))
        .await;
    (gw.data["finishReason"].as_str().unwrap().to_string(), r)
}

#[tokio::test]
async fn a_gateway_request_whose_upstream_fails_leaves_the_prompt_queued_behind_it_to_run() {
    let mock = MockServer::start().await.unwrap();
    let held = HeldUpstream::start().await;
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: held.toml(),
            ..Opts::default()
        },
    );
    let sid = gateway_session(&d).await;
    let http = d.http.clone();
    let url = d.url("/v1/chat/completions");
    let header_sid = sid.clone();
    let gateway = tokio::spawn(async move {
        let resp = http
            .post(url)
            .header("x-elfgate-session-id", header_sid)
            .json(&json!({"model": "held/m",
                          "messages": [{"role": "user", "content": "held one"}]}))
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.text().await.unwrap())
    });
    // The gateway's run is waiting for its provider: another client's prompt queues behind it.
    tokio::time::timeout(common::GUARD, held.arrived.notified())
        .await
        .expect("the gateway's request never reached its provider");
    let queued = enqueue(&d, &sid, "queued behind a failing call").await;
    held.open();
    let (status, body) = gateway.await.unwrap();
    assert_eq!(status, 503, "{body}");
    assert_ran_and_stored(&d, &sid, &queued, "queued behind a failing call").await;
    let (finish, run) = run_status_besides(&d, &sid, &[&queued]).await;
    assert_eq!(finish, "error", "{run}");
}

#[tokio::test]
async fn a_gateway_caller_that_leaves_interrupts_its_own_run_and_not_the_prompt_queued_behind_it() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let sid = gateway_session(&d).await;
    let mut resp = d
        .http
        .post(d.url("/v1/chat/completions"))
        .header("x-elfgate-session-id", &sid)
        .json(
            &json!({"model": "mock/mock:tokens=5,stall_after=1", "stream": true,
                      "messages": [{"role": "user", "content": "stalled one"}]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // Its first token has arrived; the upstream stalls after it.
    resp.chunk()
        .await
        .unwrap()
        .expect("the stream's first chunk");
    let queued = enqueue(&d, &sid, "queued behind a caller who left").await;
    drop(resp);
    assert_ran_and_stored(&d, &sid, &queued, "queued behind a caller who left").await;
    let (finish, run) = run_status_besides(&d, &sid, &[&queued]).await;
    assert_eq!(finish, "interrupted", "{run}");
    assert_eq!(run["status"], "interrupted", "{run}");
}
