//! `elfgate-bench`: starts the mock provider in-process and the `elfgate` daemon as a separate
//! process, then drives C concurrent sessions of N streamed tokens both straight against the mock
//! and through the daemon's SSE API, and prints the two side by side.
//!
//! ```text
//! cargo build --release -p elfgate-server -p elfgate-bench
//! target/release/elfgate-bench [--concurrency 1,50,200] [--tokens 200] [--delay-ms 5] ...
//! ```
//!
//! See `docs/benchmarks.md` for what each column means.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a binary: what it prints is its output"
)]

mod client;
mod config_compare;
mod daemon;
mod fleet;
mod gateway_report;
mod key_compare;
mod memory;
mod nginx;
mod nginx_report;
mod ratio_search;
mod ttft_control;
mod write_rate;

use anyhow::{Context, bail};
use client::{Path, Sample, Target};
use daemon::{Daemon, RssSampler};
use nginx::Nginx;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// Added TTFT p99 allowed at 50 concurrent sessions (paced, the one-request flow is the one judged).
const TARGET_ADDED_TTFT_P99_MS: f64 = 2.0;
/// Relay throughput as a fraction of direct.
const TARGET_THROUGHPUT_RATIO: f64 = 0.80;
/// Idle daemon RSS.
const TARGET_IDLE_RSS_MB: f64 = 30.0;
/// The concurrency the TTFT target is stated for.
const TARGET_TTFT_CONCURRENCY: usize = 50;

/// Concurrent SSE sessions through the elfgate daemon vs. directly against the mock.
///
/// The `elfgate` binary must sit next to this executable (same cargo profile):
/// `cargo build --release -p elfgate-server -p elfgate-bench` (or scripts/bench.sh).
#[derive(Debug, clap::Parser)]
#[command(name = "elfgate-bench")]
struct Cli {
    /// Concurrent sessions per scenario, comma-separated.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "1,50,200"
    )]
    concurrency: Vec<usize>,
    /// Tokens streamed per session.
    #[arg(long, value_name = "N", default_value_t = 200)]
    tokens: u32,
    /// Mock delay before each token in the latency pass.
    #[arg(long, value_name = "D", default_value_t = 5)]
    delay_ms: u64,
    /// Direct+daemon pass pairs per scenario (alternating).
    #[arg(long, value_name = "R", default_value_t = 3)]
    rounds: usize,
    /// Run more rounds until each path has S sessions.
    #[arg(long, value_name = "S", default_value_t = 20)]
    min_samples: usize,
    /// Skip the throughput pass (delay 0).
    #[arg(long)]
    no_throughput: bool,
    /// Daemon sessions as one request: POST /v1/sessions with Accept: text/event-stream
    /// (default: POST, then GET events).
    #[arg(long)]
    one_request: bool,
    /// Paced scenarios start their C sessions spread over one session's length, and each of
    /// the C runs a second session right after its first: TTFT is taken from the second ones,
    /// which start while C sessions stream (default: all C at once).
    #[arg(long)]
    stagger: bool,
    /// The daemon path is the gateway's front door instead: the direct request (POST
    /// /v1/chat/completions, stream) sent to the daemon with model mock/MODEL; judged on the
    /// gateway's targets.
    #[arg(long, conflicts_with = "one_request")]
    gateway: bool,
    /// With --gateway: the same sessions through the Responses door (POST /v1/responses) as a
    /// third path in the same run, set against the chat-completions door.
    #[arg(long, requires = "gateway")]
    responses: bool,
    /// Instead of the scenarios: N idle SSE subscribers over --idle-sessions sessions; RSS
    /// before/with/after and /healthz latency meanwhile (needs ulimit -n > N).
    #[arg(long, value_name = "N", default_value_t = 0)]
    idle_subscribers: usize,
    /// Sessions the idle subscribers follow.
    #[arg(long, value_name = "S", default_value_t = 100)]
    idle_sessions: usize,
    /// Instead of the scenarios: N prompts of 1 MB in one chat session; RSS before, at the end,
    /// and once idle.
    #[arg(long, value_name = "N", default_value_t = 0)]
    large_prompts: usize,
    /// Instead of the scenarios: N D=0 sessions per pass with a member's API key and with the
    /// root token, alternating for --rounds rounds, 4 at a time: the daemon's CPU per session
    /// for each.
    #[arg(long, value_name = "N", default_value_t = 0)]
    key_compare: usize,
    /// Instead of the scenarios: two daemons, without and with the TOML in FILE (its keys before
    /// the first table header are the mock provider's, e.g. prices, and go to both), the same
    /// load on each in alternating passes (--rounds): N D=0 one-token sessions (see
    /// --config-compare-sessions) and C paced sessions (--tokens, --delay-ms, the first
    /// --concurrency): the daemon's CPU per session and per token for each, and the ratios.
    #[arg(long, value_name = "FILE")]
    config_compare: Option<std::path::PathBuf>,
    /// D=0 sessions per pass of --config-compare.
    #[arg(long, value_name = "N", default_value_t = 200)]
    config_compare_sessions: usize,
    /// Skip the nginx path (run when /usr/sbin/nginx exists).
    #[arg(long)]
    no_nginx: bool,
    /// Start the daemon and nginx on these CPUs (a taskset list, e.g. 1); run the bench itself
    /// on the others (`taskset -c 0 elfgate-bench --relay-cpus 1 ...`) so that the relays do not
    /// share a CPU with the load generator and the mock (default: all share every CPU).
    #[arg(long, value_name = "LIST")]
    relay_cpus: Option<String>,
    /// After the scenarios, the largest C of LIST (e.g. 200,300,400,500) whose paced relay
    /// ratio stays >= 0.95 (D = --delay-ms).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    ratio_search: Vec<usize>,
    /// After the scenarios, the event log's sustained write rate (implied by the options below).
    #[arg(long)]
    write_rate: bool,
    /// Sessions at once in the write-rate pass [default: 200].
    #[arg(long, value_name = "C")]
    write_rate_sessions: Option<usize>,
    /// Mock delay before each token in the write-rate pass [default: 1].
    #[arg(long, value_name = "D")]
    write_rate_delay_ms: Option<u64>,
    /// Length of the write-rate pass's measured window [default: 10].
    #[arg(long, value_name = "S")]
    write_rate_secs: Option<u64>,
    /// Run the daemon under test on PostgreSQL: a new database on the server whose
    /// administrator's URL this is (postgres://USER@HOST:PORT/postgres), instead of SQLite.
    #[arg(long, value_name = "URL")]
    postgres: Option<String>,
    /// After the scenarios: a fleet of two nodes on a new database of --postgres and the NATS
    /// server at this URL: interrupt through another node, failover time after SIGKILL.
    #[arg(long, value_name = "NATS_URL", requires = "postgres")]
    fleet: Option<String>,
    /// With --postgres: run the same scenarios (and the write-rate pass) on a second daemon on
    /// SQLite in the same invocation, and print the two storages side by side.
    #[arg(long, requires = "postgres")]
    compare_sqlite: bool,
    /// Sessions at once in the fleet pass's follow comparison (followed on the node that runs
    /// them against through the other node), comma-separated: one comparison each.
    #[arg(
        long,
        value_name = "C,...",
        value_delimiter = ',',
        default_value = "50"
    )]
    fleet_follow_concurrency: Vec<usize>,
    /// SIGKILLs measured in the fleet pass [default: 5].
    #[arg(long, value_name = "K", default_value_t = 5)]
    fleet_kills: usize,
    /// Print one line per pass.
    #[arg(short, long)]
    verbose: bool,
}

