//! The slow-subscriber rule, through HTTP/SSE on loopback: a client that stops reading falls
//! behind, is sent `reset` and disconnected, nobody else is held up, and reconnecting with its
//! cursor it misses nothing. The daemon runs in this process so that the test can publish a burst
//! on the session's bus much larger than the buffers between the daemon and that client.

use crate::common;

use common::{Ev, GUARD, Sse};
use elfgate_core::{EventPayload, RunId, SessionId};
use elfgate_mockllm::MockServer;
use elfgate_server::app::Daemon;
use elfgate_server::config::Config;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Size of each burst event's message (an event is ~1.1 KB on the wire).
pub(crate) const MESSAGE_BYTES: usize = 1000;
/// The burst is published in batches, each once the reading subscriber has the previous one, so
/// that it is never more than a batch behind: the burst must not reset it too.
pub(crate) const BATCH: usize = 500;
/// The slow client's receive buffer (set before connecting, so the kernel does not grow it).
const SLOW_RECV_BUFFER: u32 = 64 * 1024;

/// How many burst events surely outrun every buffer between the daemon and a client that stopped
/// reading: the daemon's socket send buffer (its ceiling, `net.ipv4.tcp_wmem`, 4 MB by default),
/// the client's fixed receive buffer, the HTTP server's write buffer (under 1 MB), then the 1024
/// events a subscriber may lag — all doubled for margin (one run here: ~3.6 MB held, ~10 MB sent).
pub(crate) fn burst_events() -> usize {
    // Capped: a host tuned for huge buffers would otherwise make the test slow, not stronger.
    let send_max: usize = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_wmem")
        .ok()
        .and_then(|s| s.split_whitespace().nth(2)?.parse().ok())
        .unwrap_or(4 << 20)
        .min(16 << 20);
    let bytes = 2 * (send_max + 2 * SLOW_RECV_BUFFER as usize + (1 << 20));
    bytes / MESSAGE_BYTES + 2 * elfgate_core::SUBSCRIBER_BUFFER
}

/// An SSE client on a raw socket with a small, fixed receive buffer: unlike an HTTP client
/// library it reads nothing until asked.
pub(crate) struct SlowClient {
    stream: tokio::net::TcpStream,
    /// The response's head.
    pub(crate) head: String,
    raw: Vec<u8>,
    body: Vec<u8>,
    ended: bool,
}

