//! The daemon set against nginx relaying the same streams: CPU per relayed token of each, and
//! the target on their ratio.

use crate::{Outcome, PathStats, table};

/// The daemon may spend this many times nginx's CPU per relayed token (paced streams).
const TARGET_CPU_VS_NGINX: f64 = 1.5;

/// CPU microseconds per token delivered on `path`, from `ns` of CPU time.
fn us_per_token(ns: u64, path: &PathStats) -> f64 {
    if path.tokens == 0 {
        return f64::NAN;
    }
    ns as f64 / 1e3 / path.tokens as f64
}

/// The daemon's CPU per relayed token over nginx's, in a scenario where nginx ran.
fn cpu_ratio(o: &Outcome) -> Option<f64> {
    let n = o.nginx.as_ref()?;
    Some(us_per_token(o.daemon.daemon_cpu_ns, &o.daemon) / us_per_token(n.nginx_cpu_ns, n))
}

/// Prints the comparison and the target line; `None` when nginx did not run in a paced scenario
/// (the target is not measured), else whether the target is met.
pub fn print(outcomes: &[Outcome]) -> Option<bool> {
    let rows: Vec<Vec<String>> = outcomes
        .iter()
        .filter_map(|o| {
            let n = o.nginx.as_ref()?;
            Some(vec![
                o.scenario.label(),
                format!(
                    "{}/{}/{}",
                    o.direct.samples.len(),
                    n.samples.len(),
                    o.daemon.samples.len()
                ),
                format!(
                    "{:.2}/{:.2}/{:.2}",
                    o.direct.ttft_ms(0.99),
                    n.ttft_ms(0.99),
                    o.daemon.ttft_ms(0.99)
                ),
                format!("{:.0}", n.tokens_per_sec()),
                format!("{:.2}", n.tokens_per_sec() / o.direct.tokens_per_sec()),
                format!("{:.2}", o.throughput_ratio()),
                format!("{:.1}", us_per_token(o.daemon.daemon_cpu_ns, &o.daemon)),
                format!("{:.1}", us_per_token(n.nginx_cpu_ns, n)),
                format!("{:.2}", cpu_ratio(o).unwrap_or(f64::NAN)),
            ])
        })
        .collect();
    let label = format!("target daemon CPU per relayed token <= {TARGET_CPU_VS_NGINX}x nginx's");
    if rows.is_empty() {
        println!("{label}: not measured (nginx not installed, or --no-nginx)");
        return None;
    }
    let header = [
        "scenario",
        "sessions dir/ngx/dmn",
        "TTFT p99 dir/ngx/dmn ms",
        "tok/s nginx",
        "ratio nginx",
        "ratio daemon",
        "daemon CPU µs/tok",
        "nginx CPU µs/tok",
        "daemon/nginx",
    ];
    println!();
    println!("the same streams through nginx (direct request, reverse proxy to the mock):");
    print!("{}", table(&header, &rows));
    let paced: Vec<(usize, f64)> = outcomes
        .iter()
        .filter(|o| o.scenario.delay_ms > 0)
        .filter_map(|o| Some((o.scenario.concurrency, cpu_ratio(o)?)))
        .collect();
    if paced.is_empty() {
        println!("{label} (paced streams): not measured (no paced scenario)");
        return None;
    }
    let ok = paced.iter().all(|&(_, r)| r <= TARGET_CPU_VS_NGINX);
    let list = paced
        .iter()
        .map(|(c, r)| format!("C={c}: {r:.2}x"))
        .collect::<Vec<_>>()
        .join(", ");
    println!(
        "{label} (paced streams, every C): {list} -> {}",
        if ok { "PASS" } else { "FAIL" }
    );
    Some(ok)
}
