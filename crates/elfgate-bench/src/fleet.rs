//! `--fleet NATS_URL` (with `--postgres`): what being a fleet costs where a client feels it. Two
//! nodes on one new database and the NATS server given: an interrupt sent through the node that
//! does not run the session (forwarded over NATS) against one sent to the node that runs it, and
//! the failover time after a SIGKILL, from the kill to the `complete {node_lost}` that a client
//! following through the other node receives; and paced streams at C=50 followed through the
//! node that runs them against through the other node (their events cross NATS), with the NATS
//! messages each token costs. Both nodes share the machine with the bench, the mock, PostgreSQL
//! and NATS: this measures the fleet's overhead, not its scaling.

use crate::client::{self, Path, Target};
use crate::daemon::{Daemon, FleetNode};
use crate::percentile_ms;
use anyhow::{Context, bail};
use futures_util::StreamExt;
use memchr::memmem;
use serde_json::json;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// Interrupts measured per path.
const INTERRUPTS: usize = 20;

/// The follow comparison: tokens each, mock delay before each, rounds (sessions at once:
/// `Settings::follow_concurrency`).
const FOLLOW_TOKENS: u32 = 100;
const FOLLOW_DELAY_MS: u64 = 10;
const FOLLOW_ROUNDS: usize = 3;

/// What the pass runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The NATS server of the fleet.
    pub nats_url: String,
    /// The PostgreSQL administrator's URL (a new database is made for the fleet).
    pub postgres_admin: String,
    /// SIGKILLs of a node mid-run.
    pub kills: usize,
    /// Sessions at once in the follow comparison, one comparison per value.
    pub follow_concurrency: Vec<usize>,
    /// The follow comparison's sessions start spread over one session's length (`--stagger`):
    /// each sampled one starts while C streams cross the nodes, instead of in a burst of C.
    pub stagger: bool,
}

fn node(s: &Settings, id: &str) -> FleetNode {
    FleetNode {
        nats_url: s.nats_url.clone(),
        node_id: id.to_string(),
        token: "bench-fleet-token".into(),
    }
}