/// Command-line options.
#[derive(Debug, Clone)]
struct Opts {
    concurrency: Vec<usize>,
    tokens: u32,
    delay_ms: u64,
    rounds: usize,
    min_samples: usize,
    throughput: bool,
    one_request: bool,
    /// Paced passes start their sessions spread out (see `pass`).
    stagger: bool,
    /// The daemon path is the gateway's `POST /v1/chat/completions` (see `gateway_report`).
    gateway: bool,
    /// The Responses door as a third path (with `gateway`).
    responses: bool,
    verbose: bool,
    idle_subscribers: usize,
    idle_sessions: usize,
    large_prompts: usize,
    /// Sessions per pass of the key comparison (0: none).
    key_compare: usize,
    /// The configuration comparison (`--config-compare`), when asked for.
    config_compare: Option<config_compare::Settings>,
    /// Run the nginx path when nginx is installed.
    nginx: bool,
    /// Concurrencies to search for the largest paced relay ratio >= 0.95 (empty: no search).
    ratio_search: Vec<usize>,
    /// The event log write-rate pass, when asked for.
    write_rate: Option<write_rate::Settings>,
    /// The CPUs the relays under test (daemon, nginx) run on (`taskset` list).
    relay_cpus: Option<String>,
    /// The PostgreSQL server the daemon under test uses (`--postgres`); None: SQLite.
    postgres: Option<String>,
    /// The fleet pass (`--fleet`).
    fleet: Option<fleet::Settings>,
    /// The same scenarios on SQLite too, side by side (`--compare-sqlite`).
    compare_sqlite: bool,
}

/// A command line that clap accepted but that makes no sense: said the way clap says its own
/// errors (exit status 2).
fn usage_error(message: &str) -> ! {
    <Cli as clap::CommandFactory>::command()
        .error(clap::error::ErrorKind::ValueValidation, message)
        .exit()
}

