//! `--key-compare`: what the key check costs on a request's hot path. The same D=0 `api`
//! sessions (POST, then the event stream) sent with a member's API key and with the root token,
//! in alternating passes against one daemon: its CPU time per session for each, and the ratio.

use crate::client::{self, Target};
use crate::daemon::{self, Daemon};
use anyhow::{Context, bail};
use futures_util::{StreamExt, stream};
use std::time::Duration;

/// The key may cost at most this much more CPU per session than the root token.
const TARGET_RATIO: f64 = 1.05;
/// A safety net so that a wedged stream fails the pass instead of hanging it.
const GUARD: Duration = Duration::from_secs(120);

/// What the pass runs.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Sessions per pass.
    pub sessions: usize,
    /// Sessions at once.
    pub concurrency: usize,
    /// Tokens per session.
    pub tokens: u32,
    /// Passes per credential (alternating which goes first).
    pub rounds: usize,
}

/// Creates a member's key with the root token (`POST /v1/admin/keys`).
async fn member_key(t: &Target) -> anyhow::Result<String> {
    let resp = t
        .http
        .post(format!("{}/v1/admin/keys", t.daemon_base))
        .bearer_auth(&t.daemon_token)
        .json(&serde_json::json!({
            "name": "bench", "user": "bench", "team": "bench", "role": "member",
            "expiresAt": null, "scopes": {},
        }))
        .send()
        .await?;
    let status = resp.status();
    let body: serde_json::Value = resp.json().await?;
    if status.as_u16() != 201 {
        bail!("POST /v1/admin/keys answered {status}: {body}");
    }
    Ok(body["key"]
        .as_str()
        .context("no key in the answer")?
        .to_string())
}

/// `n` D=0 sessions, `c` at a time, with `t`'s credential: the daemon's CPU time meanwhile.
async fn pass(t: &Target, d: &Daemon, n: usize, c: usize, tokens: u32) -> anyhow::Result<u64> {
    let before = daemon::cpu_ns(d.pid)?;
    let results: Vec<anyhow::Result<client::Sample>> = stream::iter(0..n)
        .map(|_| async {
            tokio::time::timeout(GUARD, client::daemon(t, tokens, 0))
                .await
                .unwrap_or_else(|_| Err(anyhow::anyhow!("no end of stream within {GUARD:?}")))
        })
        .buffer_unordered(c)
        .collect()
        .await;
    let spent = daemon::cpu_ns(d.pid)?.saturating_sub(before);
    if let Some(e) = results.into_iter().find_map(Result::err) {
        return Err(e.context("a session of the key comparison failed"));
    }
    Ok(spent)
}

/// Runs the comparison and prints it.
pub async fn run(root: &Target, d: &Daemon, s: Settings) -> anyhow::Result<()> {
    let member = Target {
        daemon_token: member_key(root).await?,
        ..root.clone()
    };
    // Warm both: connection pools, prepared statements, the key cache.
    for t in [root, &member] {
        pass(t, d, s.concurrency, s.concurrency, s.tokens).await?;
    }
    let (mut root_ns, mut member_ns) = (0u64, 0u64);
    for round in 0..s.rounds {
        let order: [(&Target, bool); 2] = if round % 2 == 0 {
            [(root, false), (&member, true)]
        } else {
            [(&member, true), (root, false)]
        };
        for (t, is_member) in order {
            let ns = pass(t, d, s.sessions, s.concurrency, s.tokens).await?;
            if is_member {
                member_ns += ns;
            } else {
                root_ns += ns;
            }
        }
    }
    let per_session = |ns: u64| ns as f64 / 1000.0 / (s.sessions * s.rounds) as f64;
    let (root_us, member_us) = (per_session(root_ns), per_session(member_ns));
    let ratio = member_us / root_us;
    println!(
        "\nkey check: {} D=0 sessions of {} tokens per credential ({} rounds, {} at a time)",
        s.sessions * s.rounds,
        s.tokens,
        s.rounds,
        s.concurrency
    );
    println!("  daemon CPU per session, root token: {root_us:.0} µs");
    println!("  daemon CPU per session, member key: {member_us:.0} µs");
    println!(
        "  member key / root token: {ratio:.3} (target <= {TARGET_RATIO}): {}",
        if ratio <= TARGET_RATIO {
            "met"
        } else {
            "NOT met"
        }
    );
    Ok(())
}
