//! An accepted prompt is never lost and no run hangs: a gateway request that fails or whose
//! caller leaves ends its own run only (the prompts queued behind it still run); a run whose log
//! writes fail (a full disk) ends once space returns, exactly once, its events all logged.

use crate::common;

use common::{Daemon, Opts, Sse};
use elfgate_mockllm::MockServer;
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Notify, watch};

/// What a [`HeldUpstream`] answers once its gate is open.
#[derive(Clone)]
enum Held {
    /// `503`.
    Unavailable,
    /// A streamed chat completion: `first` at once, then (once the gate is open) each of `rest`
    /// as a text chunk, then the end.
    Stream { first: String, rest: Vec<String> },
}

/// A provider (OpenAI kind) whose requests are held until the test opens the gate. It tells the
/// test when a request has arrived.
struct HeldUpstream {
    base: String,
    arrived: Arc<Notify>,
    gate: watch::Sender<bool>,
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    let c = json!({"id": "held", "object": "chat.completion.chunk", "created": 0, "model": "m",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    format!("data: {c}\n\n")
}

impl HeldUpstream {
    async fn start() -> HeldUpstream {
        Self::answering(Held::Unavailable).await
    }

    async fn answering(held: Held) -> HeldUpstream {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let arrived = Arc::new(Notify::new());
        let (gate, open) = watch::channel(false);
        let told = arrived.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let told = told.clone();
                let mut open = open.clone();
                let held = held.clone();
                tokio::spawn(async move {
                    read_request(&mut conn).await;
                    match held {
                        Held::Unavailable => {
                            told.notify_one();
                            let _ = open.wait_for(|o| *o).await;
                            let body =
                                r#"{"error":{"message":"overloaded","type":"server_error"}}"#;
                            let resp = format!(
                                "HTTP/1.1 503 Service Unavailable\r\ncontent-type: \
                                 application/json\r\ncontent-length: {}\r\n\
                                 connection: close\r\n\r\n{body}",
                                body.len()
                            );
                            let _ = conn.write_all(resp.as_bytes()).await;
                        }
                        Held::Stream { first, rest } => {
                            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                                        cache-control: no-cache\r\nconnection: close\r\n\r\n";
                            let start = chunk(json!({"role": "assistant", "content": first}), None);
                            let _ = conn.write_all(format!("{head}{start}").as_bytes()).await;
                            told.notify_one();
                            let _ = open.wait_for(|o| *o).await;
                            for text in rest {
                                let c = chunk(json!({"content": text}), None);
                                let _ = conn.write_all(c.as_bytes()).await;
                            }
                            let end = chunk(json!({}), Some("stop"));
                            let _ = conn
                                .write_all(format!("{end}data: [DONE]\n\n").as_bytes())
                                .await;
                        }
                    }
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

/// A small filesystem of its own (a tmpfs), unmounted when dropped.
struct SmallDisk {
    path: std::path::PathBuf,
}

impl SmallDisk {
    /// None (the test then skips, saying so) when this process may not mount.
    fn mount(megabytes: u32) -> Option<SmallDisk> {
        let path = tempfile::tempdir().unwrap().keep();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={megabytes}m"), "tmpfs"])
            .arg(&path)
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(SmallDisk { path })
    }

    /// Fills what is left of it with one file, until the filesystem refuses to take more.
    fn fill(&self) -> std::path::PathBuf {
        use std::io::Write;
        let filler = self.path.join("filler");
        let mut f = std::fs::File::create(&filler).unwrap();
        let block = vec![0u8; 64 * 1024];
        loop {
            match f.write(&block) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    assert_eq!(e.raw_os_error(), Some(28), "{e}"); // ENOSPC
                    break;
                }
            }
        }
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.path)
            .status();
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().next())
            == Some("0")
    })
}

/// Reads the session's whole log over `?until=complete`, asking again while the daemon answers
/// 503 (its log is still being written).
async fn replay_until_complete(d: &Daemon, sid: &str) -> Vec<common::Ev> {
    let deadline = tokio::time::Instant::now() + common::GUARD;
    loop {
        let resp = d
            .http
            .get(d.url(&format!(
                "/v1/sessions/{sid}/events?afterSeq=0&until=complete"
            )))
            .send()
            .await
            .unwrap();
        match resp.status().as_u16() {
            200 => {
                let mut sse = Sse::new(resp);
                let mut evs = Vec::new();
                while let Some(ev) = sse.next().await {
                    evs.push(ev);
                }
                return evs;
            }
            503 => {
                assert!(resp.headers().contains_key("retry-after"));
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the log was never readable again"
                );
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            s => panic!("{s}: {}", resp.text().await.unwrap()),
        }
    }
}

#[tokio::test]
async fn a_run_whose_log_writes_fail_on_a_full_disk_ends_once_with_every_event_logged() {
    if !is_root() {
        eprintln!("skipped: mounting a small tmpfs for the database needs root (CI runs as root)");
        return;
    }
    let Some(disk) = SmallDisk::mount(16) else {
        panic!("running as root, but a tmpfs could not be mounted");
    };
    let mock = MockServer::start().await.unwrap();
    // An answer of 3 MB: more than any space the database's files already hold.
    let big: Vec<String> = (0..100)
        .map(|i| format!("{}{i} ", "x".repeat(30_000)))
        .collect();
    let held = HeldUpstream::answering(Held::Stream {
        first: "first ".into(),
        rest: big.clone(),
    })
    .await;
    let mut d = Daemon::start_in(
        disk.path.clone(),
        &mock,
        Opts {
            extra_toml: held.toml(),
            ..Opts::default()
        },
    );
    let (sid, rid) = d
        .create(json!({"engine": "chat", "prompt": "a long answer, please",
                       "providerId": "held", "model": "m"}))
        .await;
    let mut live = d.events(&sid, None).await;
    let mut seen = Vec::new();
    while let Some(ev) = live.next().await {
        let first = ev.event == "streamDelta";
        seen.push(ev);
        if first {
            break;
        }
    }
    // The disk fills up while the run streams the rest of its answer.
    let filler = disk.fill();
    held.open();
    loop {
        let ev = live.next().await.expect("the live stream ended");
        let storage = ev.event == "error" && ev.data["error"]["code"] == "storage";
        seen.push(ev);
        if storage {
            break;
        }
    }
    // Space returns: the run ends, once.
    std::fs::remove_file(filler).unwrap();
    seen.extend(live.until_complete(&rid).await);
    let complete = seen.last().unwrap();
    assert_eq!(
        complete.data["finishReason"],
        "error",
        "{:?}",
        common::types(&seen)
    );
    assert_eq!(seen.iter().filter(|e| e.event == "complete").count(), 1);
    let replay = replay_until_complete(&d, &sid).await;
    let seqs: Vec<u64> = replay.iter().map(super::super::common::Ev::seq).collect();
    assert_eq!(
        seqs,
        (1..=complete.seq()).collect::<Vec<_>>(),
        "{:?}",
        common::types(&replay)
    );
    let text: String = replay
        .iter()
        .filter(|e| e.event == "streamDelta")
        .map(|e| e.data["delta"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, format!("first {}", big.concat()));
    let (_, run) = d.get(&format!("/v1/sessions/{sid}/runs/{rid}")).await;
    assert_eq!(run["status"], "failed", "{run}");
    assert!(
        run["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("storage")),
        "{run}"
    );

    // What a restart reads is the same log: every event, one complete, and the answer stored.
    drop(live);
    assert!(d.terminate().success());
    let d = Daemon::start_in(disk.path.clone(), &mock, Opts::default());
    let again = replay_until_complete(&d, &sid).await;
    assert_eq!(
        again
            .iter()
            .map(super::super::common::Ev::seq)
            .collect::<Vec<_>>(),
        seqs,
        "the log after a restart"
    );
    let (_, msgs) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    let answer = msgs["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant")
        .expect("the answer is stored");
    assert!(
        answer.to_string().contains("x99 "),
        "the whole answer is stored"
    );
    drop(d);
    let db = sqlx::SqlitePool::connect(&format!(
        "sqlite://{}",
        disk.path.join("elfgate.db").display()
    ))
    .await
    .unwrap();
    let check: String = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(check, "ok");
}
