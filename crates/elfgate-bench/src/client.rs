//! The kinds of benchmark session: one streamed chat completion straight from the mock provider
//! (or the same request through nginx, or through the daemon's OpenAI-compatible front door), and
//! one `api` session through the daemon's HTTP/SSE API.
//! All measure time to first token and total stream time, and check that exactly the expected
//! number of tokens arrived.
//!
//! SSE is parsed cheaply: frames are split at blank lines and only their event type is looked at;
//! tokens are counted by scanning for the mock's `tok<digit>` pattern, without decoding JSON.

use anyhow::{Context, bail};
use futures_util::StreamExt;
use memchr::memmem;
use serde_json::json;
use std::time::{Duration, Instant};

/// What one session measured.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// From just before the first request to the first token received.
    pub ttft: Duration,
    /// From just before the first request to the end of the stream.
    pub total: Duration,
    /// Through the daemon: when `POST /v1/sessions` was answered, and when the event stream's
    /// headers arrived (from the same start); used for the phase split of `-v`.
    pub phases: Option<(Duration, Duration)>,
}

/// Where a session goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// Straight to the mock provider's `/v1/chat/completions`.
    Direct,
    /// Through the daemon: `POST /v1/sessions` then `GET /v1/sessions/{id}/events`.
    Daemon,
    /// The direct request, through nginx as a plain reverse proxy.
    Nginx,
    /// The direct request, through the daemon's gateway: `POST /v1/chat/completions` with the
    /// model routed to the provider `mock` (`mock/MODEL`).
    Gateway,
    /// The same, through the daemon's Responses door: `POST /v1/responses`, streamed.
    Responses,
}

impl Path {
    /// A short label for tables.
    pub fn label(self) -> &'static str {
        match self {
            Path::Direct => "direct",
            Path::Daemon => "daemon",
            Path::Nginx => "nginx",
            Path::Gateway => "gateway",
            Path::Responses => "responses",
        }
    }
}

/// Everything a session needs to know.
#[derive(Debug, Clone)]
pub struct Target {
    /// The shared HTTP client.
    pub http: reqwest::Client,
    /// `http://ADDR` of the mock provider.
    pub mock_base: String,
    /// The daemon's bearer token.
    pub daemon_token: String,
    /// `http://ADDR` of the daemon.
    pub daemon_base: String,
    /// Daemon sessions as one request (POST with `Accept: text/event-stream`).
    pub one_request: bool,
    /// `http://ADDR` of nginx in front of the mock, when it runs.
    pub nginx_base: Option<String>,
    /// `http://ADDR` of the daemon whose event stream the client follows, when it is not
    /// `daemon_base` (a fleet node that does not run the session).
    pub follow_base: Option<String>,
}

/// The mock model string that streams `tokens` tokens with `delay_ms` between them.
pub fn model(tokens: u32, delay_ms: u64) -> String {
    format!("mock:tokens={tokens},delay_ms={delay_ms}")
}

/// Splits an SSE byte stream into frames (the text between blank lines) without copying them.
#[derive(Debug, Default)]
struct Frames {
    buf: Vec<u8>,
    /// Where to resume looking for a frame boundary in `buf`.
    scan_from: usize,
}

impl Frames {
    /// Appends `chunk` and hands each complete frame to `f` until `f` returns true (the stream is
    /// done); returns whether it did.
    fn feed(
        &mut self,
        chunk: &[u8],
        mut f: impl FnMut(&[u8]) -> anyhow::Result<bool>,
    ) -> anyhow::Result<bool> {
        self.buf.extend_from_slice(chunk);
        let mut start = 0;
        let mut from = self.scan_from;
        while let Some(p) = memmem::find(&self.buf[from..], b"\n\n") {
            let end = from + p;
            if f(&self.buf[start..end])? {
                return Ok(true);
            }
            start = end + 2;
            from = start;
        }
        self.buf.drain(..start);
        // The last byte may be the first half of a boundary.
        self.scan_from = self.buf.len().saturating_sub(1);
        Ok(false)
    }
}

/// How many mock tokens (`tok` followed by a digit) `frame` carries.
fn count_tokens(frame: &[u8]) -> usize {
    memmem::find_iter(frame, b"tok")
        .filter(|&i| frame.get(i + 3).is_some_and(u8::is_ascii_digit))
        .count()
}

