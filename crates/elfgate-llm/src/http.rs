//! Shared HTTP plumbing: sending a request, turning error responses into
//! [`LlmError::Status`], and driving an SSE body through a decoder.

use crate::error::error_chain;
use crate::sse::SseParser;
use crate::{LlmError, LlmEvent, LlmStream};
use bytes::Bytes;
use futures_util::{FutureExt, Stream, StreamExt};
use std::borrow::Cow;
use std::collections::VecDeque;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

/// Most error-body bytes kept in a [`LlmError::Status`] message.
const MAX_ERROR_MESSAGE: usize = 2000;

/// Output queue of a decoder.
pub(crate) type EventQueue = VecDeque<Result<LlmEvent, LlmError>>;

/// Most bytes of text one queued delta gathers (see [`push_delta`]).
const MERGE_LIMIT: usize = 16 * 1024;

/// Text borrowed from the body being parsed when it has no escapes (owned otherwise).
///
/// A newtype because serde borrows a `Cow<str>` only when it is a field's own type: inside an
/// `Option` it always allocates (serde-rs/serde#2016).
#[derive(serde::Deserialize)]
pub(crate) struct Text<'a>(#[serde(borrow)] pub(crate) Cow<'a, str>);

/// Queues a piece of answer (`thinking: false`) or reasoning text, merged into the delta at the
/// queue's back when it is of the same kind. This is the one place deltas are merged: pieces of
/// one read of the body, and of the reads already waiting when a delta is handed out
/// ([`BodyState::read_ready`]), become one delta, so a burst from upstream is one event all the
/// way to the client, and no token waits for another. A piece is copied at most once: into the
/// delta it joins, or as the new delta's text (no copy when it is already owned).
pub(crate) fn push_delta(out: &mut EventQueue, thinking: bool, piece: Text<'_>) {
    let piece = piece.0;
    if piece.is_empty() {
        return;
    }
    match out.back_mut() {
        Some(Ok(LlmEvent::TextDelta(t))) if !thinking && t.len() < MERGE_LIMIT => {
            t.push_str(&piece);
        }
        Some(Ok(LlmEvent::ThinkingDelta(t))) if thinking && t.len() < MERGE_LIMIT => {
            t.push_str(&piece);
        }
        _ => out.push_back(Ok(if thinking {
            LlmEvent::ThinkingDelta(piece.into_owned())
        } else {
            LlmEvent::TextDelta(piece.into_owned())
        })),
    }
}

/// Turns SSE events of one provider into [`LlmEvent`]s.
pub(crate) trait Decoder: Send + 'static {
    /// Handles one SSE event. Returns `Ok(true)` once the provider's end marker
    /// was seen; an `Err` ends the stream with that error.
    fn on_event(&mut self, event: &str, data: &str, out: &mut EventQueue)
    -> Result<bool, LlmError>;

    /// Called when the body ends before the end marker; returns `true` when that end is the
    /// provider's normal end of stream (a format without an end marker).
    fn on_end(&mut self, _out: &mut EventQueue) -> bool {
        false
    }
}

/// Sends the request and waits (at most `request_timeout`, unless zero) for the
/// response headers. Non-2xx statuses become [`LlmError::Status`].
pub(crate) async fn send(
    req: reqwest::RequestBuilder,
    request_timeout: Duration,
) -> Result<reqwest::Response, LlmError> {
    let mut req = req;
    // The call is a child of the run's model-call span, in the provider's traces too.
    for (name, value) in elfgate_core::telemetry::outgoing_headers() {
        req = req.header(name, value);
    }
    let fut = req.send();
    let result = if request_timeout.is_zero() {
        fut.await
    } else {
        match tokio::time::timeout(request_timeout, fut).await {
            Ok(r) => r,
            Err(_) => {
                return Err(LlmError::Transport(format!(
                    "no response headers within {request_timeout:?}"
                )));
            }
        }
    };
    let resp = result.map_err(|e| LlmError::Transport(error_chain(&e)))?;
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let retry_after = parse_retry_after(resp.headers());
    let body = if request_timeout.is_zero() {
        resp.text().await.ok()
    } else {
        tokio::time::timeout(request_timeout, resp.text())
            .await
            .ok()
            .and_then(std::result::Result::ok)
    }
    .unwrap_or_default();
    let mut message = extract_error_message(&body);
    if message.is_empty() {
        message = status
            .canonical_reason()
            .unwrap_or("request failed")
            .to_string();
    }
    tracing::debug!(status = status.as_u16(), %message, "provider returned an error status");
    Err(LlmError::Status {
        status: status.as_u16(),
        message,
        retry_after,
    })
}