impl Opts {
    /// The command line, checked beyond what clap checks.
    fn parse() -> Opts {
        let c = <Cli as clap::Parser>::parse();
        let write_rate = (c.write_rate
            || c.write_rate_sessions.is_some()
            || c.write_rate_delay_ms.is_some()
            || c.write_rate_secs.is_some())
        .then(|| {
            let d = write_rate::Settings::default();
            write_rate::Settings {
                sessions: c.write_rate_sessions.unwrap_or(d.sessions),
                delay_ms: c.write_rate_delay_ms.unwrap_or(d.delay_ms),
                secs: c.write_rate_secs.unwrap_or(d.secs),
            }
        });
        if c.concurrency.is_empty() || c.concurrency.contains(&0) || c.ratio_search.contains(&0) {
            usage_error("--concurrency and --ratio-search need positive numbers");
        }
        if !c.ratio_search.is_empty() && c.delay_ms == 0 {
            usage_error("--ratio-search measures paced streams: --delay-ms must be positive");
        }
        if write_rate
            .as_ref()
            .is_some_and(|w| w.sessions == 0 || w.secs == 0)
        {
            usage_error("--write-rate-sessions and --write-rate-secs must be positive");
        }
        if c.tokens == 0 {
            usage_error("--tokens must be positive");
        }
        let config_compare = match &c.config_compare {
            Some(path) => match std::fs::read_to_string(path) {
                Ok(extra) => Some(config_compare::Settings {
                    extra,
                    sessions: c.config_compare_sessions.max(1),
                    paced_concurrency: c.concurrency[0],
                    tokens: c.tokens,
                    delay_ms: c.delay_ms,
                    rounds: c.rounds.max(1),
                }),
                Err(e) => usage_error(&format!(
                    "--config-compare: cannot read {}: {e}",
                    path.display()
                )),
            },
            None => None,
        };
        Opts {
            concurrency: c.concurrency,
            tokens: c.tokens,
            delay_ms: c.delay_ms,
            rounds: c.rounds.max(1),
            min_samples: c.min_samples,
            throughput: !c.no_throughput,
            one_request: c.one_request,
            stagger: c.stagger,
            gateway: c.gateway,
            responses: c.responses,
            verbose: c.verbose,
            idle_subscribers: c.idle_subscribers,
            idle_sessions: c.idle_sessions,
            large_prompts: c.large_prompts,
            key_compare: c.key_compare,
            config_compare,
            nginx: !c.no_nginx,
            ratio_search: c.ratio_search,
            write_rate,
            relay_cpus: c.relay_cpus,
            fleet: c
                .fleet
                .zip(c.postgres.clone())
                .map(|(nats_url, postgres_admin)| fleet::Settings {
                    nats_url,
                    postgres_admin,
                    kills: c.fleet_kills.max(1),
                    follow_concurrency: c.fleet_follow_concurrency,
                    stagger: c.stagger,
                }),
            postgres: c.postgres,
            compare_sqlite: c.compare_sqlite,
        }
    }
}

/// One scenario: C sessions at once, each streaming N tokens with D ms between them.
#[derive(Debug, Clone, Copy)]
struct Scenario {
    concurrency: usize,
    tokens: u32,
    delay_ms: u64,
    /// Sessions start spread over one session's length (`--stagger`; paced scenarios only).
    stagger: bool,
}

impl Scenario {
    fn label(&self) -> String {
        let kind = if self.delay_ms == 0 { "thru" } else { "lat" };
        let spread = if self.stagger { " spread" } else { "" };
        format!(
            "{kind} C={} N={} D={}ms{spread}",
            self.concurrency, self.tokens, self.delay_ms
        )
    }
}

/// Everything one path measured over a scenario's passes.
#[derive(Debug, Default)]
struct PathStats {
    samples: Vec<Sample>,
    errors: usize,
    first_error: Option<String>,
    tokens: u64,
    wall: Duration,
    /// Daemon CPU ticks used during this path's passes.
    daemon_cpu_ticks: u64,
    /// Daemon CPU time during this path's passes, in ns (its CPU-time clock).
    daemon_cpu_ns: u64,
    /// This process's CPU time (the mock provider and the load generator) during them, in ns.
    bench_cpu_ns: u64,
    /// nginx's CPU time (master and workers) during them, in ns.
    nginx_cpu_ns: u64,
    /// Highest daemon RSS seen during this path's passes.
    daemon_peak_rss: u64,
}

impl PathStats {
    fn ttft_ms(&self, q: f64) -> f64 {
        percentile_ms(self.samples.iter().map(|s| s.ttft), q)
    }
    fn total_ms(&self, q: f64) -> f64 {
        percentile_ms(self.samples.iter().map(|s| s.total), q)
    }
    fn tokens_per_sec(&self) -> f64 {
        let secs = self.wall.as_secs_f64();
        if secs > 0.0 {
            self.tokens as f64 / secs
        } else {
            0.0
        }
    }
}

