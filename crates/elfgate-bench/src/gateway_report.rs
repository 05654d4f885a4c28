//! The targets of the gateway's front door (`--gateway`): the direct request sent through the
//! daemon's `POST /v1/chat/completions` set against the same request sent to the mock.

use crate::{Outcome, nginx_report, ratios};

/// Added TTFT p99 allowed through the front door, at [`TTFT_CONCURRENCY`] paced sessions.
const ADDED_TTFT_P99_MS: f64 = 2.0;
/// The concurrency the TTFT target is stated for.
const TTFT_CONCURRENCY: usize = 50;
/// Relay ratio (tok/s through the daemon / direct) the paced streams must keep at every C.
const PACED_RATIO: f64 = 0.95;

/// Prints the target lines and the summary; whether every gateway target was met.
pub fn print(outcomes: &[Outcome]) -> bool {
    let mut all_pass = true;
    let mut measured_all = true;
    let mut verdict = |ok: bool| {
        all_pass &= ok;
        if ok { "PASS" } else { "FAIL" }
    };
    let paced: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| o.scenario.delay_ms > 0)
        .collect();
    match paced
        .iter()
        .find(|o| o.scenario.concurrency == TTFT_CONCURRENCY)
    {
        Some(o) => {
            let added = o.added_ttft_p99_ms();
            println!(
                "target gateway added TTFT p99 < {ADDED_TTFT_P99_MS} ms at C={TTFT_CONCURRENCY} \
                 (paced): {added:+.2} ms -> {}",
                verdict(added < ADDED_TTFT_P99_MS && o.errors() == 0)
            );
            crate::ttft_control::print(o, ADDED_TTFT_P99_MS);
        }
        None => {
            measured_all = false;
            println!(
                "target gateway added TTFT p99 at C={TTFT_CONCURRENCY}: not measured (needs \
                 {TTFT_CONCURRENCY} in --concurrency and a positive --delay-ms)"
            );
        }
    }
    if paced.is_empty() {
        measured_all = false;
        println!("target gateway relay ratio with paced streams: not measured (--delay-ms 0)");
    } else {
        let worst = paced
            .iter()
            .map(|o| o.throughput_ratio())
            .fold(f64::INFINITY, f64::min);
        let errors: usize = paced.iter().map(|o| o.errors()).sum();
        println!(
            "target gateway relay ratio >= {PACED_RATIO} with paced streams (every C): {} -> {}",
            ratios(&paced),
            verdict(worst >= PACED_RATIO && errors == 0)
        );
    }
    let thru: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| o.scenario.delay_ms == 0)
        .collect();
    if !thru.is_empty() {
        println!(
            "gateway relay ratio at D=0 (not a target): {}",
            ratios(&thru)
        );
        for o in &thru {
            println!("  CPU per session at D=0, {}", o.cpu_split());
        }
    }
    print_responses(outcomes);
    // For reference only: nginx relays the same request without parsing or storing it.
    let _ = nginx_report::print(outcomes);
    let errors: usize = outcomes.iter().map(Outcome::errors).sum();
    if errors > 0 {
        println!("{errors} sessions failed: see the errors above");
        all_pass = false;
    }
    println!(
        "summary (gateway front door): {}",
        match (all_pass, measured_all) {
            (true, true) => "all gateway targets met",
            (true, false) => "the gateway targets measured are met; some were not measured",
            (false, _) => "some gateway targets NOT met",
        }
    );
    all_pass
}

/// The Responses door beside the chat-completions door, per scenario (`--responses`): its added
/// TTFT p99 over the direct request and over the chat door, its relay ratio, and the daemon's
/// CPU per token on each door.
fn print_responses(outcomes: &[Outcome]) {
    for o in outcomes {
        let Some(r) = &o.responses else { continue };
        let cpu_per_token = |ticks: u64, tokens: u64| {
            if tokens > 0 {
                ticks as f64 / o.clk_tck as f64 * 1e6 / tokens as f64
            } else {
                f64::NAN
            }
        };
        let d = o.direct.tokens_per_sec();
        println!(
            "responses door {}: added TTFT p99 {:+.2} ms (chat door {:+.2} ms, responses - chat \
             {:+.2} ms); relay ratio {:.3} (chat door {:.3}); daemon CPU {:.1} µs/token (chat \
             door {:.1}); {} errors",
            o.scenario.label(),
            r.ttft_ms(0.99) - o.direct.ttft_ms(0.99),
            o.added_ttft_p99_ms(),
            r.ttft_ms(0.99) - o.daemon.ttft_ms(0.99),
            if d > 0.0 {
                r.tokens_per_sec() / d
            } else {
                f64::NAN
            },
            o.throughput_ratio(),
            cpu_per_token(r.daemon_cpu_ticks, r.tokens),
            o.daemon_cpu_us_per_token(),
            r.errors
        );
    }
}