impl SlowClient {
    pub(crate) async fn connect(addr: std::net::SocketAddr, path: &str, token: &str) -> SlowClient {
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\
             Authorization: Bearer {token}\r\n\r\n"
        );
        Self::send(addr, request).await
    }

    /// A client that POSTs `body` to `path` and reads the answer as slowly.
    pub(crate) async fn post(
        addr: std::net::SocketAddr,
        path: &str,
        token: &str,
        body: &Value,
    ) -> SlowClient {
        let body = body.to_string();
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nAuthorization: Bearer {token}\r\n\r\n{body}",
            body.len()
        );
        Self::send(addr, request).await
    }

    async fn send(addr: std::net::SocketAddr, request: String) -> SlowClient {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(SLOW_RECV_BUFFER).unwrap();
        let mut stream = socket.connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut c = SlowClient {
            stream,
            head: String::new(),
            raw: Vec::new(),
            body: Vec::new(),
            ended: false,
        };
        let head = loop {
            if let Some(end) = c.raw.windows(4).position(|w| w == b"\r\n\r\n") {
                break String::from_utf8(c.raw.drain(..end + 4).collect()).unwrap();
            }
            assert!(c.read_more().await, "no response head");
        };
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        c.head = head.clone();
        assert!(
            head.to_ascii_lowercase()
                .contains("transfer-encoding: chunked"),
            "{head}"
        );
        c
    }

    async fn read_more(&mut self) -> bool {
        let mut buf = [0u8; 16 * 1024];
        let n = tokio::time::timeout(GUARD, self.stream.read(&mut buf))
            .await
            .expect("nothing to read within the guard time")
            .unwrap();
        self.raw.extend_from_slice(&buf[..n]);
        n > 0
    }

    /// Moves whole chunks of the chunked body from `raw` to `body`; marks the last one.
    fn unchunk(&mut self) {
        loop {
            let Some(eol) = self.raw.windows(2).position(|w| w == b"\r\n") else {
                return;
            };
            let size_line = std::str::from_utf8(&self.raw[..eol]).unwrap();
            // A chunk extension (";name=value") may follow the size.
            let size_hex = size_line.split(';').next().unwrap_or_default().trim();
            let size = usize::from_str_radix(size_hex, 16).unwrap();
            if self.raw.len() < eol + 2 + size + 2 {
                return;
            }
            let data = &self.raw[eol + 2..eol + 2 + size];
            // Bytes: a character may be split between two chunks.
            self.body.extend_from_slice(data);
            self.raw.drain(..eol + 2 + size + 2);
            if size == 0 {
                self.ended = true;
                return;
            }
        }
    }

    /// A client of `sid`'s events at `addr` that has read them up to the run's first token
    /// (returned).
    pub(crate) async fn at_first_token(
        addr: std::net::SocketAddr,
        sid: &SessionId,
        token: &str,
    ) -> (SlowClient, Vec<Ev>) {
        let mut slow =
            SlowClient::connect(addr, &format!("/v1/sessions/{sid}/events"), token).await;
        let mut held = Vec::new();
        while held.last().is_none_or(|e: &Ev| e.event != "streamDelta") {
            held.push(slow.next().await.expect("stream ended early"));
        }
        (slow, held)
    }

    /// The body from where it was read up to, to its end.
    pub(crate) async fn rest(&mut self) -> Vec<u8> {
        loop {
            self.unchunk();
            if self.ended || !self.read_more().await {
                return std::mem::take(&mut self.body);
            }
        }
    }

    /// The next event, or None at the end of the body.
    pub(crate) async fn next(&mut self) -> Option<Ev> {
        loop {
            self.unchunk();
            if let Some(pos) = self.body.windows(2).position(|w| w == b"\n\n") {
                let frame = String::from_utf8(self.body.drain(..pos + 2).collect()).unwrap();
                match common::parse_frame(&frame) {
                    Some(ev) => return Some(ev),
                    None => continue,
                }
            }
            if self.ended || !self.read_more().await {
                return None;
            }
        }
    }
}

