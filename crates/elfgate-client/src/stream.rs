//! A session's event stream that survives dropped connections: it reconnects with
//! `Last-Event-ID` set to the last event it handed out, so nothing is lost or repeated.

use super::conn::{ClientError, Conn};
use elfgate_core::{EventEnvelope, EventPayload};
use elfgate_llm::sse::SseParser;
use serde_json::Value;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How long the stream keeps trying to reconnect before it gives up.
const RECONNECT_FOR: Duration = Duration::from_secs(30);

/// One event of the stream: typed, and the JSON as the daemon sent it (for `--json`).
pub struct StreamEvent {
    /// The envelope read from the JSON.
    pub envelope: EventEnvelope,
    /// The JSON text of the frame.
    pub json: String,
}

/// The envelope's seq alone: what is read of an event this client cannot read (a newer
/// daemon's type), so that the cursor still moves past it.
#[derive(serde::Deserialize)]
struct SeqOnly {
    seq: Option<u64>,
}

/// The events of one session, in order, across reconnections.
pub struct EventStream {
    conn: Conn,
    session: String,
    last_seq: Option<u64>,
    resp: Option<reqwest::Response>,
    parser: SseParser,
    queue: VecDeque<StreamEvent>,
    /// Since when connecting has failed, if it is failing.
    failing_since: Option<Instant>,
    attempts: u32,
}

impl EventStream {
    /// The events of `session` after seq `after` (from its first event with `None`).
    pub fn new(conn: &Conn, session: &str, after: Option<u64>) -> EventStream {
        EventStream {
            conn: conn.clone(),
            session: session.to_string(),
            last_seq: after,
            resp: None,
            parser: SseParser::new(),
            queue: VecDeque::new(),
            failing_since: None,
            attempts: 0,
        }
    }

    /// The next event. Cancel-safe: nothing is lost when a `select!` drops this future.
    pub async fn next(&mut self) -> Result<StreamEvent, ClientError> {
        loop {
            if let Some(ev) = self.queue.pop_front() {
                if let EventPayload::Reset { .. } = ev.envelope.payload {
                    // The daemon dropped us as too slow: come back from our cursor.
                    self.resp = None;
                    self.queue.clear();
                    continue;
                }
                self.advance(ev.envelope.seq);
                return Ok(ev);
            }
            let Some(resp) = self.resp.as_mut() else {
                self.connect().await?;
                continue;
            };
            match resp.chunk().await {
                Ok(Some(bytes)) => {
                    let queue = &mut self.queue;
                    let mut unread = None;
                    self.parser.feed(&bytes, &mut |_event, data| {
                        match serde_json::from_str::<EventEnvelope>(data) {
                            Ok(envelope) => queue.push_back(StreamEvent {
                                envelope,
                                json: data.to_string(),
                            }),
                            // Not shown, but not read again after a reconnection either.
                            Err(_) => {
                                if let Ok(SeqOnly { seq: Some(seq) }) = serde_json::from_str(data) {
                                    unread = Some(seq);
                                }
                            }
                        }
                        true
                    });
                    if self.queue.is_empty() {
                        self.advance(unread);
                    }
                }
                // The connection ended or broke: a frame cut in half is dropped, and the
                // next connection starts after the last whole event.
                Ok(None) | Err(_) => {
                    self.resp = None;
                    self.parser = SseParser::new();
                }
            }
        }
    }

    /// Moves the cursor to `seq`; a re-announced permission request carries its original, older
    /// seq and leaves the cursor where it is.
    fn advance(&mut self, seq: Option<u64>) {
        if let Some(seq) = seq
            && self.last_seq.is_none_or(|l| seq > l)
        {
            self.last_seq = Some(seq);
        }
    }

    async fn connect(&mut self) -> Result<(), ClientError> {
        if self.attempts > 0 {
            let delay = Duration::from_millis(200u64 << self.attempts.min(4));
            tokio::time::sleep(delay).await;
        }
        let mut req = self
            .conn
            .http
            .get(
                self.conn
                    .url(&format!("/v1/sessions/{}/events", self.session)),
            )
            .header(reqwest::header::ACCEPT, "text/event-stream");
        if let Some(seq) = self.last_seq {
            req = req.header("Last-Event-ID", seq.to_string());
        }
        match req.send().await {
            Ok(resp) if resp.status().is_success() => {
                self.resp = Some(resp);
                self.parser = SseParser::new();
                self.failing_since = None;
                self.attempts = 0;
                Ok(())
            }
            Ok(resp) => {
                let status = resp.status().as_u16();
                let body = resp.json::<Value>().await.unwrap_or(Value::Null);
                Err(self.conn.error_answer(status, &body))
            }
            Err(e) => {
                let since = *self.failing_since.get_or_insert_with(Instant::now);
                self.attempts += 1;
                if since.elapsed() > RECONNECT_FOR {
                    return Err(self.conn.unreachable(e));
                }
                Ok(())
            }
        }
    }
}
