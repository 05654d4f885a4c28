//! The control for the added-TTFT targets: nginx relaying the same request, measured the same
//! way in the same run. A p99 of some 100 sessions on a shared machine moves by milliseconds
//! from one pass to the next, for a plain relay as much as for the daemon; the control's own
//! "added" p99 says how large a difference this run can resolve.

use crate::Outcome;

/// nginx's added TTFT p99 over the direct path in this scenario, when nginx ran (ms).
pub fn nginx_added_p99_ms(o: &Outcome) -> Option<f64> {
    let n = o.nginx.as_ref()?;
    Some(n.ttft_ms(0.99) - o.direct.ttft_ms(0.99))
}

/// Prints the control line under a TTFT target line; `target_ms` is the target's bound.
pub fn print(o: &Outcome, target_ms: f64) {
    let Some(control) = nginx_added_p99_ms(o) else {
        println!("  control: not measured (nginx did not run)");
        return;
    };
    let n = o.nginx.as_ref().map_or(f64::NAN, |n| n.ttft_ms(0.99));
    let over_nginx = o.daemon.ttft_ms(0.99) - n;
    println!(
        "  control: nginx relaying the same requests adds {control:+.2} ms to the TTFT p99 in \
         this run; the daemon's TTFT p99 is {over_nginx:+.2} ms over nginx's"
    );
    if control.abs() >= target_ms {
        println!(
            "  the control moved by {:.2} ms, more than the target's {target_ms} ms: a plain relay's \
             p99 is not resolved to the target in this run, so neither is the daemon's",
            control.abs()
        );
    }
}
