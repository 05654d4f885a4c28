//! `--config-compare FILE`: what a piece of configuration costs (budgets and rate rules, the
//! telemetry exporter, ...). Two daemons in one run, one without the file's tables and one with
//! them, the same load on each in alternating passes: D=0 one-token sessions (the daemon's CPU per
//! session) and paced sessions (its CPU per relayed token), and the ratios.
//!
//! The file's keys before its first table header are the mock provider's (its prices) and go to
//! both daemons, so that only the tables differ.

use crate::client::{self, Target};
use crate::daemon::{self, Daemon};
use anyhow::Context;
use futures_util::{StreamExt, stream};
use std::time::Duration;

/// A safety net so that a wedged stream fails the pass instead of hanging it.
const GUARD: Duration = Duration::from_secs(120);

/// What the comparison runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The configuration compared (TOML).
    pub extra: String,
    /// D=0 one-token sessions per pass, 4 at a time.
    pub sessions: usize,
    /// Paced sessions at once in the per-token pass.
    pub paced_concurrency: usize,
    /// Tokens per paced session.
    pub tokens: u32,
    /// Delay before each token of a paced session.
    pub delay_ms: u64,
    /// Passes per daemon (alternating which goes first).
    pub rounds: usize,
}

/// The file's keys before its first table header (they belong to the provider's table).
fn provider_keys(extra: &str) -> String {
    extra
        .lines()
        .take_while(|l| !l.trim_start().starts_with('['))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `n` sessions of `tokens` tokens with `delay_ms` before each, `c` at a time, on `t`: the
/// daemon's CPU time meanwhile.
async fn pass(
    t: &Target,
    pid: u32,
    n: usize,
    c: usize,
    tokens: u32,
    delay_ms: u64,
) -> anyhow::Result<u64> {
    let before = daemon::cpu_ns(pid)?;
    let results: Vec<anyhow::Result<client::Sample>> = stream::iter(0..n)
        .map(|_| async {
            tokio::time::timeout(GUARD, client::daemon(t, tokens, delay_ms))
                .await
                .unwrap_or_else(|_| Err(anyhow::anyhow!("no end of stream within {GUARD:?}")))
        })
        .buffer_unordered(c)
        .collect()
        .await;
    let spent = daemon::cpu_ns(pid)?.saturating_sub(before);
    if let Some(e) = results.into_iter().find_map(Result::err) {
        return Err(e.context("a session of the configuration comparison failed"));
    }
    Ok(spent)
}

/// CPU time of one daemon over the comparison's passes.
#[derive(Debug, Default)]
struct Spent {
    sessions_ns: u64,
    paced_ns: u64,
}

/// Starts both daemons against the mock at `mock_base`, runs the comparison and prints it.
pub async fn run(
    template: &Target,
    mock_base: &str,
    cpus: Option<&str>,
    s: Settings,
) -> anyhow::Result<()> {
    let plain = Daemon::start_node(mock_base, cpus, None, None, &provider_keys(&s.extra))
        .context("starting the daemon without the compared configuration")?;
    let with = Daemon::start_node(mock_base, cpus, None, None, &s.extra)
        .context("starting the daemon with the compared configuration")?;
    let target = |d: &Daemon| Target {
        daemon_base: d.base.clone(),
        daemon_token: d.token.clone(),
        ..template.clone()
    };
    let daemons = [(target(&plain), plain.pid), (target(&with), with.pid)];
    // Warm both: connection pools, prepared statements, caches.
    for (t, pid) in &daemons {
        pass(t, *pid, 8, 4, 1, 0).await?;
        pass(
            t,
            *pid,
            s.paced_concurrency,
            s.paced_concurrency,
            20,
            s.delay_ms,
        )
        .await?;
    }
    let mut spent = [Spent::default(), Spent::default()];
    for round in 0..s.rounds {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let (t, pid) = &daemons[i];
            spent[i].sessions_ns += pass(t, *pid, s.sessions, 4, 1, 0).await?;
            spent[i].paced_ns += pass(
                t,
                *pid,
                s.paced_concurrency,
                s.paced_concurrency,
                s.tokens,
                s.delay_ms,
            )
            .await?;
        }
    }
    let sessions = (s.sessions * s.rounds) as f64;
    let tokens = (s.paced_concurrency * s.rounds) as f64 * f64::from(s.tokens);
    let per_session = |x: &Spent| x.sessions_ns as f64 / 1000.0 / sessions;
    let per_token = |x: &Spent| x.paced_ns as f64 / 1000.0 / tokens;
    println!(
        "\nconfiguration comparison: {} D=0 one-token sessions (4 at a time) and {} paced \
         sessions (C={} N={} D={}ms) per daemon, {} rounds",
        s.sessions * s.rounds,
        s.paced_concurrency * s.rounds,
        s.paced_concurrency,
        s.tokens,
        s.delay_ms,
        s.rounds
    );
    let [a, b] = &spent;
    println!(
        "  daemon CPU per session: without {:.0} µs, with {:.0} µs, ratio {:.3}",
        per_session(a),
        per_session(b),
        per_session(b) / per_session(a)
    );
    println!(
        "  daemon CPU per paced token: without {:.2} µs, with {:.2} µs, ratio {:.3}",
        per_token(a),
        per_token(b),
        per_token(b) / per_token(a)
    );
    Ok(())
}
