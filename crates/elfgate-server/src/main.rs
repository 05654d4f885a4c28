//! The `elfgate` binary: `serve`, `migrate`, `config check`.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a binary: what it prints is its output"
)]

use anyhow::{Context, bail};
use clap::{Args, CommandFactory, Parser, Subcommand};
use elfgate_client::ClientCommand;
use elfgate_server::telemetry::Telemetry;
use elfgate_server::{Config, Daemon};
use std::path::PathBuf;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, layer::SubscriberExt};

/// Elfgate: AI engines behind one HTTP/SSE API.
#[derive(Debug, Parser)]
#[command(name = "elfgate", version, after_help = AFTER_HELP)]
struct Cli {
    /// What to do [default: serve].
    #[command(subcommand)]
    command: Option<Command>,
}

const AFTER_HELP: &str = "Environment: ELFGATE_BIND, ELFGATE_DATABASE_URL, ELFGATE_TOKEN, \
ELFGATE_<SECTION>__<KEY>, ELFGATE_LOG (log filter, default info), ELFGATE_LOG_FORMAT (text, the \
default, or json: one JSON object a line). Clients (chat, sessions, show, interrupt; see \
docs/terminal.md) exit 0 ok, 1 run error, 2 usage, 3 daemon unreachable or token refused.";

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the daemon.
    Serve(ConfigFile),
    /// Apply database migrations and exit.
    Migrate(ConfigFile),
    /// The configuration.
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// Print a completion script for SHELL (e.g. `elfgate completions bash > /etc/bash_completion.d/elfgate`).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    #[command(flatten)]
    Client(ClientCommand),
}

#[derive(Debug, Subcommand)]
enum ConfigAction {
    /// Load and check the configuration, print it, and exit.
    Check(ConfigFile),
}

/// What the daemon's side of the binary does (the client and completions are handled apart).
enum DaemonJob {
    Serve(ConfigFile),
    Migrate(ConfigFile),
    CheckConfig(ConfigFile),
}