/// The `event:` field of a frame, if any.
fn event_type(frame: &[u8]) -> Option<&[u8]> {
    let pos = if frame.starts_with(b"event: ") {
        0
    } else {
        memmem::find(frame, b"\nevent: ")? + 1
    };
    let rest = &frame[pos + 7..];
    let end = memchr::memchr(b'\n', rest).unwrap_or(rest.len());
    Some(&rest[..end])
}

/// Per-stream bookkeeping shared by both paths.
struct Progress {
    started: Instant,
    first: Option<Duration>,
    tokens: usize,
}

impl Progress {
    fn new(started: Instant) -> Self {
        Progress {
            started,
            first: None,
            tokens: 0,
        }
    }

    fn add_tokens(&mut self, n: usize) {
        if n > 0 && self.first.is_none() {
            self.first = Some(self.started.elapsed());
        }
        self.tokens += n;
    }

    fn finish(self, expected: u32) -> anyhow::Result<Sample> {
        let total = self.started.elapsed();
        if self.tokens != expected as usize {
            bail!("received {} tokens, expected {expected}", self.tokens);
        }
        let ttft = self.first.context("no token received")?;
        Ok(Sample {
            ttft,
            total,
            phases: None,
        })
    }
}

/// Reads `resp` as SSE, handing frames to `on_frame` until it reports the end.
async fn read_sse(
    resp: reqwest::Response,
    mut on_frame: impl FnMut(&[u8]) -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let mut frames = Frames::default();
    let mut body = resp.bytes_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.context("reading the stream")?;
        if frames.feed(&chunk, &mut on_frame)? {
            // Read to the end of the body (both servers end it right after the last event) so
            // that the connection goes back to the pool instead of being closed.
            while let Some(rest) = body.next().await {
                rest.context("reading the end of the stream")?;
            }
            return Ok(());
        }
    }
    bail!("stream ended before its last event")
}

/// The provider the bench's daemon configuration names the mock (`[providers.mock]`): the
/// gateway routes `mock/MODEL` to it.
const GATEWAY_PROVIDER: &str = "mock";

/// One streamed chat completion from the mock behind `base` (the mock itself, or a proxy in
/// front of it); ends at `data: [DONE]`.
pub async fn direct(t: &Target, base: &str, tokens: u32, delay_ms: u64) -> anyhow::Result<Sample> {
    chat_completion(t, base, None, model(tokens, delay_ms), tokens).await
}

/// The direct request through the daemon's OpenAI-compatible front door: the same body, with the
/// model routed to the mock provider and the daemon's token.
pub async fn gateway(t: &Target, tokens: u32, delay_ms: u64) -> anyhow::Result<Sample> {
    let routed = format!("{GATEWAY_PROVIDER}/{}", model(tokens, delay_ms));
    chat_completion(t, &t.daemon_base, Some(&t.daemon_token), routed, tokens).await
}

/// The same session through the daemon's Responses door (`POST /v1/responses`, streamed, to the
/// same provider): tokens counted in `response.output_text.delta` events, until
/// `response.completed`.
pub async fn responses(t: &Target, tokens: u32, delay_ms: u64) -> anyhow::Result<Sample> {
    let routed = format!("{GATEWAY_PROVIDER}/{}", model(tokens, delay_ms));
    let body = json!({"model": routed, "stream": true, "input": "bench"});
    let started = Instant::now();
    let resp = t
        .http
        .post(format!("{}/v1/responses", t.daemon_base))
        .bearer_auth(&t.daemon_token)
        .json(&body)
        .send()
        .await?;
    if !resp.status().is_success() {
        bail!("the Responses door answered {}", resp.status());
    }
    let mut p = Progress::new(started);
    read_sse(resp, |frame| match event_type(frame) {
        Some(b"response.output_text.delta") => {
            p.add_tokens(count_tokens(frame));
            Ok(false)
        }
        Some(b"response.completed") => Ok(true),
        Some(b"response.failed" | b"response.incomplete") => {
            bail!("stream error: {}", String::from_utf8_lossy(frame))
        }
        _ => Ok(false),
    })
    .await?;
    p.finish(tokens)
}