/// Parses `retry-after-ms` (OpenAI) or `Retry-After` (delta seconds or an HTTP-date).
pub(crate) fn parse_retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    parse_retry_after_at(headers, SystemTime::now())
}

/// [`parse_retry_after`] with the clock an HTTP-date is measured against.
fn parse_retry_after_at(headers: &reqwest::header::HeaderMap, now: SystemTime) -> Option<Duration> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    let number = |name: &str| {
        text(name)
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v >= 0.0)
    };
    // A value too large for a Duration is ignored rather than trusted.
    if let Some(ms) = number("retry-after-ms") {
        return Duration::try_from_secs_f64(ms / 1000.0).ok();
    }
    if let Some(s) = number("retry-after") {
        return Duration::try_from_secs_f64(s).ok();
    }
    // A date already past means "now".
    let date = httpdate::parse_http_date(text("retry-after")?).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Extracts a readable message from an error body: `{"error":{"message":..}}`,
/// `{"error":".."}`, `{"message":..}`, or the (truncated) raw text.
pub(crate) fn extract_error_message(body: &str) -> String {
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(body)
        && let Some(m) = message_from_json(&v)
    {
        return m;
    }
    truncate(body.trim(), MAX_ERROR_MESSAGE)
}

/// The message of an error JSON value, with its type when it adds information.
pub(crate) fn message_from_json(v: &serde_json::Value) -> Option<String> {
    let err = v.get("error").unwrap_or(v);
    if let Some(s) = err.as_str() {
        return Some(s.to_string());
    }
    let message = err.get("message").and_then(|m| m.as_str());
    let kind = err
        .get("type")
        .and_then(|t| t.as_str())
        .or_else(|| err.get("code").and_then(|c| c.as_str()))
        // Google: {"error":{"code":503,"message":..,"status":"UNAVAILABLE"}}
        .or_else(|| err.get("status").and_then(|c| c.as_str()));
    match (message, kind) {
        (Some(m), Some(k)) if !m.contains(k) => Some(format!("{m} ({k})")),
        (Some(m), _) => Some(m.to_string()),
        (None, Some(k)) => Some(k.to_string()),
        (None, None) => None,
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

type BodyStream = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

struct BodyState<D> {
    /// The response body; `None` once finished (dropping it closes the connection).
    body: Option<BodyStream>,
    parser: SseParser,
    decoder: D,
    queue: EventQueue,
    idle_timeout: Duration,
}

impl<D: Decoder> BodyState<D> {
    /// While the queue holds one delta with room left, decodes the reads the body already has
    /// (never waiting for one), so that they join it.
    fn read_ready(&mut self) {
        while self.queue.len() == 1
            && matches!(
                self.queue.back(),
                Some(Ok(LlmEvent::TextDelta(t) | LlmEvent::ThinkingDelta(t))) if t.len() < MERGE_LIMIT
            )
        {
            let Some(body) = self.body.as_mut() else {
                return;
            };
            let Some(next) = body.next().now_or_never() else {
                return;
            };
            if self.absorb(next) {
                self.body = None;
            }
        }
    }

    /// Decodes one read of the body (or its end, or its failure). Returns `true` when the
    /// stream is finished.
    fn absorb(&mut self, next: Option<reqwest::Result<Bytes>>) -> bool {
        match next {
            Some(Ok(bytes)) => self.feed(Some(&bytes)),
            Some(Err(e)) => {
                self.queue
                    .push_back(Err(LlmError::Transport(error_chain(&e))));
                true
            }
            None => self.feed(None),
        }
    }

    /// Feeds bytes (or end of input when `chunk` is `None`) through the parser
    /// and decoder. Returns `true` when the stream is finished.
    fn feed(&mut self, chunk: Option<&[u8]>) -> bool {
        let BodyState {
            parser,
            decoder,
            queue,
            ..
        } = self;
        let at_eof = chunk.is_none();
        let mut finished = false;
        let mut on_event = |event: &str, data: &str| match decoder.on_event(event, data, queue) {
            Ok(false) => true,
            Ok(true) => {
                finished = true;
                false
            }
            // A frame cut off by the end of the body is a dropped stream, not
            // a protocol violation: report it as such below.
            Err(LlmError::Protocol(_)) if at_eof => false,
            Err(e) => {
                queue.push_back(Err(e));
                finished = true;
                false
            }
        };
        match chunk {
            Some(bytes) => {
                parser.feed(bytes, &mut on_event);
            }
            None => {
                parser.finish(&mut on_event);
                if !finished && decoder.on_end(queue) {
                    finished = true;
                }
                if !finished {
                    queue.push_back(Err(LlmError::Transport(
                        "stream ended before completion".to_string(),
                    )));
                    finished = true;
                }
            }
        }
        finished
    }
}

/// Turns a 2xx SSE response into an [`LlmStream`] driven by `decoder`.
pub(crate) fn event_stream<D: Decoder>(
    resp: reqwest::Response,
    idle_timeout: Duration,
    decoder: D,
) -> LlmStream {
    body_events(Box::pin(resp.bytes_stream()), idle_timeout, decoder)
}

/// The events `decoder` reads from `body`.
fn body_events<D: Decoder>(body: BodyStream, idle_timeout: Duration, decoder: D) -> LlmStream {
    let state = BodyState {
        body: Some(body),
        parser: SseParser::new(),
        decoder,
        queue: VecDeque::new(),
        idle_timeout,
    };
    // Data-aware idle timeout: the clock restarts when the stream yields something decoded, not on
    // any byte, so a provider that only sends pings or comments cannot hold a run forever.
    let deadline = tokio::time::Instant::now() + idle_timeout;
    Box::pin(futures_util::stream::unfold(
        (state, deadline),
        |(mut st, mut deadline)| async move {
            loop {
                st.read_ready();
                if let Some(item) = st.queue.pop_front() {
                    deadline = tokio::time::Instant::now() + st.idle_timeout;
                    return Some((item, (st, deadline)));
                }
                let body = st.body.as_mut()?;
                let next = if st.idle_timeout.is_zero() {
                    body.next().await
                } else {
                    match tokio::time::timeout_at(deadline, body.next()).await {
                        Ok(n) => n,
                        Err(_) => {
                            st.body = None;
                            return Some((
                                Err(LlmError::IdleTimeout(st.idle_timeout)),
                                (st, deadline),
                            ));
                        }
                    }
                };
                if st.absorb(next) {
                    st.body = None;
                }
            }
        },
    ))
}

/// Decodes a body given as reads, draining the queue between reads as a live stream does.
#[cfg(test)]
pub(crate) fn decode_body<'a, D: Decoder>(
    decoder: D,
    reads: impl Iterator<Item = &'a [u8]>,
) -> Vec<Result<LlmEvent, LlmError>> {
    let mut st = BodyState {
        body: None,
        parser: SseParser::new(),
        decoder,
        queue: VecDeque::new(),
        idle_timeout: Duration::ZERO,
    };
    let mut out = Vec::new();
    for read in reads {
        let finished = st.feed(Some(read));
        out.extend(st.queue.drain(..));
        if finished {
            return out;
        }
    }
    st.feed(None);
    out.extend(st.queue.drain(..));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_decoded_together_merge_by_kind_up_to_the_limit() {
        let mut q = EventQueue::new();
        let text = |s: &'static str| Text(Cow::Borrowed(s));
        push_delta(&mut q, false, text("Hel"));
        push_delta(&mut q, false, text(""));
        push_delta(&mut q, false, Text(Cow::Owned("lo".into())));
        push_delta(&mut q, true, text("hmm"));
        push_delta(&mut q, false, text("!"));
        let got: Vec<LlmEvent> = q.drain(..).map(|e| e.unwrap()).collect();
        assert_eq!(
            got,
            [
                LlmEvent::TextDelta("Hello".into()),
                LlmEvent::ThinkingDelta("hmm".into()),
                LlmEvent::TextDelta("!".into()),
            ]
        );
        push_delta(&mut q, false, Text(Cow::Owned("x".repeat(MERGE_LIMIT))));
        push_delta(&mut q, false, text("y"));
        assert_eq!(q.len(), 2, "a full delta takes no more");
    }

    fn chunk(text: &str) -> reqwest::Result<Bytes> {
        let frame = serde_json::json!({"choices": [{"index": 0, "delta": {"content": text}}]});
        Ok(Bytes::from(format!("data: {frame}\n\n")))
    }

    #[tokio::test]
    async fn reads_already_waiting_join_the_delta_being_handed_out_and_none_waits() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<reqwest::Result<Bytes>>();
        let body =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|c| (c, rx)) },
            );
        let mut events = body_events(
            Box::pin(body),
            Duration::ZERO,
            crate::openai::OpenAiDecoder::default(),
        );
        // One read waiting: it is handed out alone, without waiting for a second.
        tx.send(chunk("a")).unwrap();
        let first = events.next().await.unwrap().unwrap();
        assert_eq!(first, LlmEvent::TextDelta("a".into()));
        // Three reads that arrived together: one delta.
        for t in ["b", "c", "d"] {
            tx.send(chunk(t)).unwrap();
        }
        let burst = events.next().await.unwrap().unwrap();
        assert_eq!(burst, LlmEvent::TextDelta("bcd".into()));
        // Nothing waiting: the stream waits for the next read, and hands it out.
        let next = tokio::spawn(async move { events.next().await.map(Result::unwrap) });
        tx.send(chunk("e")).unwrap();
        assert_eq!(next.await.unwrap(), Some(LlmEvent::TextDelta("e".into())));
    }

    #[tokio::test]
    async fn a_merged_delta_stops_at_the_limit() {
        let big = "x".repeat(MERGE_LIMIT);
        let reads = vec![chunk(&big), chunk("y"), chunk("z")];
        let mut events = body_events(
            Box::pin(futures_util::stream::iter(reads)),
            Duration::ZERO,
            crate::openai::OpenAiDecoder::default(),
        );
        assert_eq!(
            events.next().await.unwrap().unwrap(),
            LlmEvent::TextDelta(big.clone())
        );
        assert_eq!(
            events.next().await.unwrap().unwrap(),
            LlmEvent::TextDelta("yz".into())
        );
    }

    #[test]
    fn error_messages() {
        assert_eq!(
            extract_error_message(r#"{"error":{"message":"bad key","type":"auth"}}"#),
            "bad key (auth)"
        );
        assert_eq!(
            extract_error_message(
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
            ),
            "Overloaded (overloaded_error)"
        );
        assert_eq!(extract_error_message(r#"{"error":"nope"}"#), "nope");
        assert_eq!(extract_error_message("plain text\n"), "plain text");
    }

    #[test]
    fn retry_after_headers() {
        let mut h = reqwest::header::HeaderMap::new();
        assert_eq!(parse_retry_after(&h), None);
        h.insert(
            "retry-after",
            reqwest::header::HeaderValue::from_static("2"),
        );
        assert_eq!(parse_retry_after(&h), Some(Duration::from_secs(2)));
        h.insert(
            "retry-after-ms",
            reqwest::header::HeaderValue::from_static("150"),
        );
        assert_eq!(parse_retry_after(&h), Some(Duration::from_millis(150)));
    }

    #[test]
    fn retry_after_as_an_http_date() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480); // 21 Oct 2015 07:28:00
        let mut h = reqwest::header::HeaderMap::new();
        let mut set = |v: &'static str| {
            h.insert("retry-after", reqwest::header::HeaderValue::from_static(v));
            parse_retry_after_at(&h, now)
        };
        assert_eq!(
            set("Wed, 21 Oct 2015 07:28:30 GMT"),
            Some(Duration::from_secs(30))
        );
        assert_eq!(set("Wed, 21 Oct 2015 07:27:00 GMT"), Some(Duration::ZERO));
        assert_eq!(set("soon"), None);
        assert_eq!(set("-3"), None);
    }
}
