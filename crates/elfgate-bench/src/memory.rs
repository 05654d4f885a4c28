//! Memory scenarios: what idle SSE subscribers cost the daemon and whether it gives memory back
//! when they leave, and what large prompts leave behind.

use crate::client::{self, Target};
use crate::daemon::{Daemon, rss_bytes};
use anyhow::{Context, bail};
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn mb(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Creates a session whose one run streams a token and ends; returns its id.
async fn finished_session(t: &Target, prompt: &str) -> anyhow::Result<String> {
    let body = json!({"engine": "chat", "prompt": prompt, "model": "mock:tokens=1"});
    let id = client::create_session(t, &body).await?;
    client::run_events(t, &id).await?.bytes().await?;
    Ok(id)
}

/// Opens an SSE subscription on a raw socket and reads until the replay's `complete` arrived,
/// so that the daemon holds a live subscriber with nothing left to send.
async fn subscribe(addr: &str, token: &str, session: &str) -> anyhow::Result<TcpStream> {
    let mut s = TcpStream::connect(addr).await?;
    let req = format!(
        "GET /v1/sessions/{session}/events HTTP/1.1\r\nHost: {addr}\r\n\
         Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await?;
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while memchr::memmem::find(&seen, b"event: complete").is_none() {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            bail!("the daemon closed a subscription");
        }
        seen.extend_from_slice(&buf[..n]);
    }
    Ok(s)
}

/// Latency of `n` sequential GET /healthz, sorted, in ms.
async fn healthz_latencies(t: &Target, n: usize) -> anyhow::Result<Vec<f64>> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        t.http
            .get(format!("{}/healthz", t.daemon_base))
            .send()
            .await?
            .error_for_status()?;
        out.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    out.sort_by(f64::total_cmp);
    Ok(out)
}

/// RSS once it has stopped falling for three seconds in a row (sampled every second, at most
/// `limit`): the allocator hands freed memory back over several seconds, not at once.
async fn settled_rss(pid: u32, limit: Duration) -> anyhow::Result<u64> {
    let deadline = Instant::now() + limit;
    let mut low = rss_bytes(pid)?;
    let mut steady = 0;
    while steady < 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = rss_bytes(pid)?;
        if now < low {
            low = now;
            steady = 0;
        } else {
            steady += 1;
        }
    }
    Ok(low)
}

/// `subscribers` idle SSE subscribers spread over `sessions` finished sessions: the daemon's RSS
/// before, with them, and after they leave; /healthz latency while they are connected.
pub async fn idle_subscribers(
    daemon: &Daemon,
    t: &Target,
    sessions: usize,
    subscribers: usize,
) -> anyhow::Result<()> {
    let addr = t
        .daemon_base
        .strip_prefix("http://")
        .context("daemon base is not http://")?
        .to_string();
    let mut ids = Vec::with_capacity(sessions);
    for i in 0..sessions.max(1) {
        ids.push(finished_session(t, &format!("idle {i}")).await?);
    }
    let before = settled_rss(daemon.pid, Duration::from_secs(5)).await?;
    let started = Instant::now();
    let mut conns = Vec::with_capacity(subscribers);
    // A few hundred at a time: the accept queue is finite.
    for chunk in (0..subscribers).collect::<Vec<_>>().chunks(200) {
        let opened = futures_util::future::try_join_all(
            chunk
                .iter()
                .map(|i| subscribe(&addr, &t.daemon_token, &ids[i % ids.len()])),
        )
        .await
        .context("opening subscribers (is `ulimit -n` high enough?)")?;
        conns.extend(opened);
    }
    let connect_time = started.elapsed();
    let with = settled_rss(daemon.pid, Duration::from_secs(5)).await?;
    let health = healthz_latencies(t, 50).await?;
    drop(conns);
    let after = settled_rss(daemon.pid, Duration::from_secs(40)).await?;
    let per = (with.saturating_sub(before)) as f64 / subscribers.max(1) as f64 / 1024.0;
    println!(
        "idle subscribers: {subscribers} over {} sessions, opened in {:.1} s",
        ids.len(),
        connect_time.as_secs_f64()
    );
    println!(
        "  daemon RSS: before {:.1} MB, with them {:.1} MB ({per:.1} KB each), after they left {:.1} MB",
        mb(before),
        mb(with),
        mb(after)
    );
    println!(
        "  /healthz meanwhile: p50 {:.2} ms, max {:.2} ms over {} requests",
        health[health.len() / 2],
        health[health.len() - 1],
        health.len()
    );
    println!(
        "  target < 200 MB with them: {}; /healthz < 10 ms: {}",
        if mb(with) < 200.0 { "MET" } else { "NOT met" },
        if health[health.len() - 1] < 10.0 {
            "MET"
        } else {
            "NOT met"
        }
    );
    Ok(())
}

/// One chat session fed `prompts` prompts of `bytes` bytes each, one run after the other: the
/// daemon's RSS before, at the end, and once idle.
pub async fn large_prompts(
    daemon: &Daemon,
    t: &Target,
    prompts: usize,
    bytes: usize,
) -> anyhow::Result<()> {
    let before = settled_rss(daemon.pid, Duration::from_secs(5)).await?;
    let big = "x".repeat(bytes);
    let id = finished_session(t, &big).await?;
    for _ in 1..prompts {
        let resp = t
            .http
            .post(format!("{}/v1/sessions/{id}/messages", t.daemon_base))
            .bearer_auth(&t.daemon_token)
            .json(&json!({"prompt": big, "model": "mock:tokens=1", "onBusy": "enqueue"}))
            .send()
            .await?;
        if !resp.status().is_success() {
            bail!("prompt answered {}", resp.status());
        }
        // Wait for this run to end before the next prompt.
        loop {
            let view: serde_json::Value = t
                .http
                .get(format!("{}/v1/sessions/{id}", t.daemon_base))
                .bearer_auth(&t.daemon_token)
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            if view["status"] == "idle" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let peak = rss_bytes(daemon.pid)?;
    let after = settled_rss(daemon.pid, Duration::from_secs(20)).await?;
    println!(
        "large prompts: {prompts} x {:.1} MB in one chat session: daemon RSS before {:.1} MB, \
         at the end {:.1} MB, idle after {:.1} MB",
        mb(bytes as u64),
        mb(before),
        mb(peak),
        mb(after)
    );
    Ok(())
}