/// Nearest-rank percentile `q` (0..=1) of `values`, in milliseconds (NaN when empty).
/// "C=1: 100%, C=50: 99%": each scenario's daemon/direct throughput ratio.
fn ratios(outcomes: &[&Outcome]) -> String {
    outcomes
        .iter()
        .map(|o| {
            format!(
                "C={}: {:.0}%",
                o.scenario.concurrency,
                100.0 * o.throughput_ratio()
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn percentile_ms(values: impl Iterator<Item = Duration>, q: f64) -> f64 {
    let mut v: Vec<Duration> = values.collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_unstable();
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1].as_secs_f64() * 1000.0
}

/// What a scenario produced.
#[derive(Debug)]
struct Outcome {
    scenario: Scenario,
    direct: PathStats,
    daemon: PathStats,
    /// The direct request through nginx, when nginx runs.
    nginx: Option<PathStats>,
    /// The same sessions through the Responses door, when asked (`--responses`).
    responses: Option<PathStats>,
    clk_tck: u64,
}

impl Outcome {
    fn added_ttft_p99_ms(&self) -> f64 {
        self.daemon.ttft_ms(0.99) - self.direct.ttft_ms(0.99)
    }
    fn throughput_ratio(&self) -> f64 {
        let d = self.direct.tokens_per_sec();
        if d > 0.0 {
            self.daemon.tokens_per_sec() / d
        } else {
            f64::NAN
        }
    }
    /// (p50 daemon stream time − p50 direct stream time) / N, in microseconds.
    fn added_us_per_token(&self) -> f64 {
        (self.daemon.total_ms(0.5) - self.direct.total_ms(0.5)) * 1000.0
            / f64::from(self.scenario.tokens)
    }
    fn daemon_cpu_secs(&self) -> f64 {
        self.daemon.daemon_cpu_ticks as f64 / self.clk_tck as f64
    }
    fn daemon_cpu_pct(&self) -> f64 {
        let wall = self.daemon.wall.as_secs_f64();
        if wall > 0.0 {
            100.0 * self.daemon_cpu_secs() / wall
        } else {
            f64::NAN
        }
    }
    fn daemon_cpu_us_per_token(&self) -> f64 {
        if self.daemon.tokens > 0 {
            self.daemon_cpu_secs() * 1e6 / self.daemon.tokens as f64
        } else {
            f64::NAN
        }
    }
    fn errors(&self) -> usize {
        self.direct.errors
            + self.daemon.errors
            + self.nginx.as_ref().map_or(0, |n| n.errors)
            + self.responses.as_ref().map_or(0, |r| r.errors)
    }
    /// CPU microseconds per session of `ns` over `path`'s sessions.
    fn us_per_session(ns: u64, path: &PathStats) -> f64 {
        if path.samples.is_empty() {
            return f64::NAN;
        }
        ns as f64 / 1e3 / path.samples.len() as f64
    }
    /// Where the CPU of one session goes on each path, and the throughput ratio it implies when
    /// both paths keep every core busy: direct CPU / daemon-path CPU per session.
    fn cpu_split(&self) -> String {
        let direct = Self::us_per_session(self.direct.bench_cpu_ns, &self.direct);
        let bench = Self::us_per_session(self.daemon.bench_cpu_ns, &self.daemon);
        let daemon = Self::us_per_session(self.daemon.daemon_cpu_ns, &self.daemon);
        format!(
            "C={}: direct {direct:.0} µs (mock+client); through the daemon {bench:.0} µs (mock+client) \
             + {daemon:.0} µs (daemon) -> CPU-bound estimate {:.0}%",
            self.scenario.concurrency,
            100.0 * direct / (bench + daemon)
        )
    }
}

/// How a pass starts its sessions.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Starts {
    /// All `c` at once: a burst of session starts.
    Burst,
    /// Session `i` of the `c` starts `i * spread / c` in, and its task runs a second session
    /// right after the first. With `spread` one session's length, every second session starts
    /// while `c` sessions stream, at an even pace: a steady load of `c` streams rather than a
    /// burst. Only the second sessions are sampled.
    Spread(Duration),
}

/// Runs `c` sessions on `path`; returns the samples, the sessions run but not sampled (the first
/// ones of a spread pass), the errors and the wall time.
async fn pass(
    target: &Target,
    path: Path,
    c: usize,
    tokens: u32,
    delay_ms: u64,
    starts: Starts,
) -> (Vec<Sample>, usize, Vec<String>, Duration) {
    let started = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..c {
        let t = target.clone();
        set.spawn(async move {
            // A safety net so that a wedged stream fails the pass instead of hanging it.
            let guard = Duration::from_secs(120);
            let one = || async {
                match tokio::time::timeout(guard, client::run(&t, path, tokens, delay_ms)).await {
                    Ok(r) => r,
                    Err(_) => Err(anyhow::anyhow!("no end of stream within {guard:?}")),
                }
            };
            match starts {
                Starts::Burst => one().await.map(|s| (s, 0)),
                Starts::Spread(spread) => {
                    tokio::time::sleep(spread * i as u32 / c as u32).await;
                    one().await?;
                    one().await.map(|s| (s, 1))
                }
            }
        });
    }
    let mut samples = Vec::with_capacity(c);
    let mut unsampled = 0;
    let mut errors = Vec::new();
    while let Some(r) = set.join_next().await {
        match r {
            Ok(Ok((s, n))) => {
                samples.push(s);
                unsampled += n;
            }
            Ok(Err(e)) => errors.push(format!("{e:#}")),
            Err(e) => errors.push(format!("task failed: {e}")),
        }
    }
    (samples, unsampled, errors, started.elapsed())
}

/// Runs one scenario: a warmup, then direct and daemon passes alternately.
async fn scenario(
    target: &Target,
    mock: &elfgate_mockllm::MockServer,
    daemon: &Daemon,
    nginx: Option<&Nginx>,
    sc: Scenario,
    opts: &Opts,
    clk_tck: u64,
) -> anyhow::Result<Outcome> {
    // Warm up with the full concurrency so that both connection pools (ours, and the daemon's to
    // the mock) already hold C connections: a burst of new loopback connections can stall on SYN
    // retransmits (~1 s) and would otherwise dominate the first pass's p99.
    let daemon_path = if opts.gateway {
        Path::Gateway
    } else {
        Path::Daemon
    };
    let mut paths = vec![Path::Direct, daemon_path];
    if nginx.is_some() {
        paths.push(Path::Nginx);
    }
    if opts.responses {
        paths.push(Path::Responses);
    }
    for &path in &paths {
        let (_, _, errors, _) = pass(
            target,
            path,
            sc.concurrency,
            sc.tokens.min(20),
            0,
            Starts::Burst,
        )
        .await;
        if let Some(e) = errors.first() {
            bail!("warmup on {} failed: {e}", path.label());
        }
    }
    mock.clear_requests();
    let rounds = opts.rounds.max(opts.min_samples.div_ceil(sc.concurrency));
    let starts = if sc.stagger {
        Starts::Spread(Duration::from_millis(sc.delay_ms * u64::from(sc.tokens)))
    } else {
        Starts::Burst
    };
    let mut direct = PathStats::default();
    let mut via = PathStats::default();
    let mut proxied = PathStats::default();
    let mut responses = PathStats::default();
    for round in 0..rounds {
        // Every path goes first in turn: with two paths the order alternates.
        let mut order = paths.clone();
        order.rotate_left(round % paths.len());
        for path in order {
            let nginx_cpu = || nginx.map_or(Ok(0), Nginx::cpu_ns);
            let ngx0 = nginx_cpu()?;
            let cpu0 = daemon::cpu_ticks(daemon.pid)?;
            let (dns0, own0) = (
                daemon::cpu_ns(daemon.pid)?,
                daemon::cpu_ns(std::process::id())?,
            );
            let sampler = RssSampler::start(daemon.pid, Duration::from_millis(10));
            let (samples, unsampled, errors, wall) =
                pass(target, path, sc.concurrency, sc.tokens, sc.delay_ms, starts).await;
            let peak = sampler.stop(daemon.pid);
            let cpu = daemon::cpu_ticks(daemon.pid)?.saturating_sub(cpu0);
            let dns = daemon::cpu_ns(daemon.pid)?.saturating_sub(dns0);
            let own = daemon::cpu_ns(std::process::id())?.saturating_sub(own0);
            let ngx = nginx_cpu()?.saturating_sub(ngx0);
            mock.clear_requests();
            if opts.verbose {
                let max = samples.iter().map(|s| s.ttft).max().unwrap_or_default();
                eprintln!(
                    "    round {round} {}: {} ok, {} failed, max TTFT {:.2} ms, wall {:.3} s, \
                     daemon CPU {cpu} ticks, peak RSS {:.1} MB",
                    path.label(),
                    samples.len(),
                    errors.len(),
                    max.as_secs_f64() * 1000.0,
                    wall.as_secs_f64(),
                    mb(peak)
                );
            }
            let st = match path {
                Path::Direct => &mut direct,
                Path::Daemon | Path::Gateway => &mut via,
                Path::Nginx => &mut proxied,
                Path::Responses => &mut responses,
            };
            st.tokens += (samples.len() + unsampled) as u64 * u64::from(sc.tokens);
            st.samples.extend(samples);
            st.errors += errors.len();
            if st.first_error.is_none() {
                st.first_error = errors.into_iter().next();
            }
            st.wall += wall;
            st.daemon_cpu_ticks += cpu;
            st.daemon_cpu_ns += dns;
            st.bench_cpu_ns += own;
            st.nginx_cpu_ns += ngx;
            st.daemon_peak_rss = st.daemon_peak_rss.max(peak);
        }
    }
    let out = Outcome {
        scenario: sc,
        direct,
        daemon: via,
        nginx: nginx.is_some().then_some(proxied),
        responses: opts.responses.then_some(responses),
        clk_tck,
    };
    eprintln!(
        "  {:<24} {} rounds: ttft p99 {:.2}/{:.2} ms, {:.0}/{:.0} tok/s, {} errors",
        sc.label(),
        rounds,
        out.direct.ttft_ms(0.99),
        out.daemon.ttft_ms(0.99),
        out.direct.tokens_per_sec(),
        out.daemon.tokens_per_sec(),
        out.errors()
    );
    if opts.verbose && !opts.gateway {
        let answered: Vec<Duration> = out
            .daemon
            .samples
            .iter()
            .filter_map(|s| s.phases.map(|p| p.0))
            .collect();
        let opened: Vec<Duration> = out
            .daemon
            .samples
            .iter()
            .filter_map(|s| s.phases.map(|p| p.1))
            .collect();
        eprintln!(
            "    daemon phases: POST answered p50 {:.2} p99 {:.2} ms; event stream open p50 {:.2} \
             p99 {:.2} ms; first token p50 {:.2} p99 {:.2} ms",
            percentile_ms(answered.iter().copied(), 0.5),
            percentile_ms(answered.iter().copied(), 0.99),
            percentile_ms(opened.iter().copied(), 0.5),
            percentile_ms(opened.iter().copied(), 0.99),
            out.daemon.ttft_ms(0.5),
            out.daemon.ttft_ms(0.99),
        );
    }
    let all = [Some(&out.direct), Some(&out.daemon), out.nginx.as_ref()];
    for (path, st) in paths.iter().zip(all.into_iter().flatten()) {
        let label = path.label();
        if let Some(e) = &st.first_error {
            eprintln!("    first {label} error: {e}");
        }
    }
    Ok(out)
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Renders rows as a Markdown-compatible table with aligned columns.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let mut s = String::new();
    let line = |s: &mut String, cells: &mut dyn Iterator<Item = &str>| {
        s.push('|');
        for (c, w) in cells.zip(&widths) {
            let _ = write!(s, " {c:>w$} |");
        }
        s.push('\n');
    };
    line(&mut s, &mut header.iter().copied());
    s.push('|');
    for w in &widths {
        let _ = write!(s, "{}:|", "-".repeat(w + 1));
    }
    s.push('\n');
    for r in rows {
        line(&mut s, &mut r.iter().map(String::as_str));
    }
    s
}

fn report(outcomes: &[Outcome], idle_rss: u64, idle_rss_after: u64, opts: &Opts) -> bool {
    let header = [
        "scenario",
        "sessions",
        "TTFT p50 dir/dmn ms",
        "TTFT p99 dir/dmn ms",
        "+TTFT p99 ms",
        "tok/s direct",
        "tok/s daemon",
        "ratio",
        "+µs/token p50",
        "RSS peak MB",
        "CPU s (%)",
        "CPU µs/tok",
        "errors",
    ];
    let rows: Vec<Vec<String>> = outcomes
        .iter()
        .map(|o| {
            vec![
                o.scenario.label(),
                format!("{}/{}", o.direct.samples.len(), o.daemon.samples.len()),
                format!("{:.2}/{:.2}", o.direct.ttft_ms(0.5), o.daemon.ttft_ms(0.5)),
                format!(
                    "{:.2}/{:.2}",
                    o.direct.ttft_ms(0.99),
                    o.daemon.ttft_ms(0.99)
                ),
                format!("{:+.2}", o.added_ttft_p99_ms()),
                format!("{:.0}", o.direct.tokens_per_sec()),
                format!("{:.0}", o.daemon.tokens_per_sec()),
                format!("{:.2}", o.throughput_ratio()),
                format!("{:+.1}", o.added_us_per_token()),
                format!(
                    "{:.1}",
                    mb(o.direct.daemon_peak_rss.max(o.daemon.daemon_peak_rss))
                ),
                format!("{:.2} ({:.0}%)", o.daemon_cpu_secs(), o.daemon_cpu_pct()),
                format!("{:.1}", o.daemon_cpu_us_per_token()),
                o.errors().to_string(),
            ]
        })
        .collect();
    println!();
    println!(
        "elfgate-bench: {} cores{}, N={} tokens/session, latency pass D={} ms{}; daemon sessions {}",
        std::thread::available_parallelism().map_or(0, std::num::NonZero::get),
        match &opts.relay_cpus {
            Some(cpus) => format!(" (relays on CPUs {cpus})"),
            None => String::new(),
        },
        opts.tokens,
        opts.delay_ms,
        if opts.throughput {
            ", throughput pass D=0"
        } else {
            ""
        },
        if opts.gateway {
            "through the gateway (POST /v1/chat/completions, stream, model mock/MODEL)"
        } else if opts.one_request {
            "as one request (POST with Accept: text/event-stream)"
        } else {
            "as POST then GET events"
        }
    );
    println!(
        "daemon RSS idle after start: {:.1} MB; idle after the run: {:.1} MB",
        mb(idle_rss),
        mb(idle_rss_after)
    );
    // Other work on the machine slows every path; say how busy it was.
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        let avg: Vec<&str> = load.split_whitespace().take(3).collect();
        println!("load average (1, 5, 15 min): {}", avg.join(" "));
    }
    println!();
    print!("{}", table(&header, &rows));
    println!();
    if opts.gateway {
        return gateway_report::print(outcomes);
    }

    // Target checks.
    let mut all_pass = true;
    let mut measured_all = true;
    let mut verdict = |ok: bool| {
        all_pass &= ok;
        if ok { "PASS" } else { "FAIL" }
    };
    let ttft = outcomes
        .iter()
        .find(|o| o.scenario.concurrency == TARGET_TTFT_CONCURRENCY && o.scenario.delay_ms > 0);
    match ttft {
        Some(o) => {
            let added = o.added_ttft_p99_ms();
            println!(
                "target added TTFT p99 < {TARGET_ADDED_TTFT_P99_MS} ms at C={TARGET_TTFT_CONCURRENCY}: \
                 {added:+.2} ms -> {}",
                verdict(added < TARGET_ADDED_TTFT_P99_MS && o.errors() == 0)
            );
            ttft_control::print(o, TARGET_ADDED_TTFT_P99_MS);
        }
        None => {
            measured_all = false;
            println!(
                "target added TTFT p99 at C={TARGET_TTFT_CONCURRENCY}: not measured (add {TARGET_TTFT_CONCURRENCY} to --concurrency)"
            );
        }
    }
    // For reference: the same ratio with paced streams (what a real provider sends).
    let paced: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| o.scenario.delay_ms > 0)
        .collect();
    if !paced.is_empty() {
        println!(
            "relay throughput with paced streams (latency passes, not the target): {}",
            ratios(&paced)
        );
    }
    // Relay throughput is judged on the delay-0 passes (the mock streams as fast as it can).
    let thru: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| o.scenario.delay_ms == 0)
        .collect();
    if thru.is_empty() {
        measured_all = false;
        println!("target relay throughput >= 80% of direct: not measured (--no-throughput)");
    } else {
        let worst = thru
            .iter()
            .map(|o| o.throughput_ratio())
            .fold(f64::INFINITY, f64::min);
        let errors: usize = thru.iter().map(|o| o.errors()).sum();
        println!(
            "target relay throughput >= {:.0}% of direct (D=0, every C): {} -> {}",
            100.0 * TARGET_THROUGHPUT_RATIO,
            ratios(&thru),
            verdict(worst >= TARGET_THROUGHPUT_RATIO && errors == 0)
        );
        // What bounds it: with all cores busy on both paths, the ratio is the CPU a session costs
        // directly over what it costs through the daemon (the mock and the client included).
        for o in &thru {
            println!("  CPU per session at D=0, {}", o.cpu_split());
        }
    }
    println!(
        "target idle RSS < {TARGET_IDLE_RSS_MB} MB: {:.1} MB -> {}",
        mb(idle_rss),
        verdict(mb(idle_rss) < TARGET_IDLE_RSS_MB)
    );
    match nginx_report::print(outcomes) {
        Some(ok) => all_pass &= ok,
        None => measured_all = false,
    }
    let errors: usize = outcomes.iter().map(Outcome::errors).sum();
    if errors > 0 {
        println!("{errors} sessions failed: see the errors above");
        all_pass = false;
    }
    println!(
        "summary: {}",
        match (all_pass, measured_all) {
            (true, true) => "all targets met",
            (true, false) => "the targets measured are met; some were not measured",
            (false, _) => "some targets NOT met",
        }
    );
    all_pass
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let opts = Opts::parse();
    let mock = elfgate_mockllm::MockServer::start()
        .await
        .context("starting the mock provider")?;
    let database = match &opts.postgres {
        Some(admin) => Some(daemon::new_postgres_database(admin).await?),
        None => None,
    };
    let daemon = Daemon::start(&mock.base_url(), opts.relay_cpus.as_deref(), database)?;
    println!("daemon storage: {}", daemon.db.kind());
    let nginx = if opts.nginx {
        Nginx::start_if_installed(&mock.base_url(), opts.relay_cpus.as_deref())?
    } else {
        None
    };
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(4096)
        .tcp_nodelay(true)
        .build()?;
    // Let the daemon settle before taking its idle RSS.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let idle_rss = daemon::rss_bytes(daemon.pid)?;
    let clk_tck = daemon::clock_ticks();
    eprintln!(
        "mock at {}, daemon pid {} at {}, idle RSS {:.1} MB",
        mock.base_url(),
        daemon.pid,
        daemon.base,
        mb(idle_rss)
    );
    match &nginx {
        Some(n) => eprintln!(
            "nginx pid {} ({} workers) at {}",
            n.pid,
            n.worker_count(),
            n.base
        ),
        None if opts.nginx => eprintln!("{} not found: no nginx path", nginx::BINARY),
        None => {}
    }
    let target = Target {
        http,
        mock_base: mock.base_url(),
        daemon_base: daemon.base.clone(),
        daemon_token: daemon.token.clone(),
        one_request: opts.one_request,
        nginx_base: nginx.as_ref().map(|n| n.base.clone()),
        follow_base: None,
    };
    if opts.idle_subscribers > 0 {
        return memory::idle_subscribers(
            &daemon,
            &target,
            opts.idle_sessions,
            opts.idle_subscribers,
        )
        .await;
    }
    if opts.large_prompts > 0 {
        return memory::large_prompts(&daemon, &target, opts.large_prompts, 1_000_000).await;
    }
    if opts.key_compare > 0 {
        let settings = key_compare::Settings {
            sessions: opts.key_compare,
            concurrency: 4,
            tokens: opts.tokens,
            rounds: opts.rounds,
        };
        return key_compare::run(&target, &daemon, settings).await;
    }
    if let Some(settings) = opts.config_compare.clone() {
        return config_compare::run(
            &target,
            &mock.base_url(),
            opts.relay_cpus.as_deref(),
            settings,
        )
        .await;
    }

    let mut scenarios: Vec<Scenario> = opts
        .concurrency
        .iter()
        .map(|&c| Scenario {
            concurrency: c,
            tokens: opts.tokens,
            delay_ms: opts.delay_ms,
            stagger: opts.stagger && opts.delay_ms > 0,
        })
        .collect();
    if opts.throughput && opts.delay_ms > 0 {
        scenarios.extend(opts.concurrency.iter().map(|&c| Scenario {
            concurrency: c,
            tokens: opts.tokens,
            delay_ms: 0,
            stagger: false,
        }));
    }
    let mut outcomes = Vec::new();
    for &sc in &scenarios {
        outcomes.push(scenario(&target, &mock, &daemon, nginx.as_ref(), sc, &opts, clk_tck).await?);
    }
    // Idle again: give the daemon a moment to drop finished sessions' state.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_after = daemon::rss_bytes(daemon.pid)?;
    report(&outcomes, idle_rss, idle_after, &opts);
    if !opts.gateway {
        interrupt_report(&target).await?;
    }
    if !opts.ratio_search.is_empty() {
        ratio_search::run(&target, &mock, &daemon, &opts, clk_tck).await?;
    }
    if let Some(w) = &opts.write_rate {
        write_rate::run(&target, &daemon, opts.tokens, w).await?;
    }
    if opts.compare_sqlite {
        storage_comparison(
            &target, &mock, &scenarios, &outcomes, &daemon, &opts, clk_tck,
        )
        .await?;
    }
    if let Some(f) = &opts.fleet {
        fleet::run(&target, &mock, f).await?;
    }
    Ok(())
}