#[derive(Debug, Default, Args)]
struct ConfigFile {
    /// A configuration file over the built-in defaults.
    #[arg(short, long, value_name = "FILE")]
    config: Option<PathBuf>,
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

/// Says where the bearer token is. Written with errors ignored: a caller that read the listening
/// line may have closed our stdout already.
fn print_token(daemon: &Daemon) {
    use elfgate_server::token_file::TokenSource;
    use std::io::Write;
    let token = daemon.state.config.token.as_deref().unwrap_or_default();
    let line = match &daemon.token_source {
        None => "elfgate auth: none (server.auth = \"none\"): no token is needed".to_string(),
        Some(TokenSource::Environment) => "elfgate token: from ELFGATE_TOKEN".to_string(),
        Some(TokenSource::File { path, created }) => format!(
            "elfgate token: {token} ({} {}; send it as 'Authorization: Bearer <token>')",
            if *created { "new, saved in" } else { "from" },
            path.display()
        ),
        Some(TokenSource::Ephemeral) => {
            format!("elfgate token: {token} (in-memory database: a new token at every start)")
        }
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Every client connection holds a file descriptor; the common default soft limit (1024) would
/// cap the daemon at about a thousand of them.
fn raise_file_limit() {
    match elfgate_server::fdlimit::raise() {
        Ok(l) => tracing::info!(
            soft = l.soft,
            hard = l.hard,
            was = l.before,
            "open-file limit"
        ),
        Err(e) => tracing::warn!(error = %e, "cannot raise the open-file limit"),
    }
}

/// Logs to stderr, filtered by ELFGATE_LOG: lines for people by default (coloured at a terminal), or with
/// ELFGATE_LOG_FORMAT=json one JSON object a line for log collectors. A JSON line carries the
/// event's fields at the top level and the fields of the span it happened in (a run's
/// `session_id` and `run_id`, and its `trace_id` and `span_id` when runs are traced) under
/// `span`. The trace spans (their own target) are never logged.
fn log_layer<S>() -> anyhow::Result<Box<dyn Layer<S> + Send + Sync>>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    let filter = EnvFilter::try_from_env("ELFGATE_LOG")
        .unwrap_or_else(|_| EnvFilter::new("info"))
        .add_directive(format!("{}=off", elfgate_core::telemetry::TARGET).parse()?);
    // Colour codes only for a person at a terminal: a file, a pipe or a journal gets plain text
    // (NO_COLOR, https://no-color.org, turns them off at a terminal too).
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(colour)
        .with_writer(elfgate_server::log_node::NodeTaggedStderr);
    Ok(match std::env::var("ELFGATE_LOG_FORMAT").as_deref() {
        Err(_) | Ok("" | "text") => layer.with_filter(filter).boxed(),
        Ok("json") => layer
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .with_filter(filter)
            .boxed(),
        Ok(other) => bail!("ELFGATE_LOG_FORMAT must be text or json, not '{other}'"),
    })
}

/// The daemon's subscriber: the log and, when runs are traced, the trace pipeline's layer.
fn init_logging(telemetry: Option<&Telemetry>) -> anyhow::Result<()> {
    let registry = tracing_subscriber::registry().with(log_layer()?);
    match telemetry {
        Some(t) => registry.with(t.layer()).try_init()?,
        None => registry.try_init()?,
    }
    Ok(())
}

/// The configuration, loaded under a log of its own for its warnings (the daemon's subscriber,
/// which needs the configuration's `[telemetry]`, comes after).
fn load_config(file: &ConfigFile) -> anyhow::Result<Config> {
    let subscriber = tracing_subscriber::registry().with(log_layer()?);
    Ok(tracing::subscriber::with_default(subscriber, || {
        Config::load(file.config.as_deref())
    })?)
}

/// See the dependency's comment in Cargo.toml: memory goes back to the system when load falls.
#[cfg(all(unix, not(target_env = "musl")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    // Started as the sandbox's Landlock launcher: confine itself and become the command, before
    // any thread exists.
    if let Some(code) = elfgate_tools::sandbox::launcher_main() {
        return code;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("elfgate: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    // A usage error exits 2 with clap's message; --help and --version exit 0.
    let cli = Cli::parse();
    let command = cli.command.unwrap_or(Command::Serve(ConfigFile::default()));
    let job = match command {
        Command::Client(cmd) => {
            let code = runtime.block_on(elfgate_client::run(cmd, token_file_path()));
            // A client has nothing to finish once it has its answer: its runtime is not waited
            // for (a thread blocked on the terminal, a connection being closed), so it exits at
            // once.
            runtime.shutdown_background();
            return std::process::ExitCode::from(code);
        }
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "elfgate",
                &mut std::io::stdout(),
            );
            return std::process::ExitCode::SUCCESS;
        }
        Command::Serve(file) => DaemonJob::Serve(file),
        Command::Migrate(file) => DaemonJob::Migrate(file),
        Command::Config {
            action: ConfigAction::Check(file),
        } => DaemonJob::CheckConfig(file),
    };
    let ended = runtime.block_on(run(job));
    // The daemon has shut down (runs ended, the log flushed): what still holds a blocking
    // thread (a workflow template's render with fuel left, which stops at its next write or
    // when its fuel runs out) is abandoned after a moment rather than waited for.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match ended {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("elfgate: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Where the daemon this machine's configuration describes (the default configuration,
/// ELFGATE_* variables and ELFGATE_DATABASE_URL) keeps its token file, for the client.
fn token_file_path() -> Option<PathBuf> {
    let config = Config::load(None).ok()?;
    let dir = elfgate_server::app::data_dir(&config.storage)?;
    Some(dir.join(elfgate_server::token_file::TOKEN_FILE))
}

/// `serve`: the configuration first (the subscriber needs its `[telemetry]`), then the daemon
/// until a stop signal, then the last spans out.
async fn serve(file: ConfigFile) -> anyhow::Result<()> {
    let config = load_config(&file)?;
    let node = config.fleet_member()?.map(|m| m.node_id);
    let telemetry = match &config.telemetry {
        Some(t) => Some(Telemetry::start(t, node.as_deref())?),
        None => None,
    };
    init_logging(telemetry.as_ref())?;
    if let Some(node) = &node {
        elfgate_server::log_node::set_node(node);
    }
    let addr = config.bind_addr()?;
    // Processes that escape a command's group are re-parented to the daemon, which kills
    // them when the command ends, instead of to init, where they would live on.
    if let Err(e) = elfgate_tools::process::become_subreaper() {
        tracing::warn!(
            error = %e,
            "cannot become a child subreaper: processes that escape a shell command's \
             process group outlive it"
        );
    }
    raise_file_limit();
    let daemon = Daemon::build(config).await?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let local = listener.local_addr()?;
    // Tests and scripts read this line to learn the port when binding port 0.
    println!("elfgate listening on http://{local}");
    tracing::info!(%local, "elfgate listening");
    print_token(&daemon);
    daemon.serve(listener, shutdown_signal()).await;
    if let Some(telemetry) = telemetry {
        telemetry.shutdown().await;
    }
    Ok(())
}

async fn run(job: DaemonJob) -> anyhow::Result<()> {
    // `serve` sets up its own subscriber, after reading the configuration.
    if !matches!(job, DaemonJob::Serve(_)) {
        init_logging(None)?;
    }
    match job {
        DaemonJob::Serve(file) => Box::pin(serve(file)).await,
        DaemonJob::Migrate(file) => {
            let config = Config::load(file.config.as_deref())?;
            elfgate_server::app::migrate(&config).await?;
            println!(
                "migrations applied to {}",
                elfgate_server::config::redact_url(&config.storage.url)
            );
            Ok(())
        }
        DaemonJob::CheckConfig(file) => {
            let config = Config::load(file.config.as_deref())?;
            println!("configuration is valid");
            println!("  bind: {}", config.server.bind);
            println!(
                "  storage: {}",
                elfgate_server::config::redact_url(&config.storage.url)
            );
            println!(
                "  providers: {}",
                config
                    .providers
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            println!("  default provider: {:?}", config.defaults.provider);
            // No budget exists in the configuration yet to narrow this down: every unpriced model
            // a route can reach is listed.
            let unpriced = config.unpriced_models();
            println!(
                "  unpriced models (their calls have no cost; a budget would not see them): {}",
                if unpriced.is_empty() {
                    "none".to_string()
                } else {
                    unpriced.join(", ")
                }
            );
            match (config.fleet_member()?, &config.cluster) {
                (Some(member), Some(cluster)) => println!(
                    "  cluster: node {} of the fleet on {}, NATS {}, lease {} s, heartbeat {} s, \
                     drain {} s",
                    member.node_id,
                    elfgate_server::config::redact_url(&config.storage.url),
                    elfgate_server::config::redact_url(&cluster.nats_url),
                    cluster.lease_secs,
                    cluster.heartbeat_secs,
                    cluster.drain_secs
                ),
                _ => println!("  cluster: none (a single node)"),
            }
            println!(
                "  mcp servers: {}",
                config
                    .mcp
                    .servers
                    .iter()
                    .map(|(n, s)| if s.enabled {
                        n.clone()
                    } else {
                        format!("{n} (disabled)")
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            println!(
                "  auth: {}",
                match (&config.token, config.server.auth) {
                    (Some(_), _) => "token from ELFGATE_TOKEN",
                    (None, elfgate_server::config::AuthMode::Token) =>
                        "token from the data directory's token file (created at first start)",
                    (None, elfgate_server::config::AuthMode::None) => "none (loopback only)",
                }
            );
            Ok(())
        }
    }
}