/// One streamed chat completion of `model` at `base`, checked to carry exactly `tokens` tokens
/// before `data: [DONE]`.
async fn chat_completion(
    t: &Target,
    base: &str,
    token: Option<&str>,
    model: String,
    tokens: u32,
) -> anyhow::Result<Sample> {
    let body = json!({
        "model": model,
        "stream": true,
        "messages": [{"role": "user", "content": "bench"}],
    });
    let url = format!("{base}/v1/chat/completions");
    let started = Instant::now();
    let mut req = t.http.post(url).json(&body);
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    let resp = req.send().await?;
    if !resp.status().is_success() {
        bail!("{base} answered {}", resp.status());
    }
    let mut p = Progress::new(started);
    read_sse(resp, |frame| {
        let Some(data) = frame.strip_prefix(b"data: ") else {
            return Ok(false);
        };
        if data == b"[DONE]" {
            return Ok(true);
        }
        if memmem::find(data, b"\"error\"").is_some() {
            bail!("stream error: {}", String::from_utf8_lossy(data));
        }
        p.add_tokens(count_tokens(data));
        Ok(false)
    })
    .await?;
    p.finish(tokens)
}

/// One `api` session through the daemon: create it, then read its event stream from the start
/// until `complete` — with a second request, or (`one_request`) from the creating request itself.
pub async fn daemon(t: &Target, tokens: u32, delay_ms: u64) -> anyhow::Result<Sample> {
    let body = json!({
        "engine": "api",
        "prompt": "bench",
        "model": model(tokens, delay_ms),
    });
    let started = Instant::now();
    let (resp, answered) = if t.one_request {
        let resp = t
            .http
            .post(format!("{}/v1/sessions", t.daemon_base))
            .bearer_auth(&t.daemon_token)
            .header("Accept", "text/event-stream")
            .json(&body)
            .send()
            .await?;
        if resp.status().as_u16() != 201 {
            bail!("POST /v1/sessions (stream) answered {}", resp.status());
        }
        let answered = started.elapsed();
        (resp, answered)
    } else {
        let resp = t
            .http
            .post(format!("{}/v1/sessions", t.daemon_base))
            .bearer_auth(&t.daemon_token)
            .json(&body)
            .send()
            .await?;
        let status = resp.status();
        let bytes = resp.bytes().await?;
        if status.as_u16() != 201 {
            bail!(
                "POST /v1/sessions answered {status}: {}",
                String::from_utf8_lossy(&bytes)
            );
        }
        let answered = started.elapsed();
        let created: serde_json::Value = serde_json::from_slice(&bytes)?;
        let id = created["sessionId"]
            .as_str()
            .context("no sessionId in the answer")?;
        let resp = t
            .http
            .get(format!(
                "{}/v1/sessions/{id}/events?until=complete",
                t.follow_base.as_deref().unwrap_or(&t.daemon_base)
            ))
            .bearer_auth(&t.daemon_token)
            .send()
            .await?;
        if !resp.status().is_success() {
            bail!("GET events answered {}", resp.status());
        }
        (resp, answered)
    };
    let opened = started.elapsed();
    let mut p = Progress::new(started);
    read_sse(resp, |frame| match event_type(frame) {
        Some(b"streamDelta") => {
            p.add_tokens(count_tokens(frame));
            Ok(false)
        }
        Some(b"complete") => {
            if memmem::find(frame, b"\"finishReason\":\"stop\"").is_none() {
                bail!(
                    "run did not stop cleanly: {}",
                    String::from_utf8_lossy(frame)
                );
            }
            Ok(true)
        }
        Some(b"error" | b"reset") => {
            bail!("daemon sent {}", String::from_utf8_lossy(frame))
        }
        _ => Ok(false),
    })
    .await?;
    let mut sample = p.finish(tokens)?;
    sample.phases = Some((answered, opened));
    Ok(sample)
}