/// `--compare-sqlite`: the scenarios that ran on PostgreSQL, again on a daemon on SQLite, and
/// both side by side (the write-rate pass too when it was asked for).
async fn storage_comparison(
    target: &Target,
    mock: &elfgate_mockllm::MockServer,
    scenarios: &[Scenario],
    on_postgres: &[Outcome],
    postgres_daemon: &Daemon,
    opts: &Opts,
    clk_tck: u64,
) -> anyhow::Result<()> {
    let daemon = Daemon::start(&mock.base_url(), opts.relay_cpus.as_deref(), None)?;
    let on_sqlite_target = Target {
        daemon_base: daemon.base.clone(),
        daemon_token: daemon.token.clone(),
        ..target.clone()
    };
    eprintln!(
        "the same scenarios on SQLite: daemon pid {} at {}",
        daemon.pid, daemon.base
    );
    let mut on_sqlite = Vec::with_capacity(scenarios.len());
    for &sc in scenarios {
        on_sqlite.push(scenario(&on_sqlite_target, mock, &daemon, None, sc, opts, clk_tck).await?);
    }
    let mut rows = Vec::new();
    for (sq, pg) in on_sqlite.iter().zip(on_postgres) {
        let per_session = |o: &Outcome| Outcome::us_per_session(o.daemon.daemon_cpu_ns, &o.daemon);
        rows.push(vec![
            sq.scenario.label(),
            format!(
                "{:+.2} / {:+.2}",
                sq.daemon.ttft_ms(0.5) - sq.direct.ttft_ms(0.5),
                pg.daemon.ttft_ms(0.5) - pg.direct.ttft_ms(0.5)
            ),
            format!(
                "{:+.2} / {:+.2}",
                sq.added_ttft_p99_ms(),
                pg.added_ttft_p99_ms()
            ),
            format!(
                "{:.1} / {:.1}",
                sq.daemon_cpu_us_per_token(),
                pg.daemon_cpu_us_per_token()
            ),
            format!("{:.0} / {:.0}", per_session(sq), per_session(pg)),
            format!(
                "{:.3} / {:.3}",
                sq.throughput_ratio(),
                pg.throughput_ratio()
            ),
            format!("{} / {}", sq.errors(), pg.errors()),
        ]);
    }
    println!(
        "storage side by side, one invocation (SQLite / PostgreSQL; PostgreSQL's own CPU not counted):"
    );
    print!(
        "{}",
        table(
            &[
                "scenario",
                "added TTFT p50 ms",
                "added TTFT p99 ms",
                "daemon CPU us/token",
                "daemon CPU us/session",
                "relay ratio",
                "errors",
            ],
            &rows
        )
    );
    if let Some(w) = &opts.write_rate {
        println!("event log write rate on SQLite:");
        write_rate::run(&on_sqlite_target, &daemon, opts.tokens, w).await?;
        println!(
            "(on PostgreSQL: the write-rate pass above, daemon pid {})",
            postgres_daemon.pid
        );
    }
    Ok(())
}

/// Interrupt latency on a stalled stream, one session at a time.
async fn interrupt_report(target: &Target) -> anyhow::Result<()> {
    const RUNS: usize = 20;
    let mut samples = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        samples.push(client::interrupt_latency(target).await?);
    }
    println!(
        "interrupt of a stalled stream ({RUNS} runs): answered p50 {:.2} ms p99 {:.2} ms; \
         complete on the stream p50 {:.2} ms p99 {:.2} ms",
        percentile_ms(samples.iter().map(|s| s.answered), 0.5),
        percentile_ms(samples.iter().map(|s| s.answered), 0.99),
        percentile_ms(samples.iter().map(|s| s.complete_seen), 0.5),
        percentile_ms(samples.iter().map(|s| s.complete_seen), 0.99),
    );
    Ok(())
}