/// The slow client reads what the buffers held after `held` (every event from seq 1, in order,
/// none of them the burst's `last`), then `reset` from the first seq it lacks (without an id, so
/// its Last-Event-ID stays put), then the end of its stream. Returns its cursor.
pub(crate) async fn until_reset(
    slow: &mut SlowClient,
    mut held: Vec<Ev>,
    sid: SessionId,
    last: u64,
) -> u64 {
    let reset = loop {
        let ev = slow.next().await.expect("stream ended without reset");
        if ev.event == "reset" {
            break ev;
        }
        assert!(
            ev.seq() < last,
            "the stalled client got the whole burst: it was held for it"
        );
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
    assert_eq!(reset.data["fromSeq"], cursor + 1);
    assert_eq!(reset.data["sessionId"], sid.to_string());
    assert_eq!(reset.id, None);
    cursor
}

/// The reset client reconnects to `events` (`follow`: a client and the stream's URL) with its
/// `cursor` and gets every event it lacked up to `last`, once, in order; then the run, interrupted
/// through `owner` (a client and the base URL of the node that runs it), still ends normally, and
/// `reader` and the reconnected stream each see its one `complete`.
pub(crate) async fn resumed_then_interrupted(
    (follow, events): (&reqwest::Client, &str),
    (owner, base): (&reqwest::Client, &str),
    reader: &mut Sse,
    (sid, run): (SessionId, RunId),
    (cursor, last): (u64, u64),
) {
    let mut again = Sse::new(
        follow
            .get(events)
            .header("Last-Event-ID", cursor.to_string())
            .send()
            .await
            .unwrap(),
    );
    read_through(&mut again, cursor + 1, last).await;
    interrupt(owner, base, sid).await;
    for sse in [reader, &mut again] {
        let tail = sse.until_complete(&run.to_string()).await;
        assert_eq!(tail.last().unwrap().data["finishReason"], "interrupted");
        assert_eq!(tail.iter().filter(|e| e.event == "complete").count(), 1);
    }
}

/// Interrupts the run of `sid` through `http` and the node at `base`.
pub(crate) async fn interrupt(http: &reqwest::Client, base: &str, sid: SessionId) {
    let interrupted = http
        .post(format!("{base}/v1/sessions/{sid}/interrupt"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(interrupted.status().as_u16(), 200);
}

/// Publishes the burst on `bus` for `run` after seq `start`, in batches that `reader` reads along
/// (so it never falls more than a batch behind); returns the burst's last seq.
pub(crate) async fn burst_read_along(
    bus: &elfgate_core::SessionBus,
    run: RunId,
    start: u64,
    reader: &mut Sse,
) -> u64 {
    let message = "x".repeat(MESSAGE_BYTES);
    let (mut last, burst) = (start, burst_events() as u64);
    while last < start + burst {
        let from = last + 1;
        for _ in 0..BATCH {
            let payload = EventPayload::Processing {
                message: message.clone(),
            };
            last = bus.publish(Some(run), payload).await.seq;
        }
        read_through(reader, from, last).await;
    }
    last
}

/// A chat session started through `base` whose run streams one token and then stalls, which keeps
/// the session live.
pub(crate) async fn stalled_run(http: &reqwest::Client, base: &str) -> (SessionId, RunId) {
    let created: Value = http
        .post(format!("{base}/v1/sessions"))
        .json(&json!({"engine": "chat", "prompt": "hi", "model": "mock:stall_after=1"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    (
        created["sessionId"].as_str().unwrap().parse().unwrap(),
        created["runId"].as_str().unwrap().parse().unwrap(),
    )
}

/// Reads `sse` up to seq `upto`, asserting every event from `from` on arrives once, in order.
pub(crate) async fn read_through(sse: &mut Sse, from: u64, upto: u64) -> Vec<Ev> {
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

/// A daemon served in this process, so that a test can publish on its sessions' buses.
pub(crate) struct InProcess {
    state: elfgate_server::state::AppState,
    addr: std::net::SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<()>,
}

impl InProcess {
    /// The daemon of `config_file`, listening on a free loopback port.
    pub(crate) async fn start(config_file: &std::path::Path) -> InProcess {
        let daemon = Daemon::build(Config::load(Some(config_file)).unwrap())
            .await
            .unwrap();
        let state = daemon.state.clone();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(daemon.serve(listener, async move {
            let _ = stopped.await;
        }));
        InProcess {
            state,
            addr,
            stop,
            server,
        }
    }

    /// Its state, its token, its address and its base URL.
    pub(crate) fn parts(
        &self,
    ) -> (
        elfgate_server::state::AppState,
        String,
        std::net::SocketAddr,
        String,
    ) {
        let token = self.state.config.token.clone().unwrap();
        (
            self.state.clone(),
            token,
            self.addr,
            format!("http://{}", self.addr),
        )
    }

    /// Stops it and waits until it has.
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(());
        self.server.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_stops_reading_is_reset_and_resumes_from_its_cursor() {
    let mock = MockServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let daemon = InProcess::start(&common::write_config(dir.path(), &mock, "")).await;
    let (state, token, addr, base) = daemon.parts();

    let http = common::authenticated_client(Some(&token));
    let (sid, run) = stalled_run(&http, &base).await;
    let events = format!("{base}/v1/sessions/{sid}/events");

    // Two subscribers, both caught up with the run's first token.
    let (mut slow, held) = SlowClient::at_first_token(addr, &sid, &token).await;
    let mut reader = Sse::new(http.get(&events).send().await.unwrap());
    let start = reader.until_n("streamDelta", 1).await.last().unwrap().seq();

    // The burst: the reader reads along, the slow subscriber reads nothing.
    let bus = state.dispatcher.hub().get(sid).expect("the session's bus");
    let last = burst_read_along(&bus, run, start, &mut reader).await;

    // Now the slow subscriber reads: what the buffers held, in order, then `reset`.
    let cursor = until_reset(&mut slow, held, sid, last).await;

    resumed_then_interrupted(
        (&http, &events),
        (&http, &base),
        &mut reader,
        (sid, run),
        (cursor, last),
    )
    .await;

    daemon.stop().await;
}