/// One session on `path`.
pub async fn run(t: &Target, path: Path, tokens: u32, delay_ms: u64) -> anyhow::Result<Sample> {
    match path {
        Path::Direct => direct(t, &t.mock_base, tokens, delay_ms).await,
        Path::Daemon => daemon(t, tokens, delay_ms).await,
        Path::Nginx => {
            let base = t.nginx_base.as_deref().context("nginx is not running")?;
            direct(t, base, tokens, delay_ms).await
        }
        Path::Gateway => gateway(t, tokens, delay_ms).await,
        Path::Responses => responses(t, tokens, delay_ms).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_split_across_chunks() -> anyhow::Result<()> {
        let mut f = Frames::default();
        let mut seen = Vec::new();
        let input = b"event: a\ndata: tok0 \n\n: keep\n\nevent: complete\ndata: x\n\n";
        for chunk in input.chunks(3) {
            let done = f.feed(chunk, |fr| {
                seen.push(String::from_utf8_lossy(fr).into_owned());
                Ok(event_type(fr) == Some(b"complete"))
            })?;
            if done {
                break;
            }
        }
        assert_eq!(seen.len(), 3);
        assert_eq!(seen[0], "event: a\ndata: tok0 ");
        assert_eq!(
            event_type(b"id: 3\nevent: streamDelta\ndata: {}"),
            Some(&b"streamDelta"[..])
        );
        Ok(())
    }

    #[test]
    fn counts_tokens_not_words() {
        assert_eq!(
            count_tokens(b"{\"model\":\"mock:tokens=3\",\"text\":\"tok1 tok2 \"}"),
            2
        );
    }
}

/// How long an interrupt takes on a stream that is stalled mid-answer.
#[derive(Debug, Clone, Copy)]
pub struct InterruptSample {
    /// From sending `POST …/interrupt {"wait": true}` to its answer (the run has ended).
    pub answered: Duration,
    /// From sending the interrupt to receiving the run's `complete` on the stream.
    pub complete_seen: Duration,
}

/// The value of the counter `name` on the daemon at `base`'s `/metrics`.
pub async fn metric(t: &Target, base: &str, token: &str, name: &str) -> anyhow::Result<u64> {
    let text = t
        .http
        .get(format!("{base}/metrics"))
        .bearer_auth(token)
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .with_context(|| format!("no {name} in /metrics"))?
        .trim()
        .parse()
        .with_context(|| format!("{name} is not a number"))
}

/// `POST /v1/sessions` with `body`; the new session's id.
pub async fn create_session(t: &Target, body: &serde_json::Value) -> anyhow::Result<String> {
    let created: serde_json::Value = t
        .http
        .post(format!("{}/v1/sessions", t.daemon_base))
        .bearer_auth(&t.daemon_token)
        .json(body)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    Ok(created["sessionId"]
        .as_str()
        .context("no sessionId in the answer")?
        .to_string())
}

/// The session's event stream from the start, ending after a run's `complete`.
pub async fn run_events(t: &Target, id: &str) -> anyhow::Result<reqwest::Response> {
    Ok(t.http
        .get(format!(
            "{}/v1/sessions/{id}/events?until=complete",
            t.daemon_base
        ))
        .bearer_auth(&t.daemon_token)
        .send()
        .await?
        .error_for_status()?)
}

/// Starts a session whose upstream stalls after one token, waits for that token on the stream,
/// interrupts, and times the answer and the `complete` frame.
pub async fn interrupt_latency(t: &Target) -> anyhow::Result<InterruptSample> {
    let base = t.daemon_base.clone();
    interrupt_latency_via(t, &base, &base, &base).await
}

/// [`interrupt_latency`] with the session started on `start`, followed on `follow` and
/// interrupted through `control` (daemons of one fleet, `http://ADDR` each).
pub async fn interrupt_latency_via(
    t: &Target,
    start: &str,
    follow: &str,
    control: &str,
) -> anyhow::Result<InterruptSample> {
    let body = json!({
        "engine": "api",
        "prompt": "bench",
        "model": "mock:tokens=100000,stall_after=1",
    });
    let on = |base: &str| Target {
        daemon_base: base.to_string(),
        ..t.clone()
    };
    let id = create_session(&on(start), &body).await?;
    let resp = run_events(&on(follow), &id).await?;
    let mut body = resp.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    while memmem::find(&buf, b"event: streamDelta").is_none() {
        let chunk = body.next().await.context("stream ended before a token")??;
        buf.extend_from_slice(&chunk);
    }
    let sent = Instant::now();
    let answer = t
        .http
        .post(format!("{control}/v1/sessions/{id}/interrupt"))
        .bearer_auth(&t.daemon_token)
        .json(&json!({"wait": true}))
        .send();
    let mut complete_seen = None;
    let reader = async {
        while memmem::find(&buf, b"event: complete").is_none() {
            let chunk = body
                .next()
                .await
                .context("stream ended before complete")??;
            buf.extend_from_slice(&chunk);
        }
        complete_seen = Some(sent.elapsed());
        Ok::<(), anyhow::Error>(())
    };
    let (answer, read) = tokio::join!(
        async {
            let r = answer.await?.error_for_status()?;
            let at = sent.elapsed();
            let v: serde_json::Value = r.json().await?;
            if v["status"] != "interrupted" {
                bail!("interrupt answered {v}");
            }
            Ok::<Duration, anyhow::Error>(at)
        },
        reader
    );
    read?;
    if memmem::find(&buf, b"\"finishReason\":\"interrupted\"").is_none() {
        bail!("the run did not end as interrupted");
    }
    Ok(InterruptSample {
        answered: answer?,
        complete_seen: complete_seen.context("complete not seen")?,
    })
}
