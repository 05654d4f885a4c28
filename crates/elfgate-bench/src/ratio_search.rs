//! How many paced sessions the daemon relays at (nearly) the direct path's rate: the largest
//! concurrency of a list at which the paced relay ratio stays at or above a floor.

use crate::{Opts, Scenario, client::Target, daemon::Daemon, scenario};

/// The relay ratio (daemon tok/s / direct tok/s) a concurrency must keep to count.
pub const FLOOR: f64 = 0.95;

/// Runs the paced scenario at each concurrency of `list` in increasing order, direct and daemon
/// only, and stops at the first whose ratio falls below [`FLOOR`] (or that has errors): a higher
/// one that passes again would be noise, not headroom.
pub async fn run(
    target: &Target,
    mock: &elfgate_mockllm::MockServer,
    daemon: &Daemon,
    opts: &Opts,
    clk_tck: u64,
) -> anyhow::Result<()> {
    let mut list = opts.ratio_search.clone();
    list.sort_unstable();
    list.dedup();
    let mut results = Vec::new();
    let mut largest = None;
    for c in list {
        let sc = Scenario {
            concurrency: c,
            tokens: opts.tokens,
            delay_ms: opts.delay_ms,
            stagger: false,
        };
        let o = scenario(target, mock, daemon, None, sc, opts, clk_tck).await?;
        let ratio = o.throughput_ratio();
        let errors = o.errors();
        results.push(format!("C={c}: {ratio:.2} ({errors} errors)"));
        if ratio < FLOOR || errors > 0 {
            break;
        }
        largest = Some(c);
    }
    println!(
        "relay ratio search (D={} ms, N={}): {}",
        opts.delay_ms,
        opts.tokens,
        results.join(", ")
    );
    match largest {
        Some(c) => println!("largest C with paced relay ratio >= {FLOOR}: {c}"),
        None => println!("largest C with paced relay ratio >= {FLOOR}: none of the list"),
    }
    Ok(())
}
