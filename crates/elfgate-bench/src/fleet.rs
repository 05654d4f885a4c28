//! `--fleet NATS_URL` (with `--postgres`): what being a fleet costs where a client feels it. Two
//! nodes on one new database and the NATS server given: an interrupt sent through the node that
//! does not run the session (forwarded over NATS) against one sent to the node that runs it, and
//! the failover time after a SIGKILL, from the kill to the `complete {node_lost}` that a client
//! following through the other node receives. Both nodes share the machine with the bench, the
//! mock, PostgreSQL and NATS: this measures the fleet's overhead, not its scaling.

use crate::client::{self, Target};
use crate::daemon::{Daemon, FleetNode};
use crate::percentile_ms;
use anyhow::{Context, bail};
use futures_util::StreamExt;
use memchr::memmem;
use serde_json::json;
use std::time::{Duration, Instant};

/// Interrupts measured per path.
const INTERRUPTS: usize = 20;

/// What the pass runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The NATS server of the fleet.
    pub nats_url: String,
    /// The PostgreSQL administrator's URL (a new database is made for the fleet).
    pub postgres_admin: String,
    /// SIGKILLs of a node mid-run.
    pub kills: usize,
}

fn node(s: &Settings, id: &str) -> FleetNode {
    FleetNode {
        nats_url: s.nats_url.clone(),
        node_id: id.to_string(),
        token: "bench-fleet-token".into(),
    }
}

/// Runs the pass and prints what it measured.
pub async fn run(t: &Target, s: &Settings) -> anyhow::Result<()> {
    let database = crate::daemon::new_postgres_database(&s.postgres_admin).await?;
    let mock = t.mock_base.clone();
    let a = Daemon::start_node(&mock, None, Some(database.clone()), Some(&node(s, "a")))?;
    let b = Daemon::start_node(&mock, None, Some(database.clone()), Some(&node(s, "b")))?;
    let on_fleet = Target {
        daemon_token: a.token.clone(),
        ..t.clone()
    };
    let mut same = Vec::with_capacity(INTERRUPTS);
    let mut other = Vec::with_capacity(INTERRUPTS);
    for _ in 0..INTERRUPTS {
        same.push(client::interrupt_latency_via(&on_fleet, &a.base, &b.base, &a.base).await?);
        other.push(client::interrupt_latency_via(&on_fleet, &a.base, &b.base, &b.base).await?);
    }
    println!(
        "fleet of 2 nodes (lease 2 s, heartbeat 1 s): interrupt of a run on A, followed on B \
         ({INTERRUPTS} each):"
    );
    for (label, v) in [
        ("sent to A (runs it)", &same),
        ("sent to B (forwarded)", &other),
    ] {
        println!(
            "  {label}: answered p50 {:.2} ms p99 {:.2} ms; complete on B's stream p50 {:.2} ms \
             p99 {:.2} ms",
            percentile_ms(v.iter().map(|x| x.answered), 0.5),
            percentile_ms(v.iter().map(|x| x.answered), 0.99),
            percentile_ms(v.iter().map(|x| x.complete_seen), 0.5),
            percentile_ms(v.iter().map(|x| x.complete_seen), 0.99),
        );
    }

    let mut failovers = Vec::with_capacity(s.kills);
    for k in 0..s.kills {
        let victim = Daemon::start_node(
            &mock,
            None,
            Some(database.clone()),
            Some(&node(s, &format!("victim{k}"))),
        )?;
        failovers.push(failover(&on_fleet, victim, &b.base).await?);
    }
    println!(
        "failover after SIGKILL of the node running a session ({} kills): from the kill to \
         complete{{node_lost}} on another node's stream p50 {:.0} ms max {:.0} ms",
        s.kills,
        percentile_ms(failovers.iter().copied(), 0.5),
        percentile_ms(failovers.iter().copied(), 1.0),
    );
    Ok(())
}

/// Starts a long run on `victim`, follows it on `follow`, kills the victim at its first token
/// and times the `complete` that the follower gets.
async fn failover(t: &Target, victim: Daemon, follow: &str) -> anyhow::Result<Duration> {
    let body =
        json!({"engine": "api", "prompt": "bench", "model": "mock:tokens=100000,delay_ms=10"});
    let id = client::create_session(
        &Target {
            daemon_base: victim.base.clone(),
            ..t.clone()
        },
        &body,
    )
    .await?;
    let resp = client::run_events(
        &Target {
            daemon_base: follow.to_string(),
            ..t.clone()
        },
        &id,
    )
    .await?;
    let mut stream = resp.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    while memmem::find(&buf, b"event: streamDelta").is_none() {
        let chunk = stream
            .next()
            .await
            .context("stream ended before a token")??;
        buf.extend_from_slice(&chunk);
    }
    let killed = Instant::now();
    drop(victim);
    let seen = tokio::time::timeout(Duration::from_secs(60), async {
        while memmem::find(&buf, b"event: complete").is_none() {
            let chunk = stream
                .next()
                .await
                .context("stream ended before complete")??;
            buf.extend_from_slice(&chunk);
        }
        Ok::<Duration, anyhow::Error>(killed.elapsed())
    })
    .await
    .context("no complete within 60 s of the kill")??;
    if memmem::find(&buf, b"\"finishReason\":\"node_lost\"").is_none() {
        bail!("the run did not end as node_lost");
    }
    Ok(seen)
}
