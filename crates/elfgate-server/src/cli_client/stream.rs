//! A session's event stream that survives dropped connections: it reconnects with
//! `Last-Event-ID` set to the last event it handed out, so nothing is lost or repeated.

use super::conn::{ClientError, Conn};
use elfgate_llm::sse::SseParser;
use serde_json::Value;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How long the stream keeps trying to reconnect before it gives up.
const RECONNECT_FOR: Duration = Duration::from_secs(30);

/// The events of one session, in order, across reconnections.
pub struct EventStream {
    conn: Conn,
    session: String,
    last_seq: Option<u64>,
    resp: Option<reqwest::Response>,
    parser: SseParser,
    queue: VecDeque<Value>,
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
    pub async fn next(&mut self) -> Result<Value, ClientError> {
        loop {
            if let Some(ev) = self.queue.pop_front() {
                if ev["type"] == "reset" {
                    // The daemon dropped us as too slow: come back from our cursor.
                    self.resp = None;
                    self.queue.clear();
                    continue;
                }
                // A re-announced permission request carries its original, older seq.
                if let Some(seq) = ev["seq"].as_u64()
                    && self.last_seq.is_none_or(|l| seq > l)
                {
                    self.last_seq = Some(seq);
                }
                return Ok(ev);
            }
            let Some(resp) = self.resp.as_mut() else {
                self.connect().await?;
                continue;
            };
            match resp.chunk().await {
                Ok(Some(bytes)) => {
                    let queue = &mut self.queue;
                    self.parser.feed(&bytes, &mut |_event, data| {
                        if let Ok(v) = serde_json::from_str::<Value>(data) {
                            queue.push_back(v);
                        }
                        true
                    });
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