/// Runs the pass and prints what it measured.
pub async fn run(
    t: &Target,
    mock: &elfgate_mockllm::MockServer,
    s: &Settings,
) -> anyhow::Result<()> {
    let database = crate::daemon::new_postgres_database(&s.postgres_admin).await?;
    let mock_base = t.mock_base.clone();
    let a = Daemon::start_node(
        &mock_base,
        None,
        Some(database.clone()),
        Some(&node(s, "a")),
        "",
    )?;
    let b = Daemon::start_node(
        &mock_base,
        None,
        Some(database.clone()),
        Some(&node(s, "b")),
        "",
    )?;
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

    let project = tempfile::tempdir()?;
    let mut perm_same = Vec::with_capacity(INTERRUPTS);
    let mut perm_other = Vec::with_capacity(INTERRUPTS);
    for k in 0..INTERRUPTS {
        for (control, into) in [(&a.base, &mut perm_same), (&b.base, &mut perm_other)] {
            let name = format!("bench-perm-{k}-{}", into.len());
            into.push(
                permission_latency(
                    &on_fleet,
                    mock,
                    &name,
                    project.path(),
                    [&a.base, &b.base, control],
                )
                .await?,
            );
        }
    }
    println!(
        "fleet of 2 nodes: a permission request of a run on A, followed on B, answered \
         ({INTERRUPTS} each): sent to A p50 {:.2} ms p99 {:.2} ms; sent to B (forwarded) p50 \
         {:.2} ms p99 {:.2} ms",
        percentile_ms(perm_same.iter().copied(), 0.5),
        percentile_ms(perm_same.iter().copied(), 0.99),
        percentile_ms(perm_other.iter().copied(), 0.5),
        percentile_ms(perm_other.iter().copied(), 0.99),
    );

    for &c in &s.follow_concurrency {
        follow_comparison(&on_fleet, &a, &b, c.max(1), s.stagger).await?;
    }

    let mut failovers = Vec::with_capacity(s.kills);
    for k in 0..s.kills {
        let victim = Daemon::start_node(
            &mock_base,
            None,
            Some(database.clone()),
            Some(&node(s, &format!("victim{k}"))),
            "",
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

/// What the follow comparison gathers per path.
#[derive(Default)]
struct FollowStats {
    stats: crate::PathStats,
    /// CPU time of both nodes during the path's passes, in ns.
    nodes_cpu_ns: u64,
    /// Events node A published on NATS during them.
    relayed: u64,
}

/// Paced sessions started on A: the mock called directly, followed on A, followed on B.
async fn follow_comparison(
    t: &Target,
    a: &Daemon,
    b: &Daemon,
    concurrency: usize,
    stagger: bool,
) -> anyhow::Result<()> {
    let (starts, spread) = if stagger {
        let length = Duration::from_millis(FOLLOW_DELAY_MS * u64::from(FOLLOW_TOKENS));
        (crate::Starts::Spread(length), " spread")
    } else {
        (crate::Starts::Burst, "")
    };
    let same = Target {
        daemon_base: a.base.clone(),
        follow_base: None,
        ..t.clone()
    };
    let cross = Target {
        follow_base: Some(b.base.clone()),
        ..same.clone()
    };
    let paths: [(&str, Path, &Target); 3] = [
        ("mock directly", Path::Direct, &same),
        ("run on A, followed on A", Path::Daemon, &same),
        ("run on A, followed on B", Path::Daemon, &cross),
    ];
    for (label, path, target) in paths {
        let (_, _, errors, _) =
            crate::pass(target, path, concurrency, 20, 0, crate::Starts::Burst).await;
        if let Some(e) = errors.first() {
            bail!("warmup of {label} failed: {e}");
        }
    }
    let mut got: [FollowStats; 3] = Default::default();
    for round in 0..FOLLOW_ROUNDS {
        let mut order = [0, 1, 2];
        order.rotate_left(round % 3);
        for i in order {
            let (_, path, target) = paths[i];
            let cpu0 = crate::daemon::cpu_ns(a.pid)? + crate::daemon::cpu_ns(b.pid)?;
            let relayed0 = relayed_events(t, a).await?;
            let (samples, unsampled, errors, wall) = crate::pass(
                target,
                path,
                concurrency,
                FOLLOW_TOKENS,
                FOLLOW_DELAY_MS,
                starts,
            )
            .await;
            let g = &mut got[i];
            g.nodes_cpu_ns += (crate::daemon::cpu_ns(a.pid)? + crate::daemon::cpu_ns(b.pid)?)
                .saturating_sub(cpu0);
            g.relayed += relayed_events(t, a).await?.saturating_sub(relayed0);
            // Every session's tokens count (a spread pass's unsampled first sessions too): the
            // CPU and the NATS messages measured were spent on all of them.
            g.stats.tokens += (samples.len() + unsampled) as u64 * u64::from(FOLLOW_TOKENS);
            g.stats.samples.extend(samples);
            g.stats.errors += errors.len();
            if g.stats.first_error.is_none() {
                g.stats.first_error = errors.into_iter().next();
            }
            g.stats.wall += wall;
        }
    }
    println!(
        "fleet of 2 nodes, paced streams at C={concurrency}{spread} ({FOLLOW_TOKENS} tokens, \
         {FOLLOW_DELAY_MS} ms apart, {FOLLOW_ROUNDS} rounds):"
    );
    for (i, (label, _, _)) in paths.iter().enumerate() {
        let g = &got[i];
        let tokens = g.stats.tokens.max(1) as f64;
        let mut line = format!(
            "  {label}: TTFT p50 {:.2} ms p99 {:.2} ms, {:.0} tok/s, {} errors",
            g.stats.ttft_ms(0.5),
            g.stats.ttft_ms(0.99),
            g.stats.tokens_per_sec(),
            g.stats.errors,
        );
        if i > 0 {
            let phase = |which: fn((Duration, Duration)) -> Duration, q| {
                percentile_ms(
                    g.stats.samples.iter().filter_map(|s| s.phases.map(which)),
                    q,
                )
            };
            let _ = write!(
                line,
                ", both nodes' CPU {:.1} us/token, NATS messages {:.2}/token; POST answered p50 \
                 {:.2} p99 {:.2} ms, stream open p50 {:.2} p99 {:.2} ms",
                g.nodes_cpu_ns as f64 / 1000.0 / tokens,
                g.relayed as f64 / tokens,
                phase(|p| p.0, 0.5),
                phase(|p| p.0, 0.99),
                phase(|p| p.1, 0.5),
                phase(|p| p.1, 0.99),
            );
        }
        println!("{line}");
        if let Some(e) = &g.stats.first_error {
            println!("    first error: {e}");
        }
    }
    let (same, cross) = (&got[1].stats, &got[2].stats);
    println!(
        "  followed on B against on A: added TTFT p50 {:+.2} ms p99 {:+.2} ms, relay ratio {:.3}",
        cross.ttft_ms(0.5) - same.ttft_ms(0.5),
        cross.ttft_ms(0.99) - same.ttft_ms(0.99),
        cross.tokens_per_sec() / same.tokens_per_sec().max(f64::MIN_POSITIVE),
    );
    Ok(())
}

/// `elfgate_fleet_events_relayed_total` of `node`.
async fn relayed_events(t: &Target, node: &Daemon) -> anyhow::Result<u64> {
    client::metric(
        t,
        &node.base,
        &node.token,
        "elfgate_fleet_events_relayed_total",
    )
    .await
}

/// A tinyelf run on `nodes[0]` asks to write a file; followed on `nodes[1]`, its permission
/// request is answered through `nodes[2]`: the time from sending the answer to its reply.
async fn permission_latency(
    t: &Target,
    mock: &elfgate_mockllm::MockServer,
    script: &str,
    project: &std::path::Path,
    [start, follow, control]: [&String; 3],
) -> anyhow::Result<Duration> {
    let write = json!({"path": format!("{script}.txt"), "content": "1"}).to_string();
    mock.set_script(
        script,
        serde_json::from_value(json!({"responses": [
            {"toolCalls": [{"id": "w1", "name": "write_file", "arguments": write}]},
            {"text": "written"}
        ]}))?,
    );
    let body = json!({
        "engine": "tinyelf",
        "prompt": "write",
        "model": format!("mock:script={script}"),
        "projectPath": project.display().to_string(),
    });
    let on = |base: &String| Target {
        daemon_base: base.clone(),
        ..t.clone()
    };
    let id = client::create_session(&on(start), &body).await?;
    let resp = client::run_events(&on(follow), &id).await?;
    let mut stream = resp.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    let request_id = loop {
        if let Some(at) = memmem::find(&buf, b"event: permissionRequest\ndata: ") {
            let rest = &buf[at + b"event: permissionRequest\ndata: ".len()..];
            if let Some(end) = memmem::find(rest, b"\n") {
                let data: serde_json::Value = serde_json::from_slice(&rest[..end])?;
                break data["requestId"]
                    .as_str()
                    .context("a permissionRequest without requestId")?
                    .to_string();
            }
        }
        let chunk = stream
            .next()
            .await
            .context("stream ended before the permission request")??;
        buf.extend_from_slice(&chunk);
    };
    let sent = Instant::now();
    let status = t
        .http
        .post(format!(
            "{control}/v1/sessions/{id}/permissions/{request_id}"
        ))
        .bearer_auth(&t.daemon_token)
        .json(&json!({"decision": "allow"}))
        .send()
        .await?
        .status();
    let answered = sent.elapsed();
    if !status.is_success() {
        bail!("the permission answer got {status}");
    }
    while memmem::find(&buf, b"event: complete").is_none() {
        let chunk = stream
            .next()
            .await
            .context("stream ended before complete")??;
        buf.extend_from_slice(&chunk);
    }
    Ok(answered)
}
