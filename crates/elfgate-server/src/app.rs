//! Builds the daemon: store, engines, dispatcher, router; runs it until a shutdown signal.

use crate::auth::require_token;
use crate::config::{AuthMode, Config};
use crate::error::{ApiError, method_not_allowed};
use crate::extract::BodyLimit;
use crate::openapi;
use crate::request_guard::guard_requests;
use crate::routes;
use crate::state::AppState;
use crate::token_file::{self, TokenSource};
use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::middleware::{self, Next};
use axum::response::IntoResponse;
use elfgate_core::{ActiveSessions, EngineDispatcher, EventHub, Metrics};
use elfgate_engines::{
    ChatEngine, ChatMode, ChatSettings, CliEngine, ProviderRegistry, TinyElfConfig, TinyElfEngine,
};
use elfgate_llm::{ProviderConfig, RetryPolicy, build_provider};
use elfgate_mcp::McpManager;
use elfgate_store::{NodeMode, PgStore, SqliteStore, Store, StoreOptions};
use elfgate_tools::process::{ChildEnv, Isolation, Network};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// A built daemon, ready to serve.
pub struct Daemon {
    /// Shared state.
    pub state: AppState,
    /// Where the bearer token came from; None when auth is off.
    pub token_source: Option<TokenSource>,
    store: OpenStore,
}

/// The store the configuration names, opened.
#[derive(Clone)]
enum OpenStore {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

impl OpenStore {
    async fn open(config: &Config) -> Result<OpenStore, StartError> {
        let opts = StoreOptions {
            log_queue_events: config.storage.log_queue_events,
            log_linger: std::time::Duration::from_millis(config.storage.log_linger_ms),
            password: config.storage.password()?,
        };
        if config.storage.is_postgres() {
            let mode = match config.fleet_member()? {
                Some(member) => {
                    tracing::info!(fleet_node = %member.node_id, "running as a node of a fleet");
                    NodeMode::Fleet(member)
                }
                None => NodeMode::Single,
            };
            let store = PgStore::open_with(&config.storage.url, mode, opts).await?;
            return Ok(OpenStore::Postgres(store));
        }
        Ok(OpenStore::Sqlite(
            SqliteStore::open_with(&config.storage.url, opts).await?,
        ))
    }

    fn shared(&self) -> Arc<dyn Store> {
        match self {
            OpenStore::Sqlite(s) => Arc::new(s.clone()),
            OpenStore::Postgres(s) => Arc::new(s.clone()),
        }
    }

    /// The sessions whose lease this node lost (a fleet node on PostgreSQL).
    fn fenced_sessions(&self) -> Option<tokio::sync::broadcast::Receiver<elfgate_core::SessionId>> {
        match self {
            OpenStore::Sqlite(_) => None,
            OpenStore::Postgres(s) => s.fenced_sessions(),
        }
    }

    fn log_sender(&self) -> elfgate_core::LogSender {
        match self {
            OpenStore::Sqlite(s) => s.log_sender(),
            OpenStore::Postgres(s) => s.log_sender(),
        }
    }

    async fn close(&self) {
        match self {
            OpenStore::Sqlite(s) => s.close().await,
            OpenStore::Postgres(s) => s.close().await,
        }
    }
}

/// Applies pending migrations to the configured database (the `migrate` command).
pub async fn migrate(config: &Config) -> Result<(), StartError> {
    if config.storage.is_postgres() {
        let password = config.storage.password()?;
        Ok(PgStore::migrate(&config.storage.url, password.as_deref()).await?)
    } else {
        Ok(SqliteStore::migrate(&config.storage.url).await?)
    }
}

/// Why the daemon could not be built.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The token file could not be read or written.
    #[error(transparent)]
    Token(#[from] token_file::TokenFileError),
    /// The store could not be opened or recovered.
    #[error(transparent)]
    Store(#[from] elfgate_store::StoreError),
    /// The HTTP client for the providers could not be built.
    #[error("cannot build the HTTP client for the providers: {0}")]
    Http(#[from] reqwest::Error),
    /// The tinyelf engine refused its configuration.
    #[error(transparent)]
    TinyElf(#[from] elfgate_engines::TinyElfError),
    /// The fleet's connections could not be set up.
    #[error(transparent)]
    Fleet(#[from] crate::fleet::FleetStartError),
    /// The configuration cannot be used as it is.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
}

/// Settles the bearer token: ELFGATE_TOKEN, else (unless `[server] auth = "none"`) the token file
/// in the data directory, created at first start.
fn settle_token(
    config: &mut Config,
    data_dir: Option<&std::path::Path>,
) -> Result<Option<TokenSource>, StartError> {
    if config.token.is_some() {
        if config.server.auth == AuthMode::None {
            tracing::warn!("server.auth = \"none\" is ignored: ELFGATE_TOKEN is set");
        }
        return Ok(Some(TokenSource::Environment));
    }
    if config.server.auth == AuthMode::None {
        tracing::warn!(
            "server.auth = \"none\": any program of any user on this machine can drive the \
             daemon (and every tool it runs); use it only on a single-user machine"
        );
        return Ok(None);
    }
    let (token, source) = match data_dir {
        Some(dir) => token_file::load_or_create(dir)?,
        None => (token_file::generate()?, TokenSource::Ephemeral),
    };
    config.token = Some(token);
    Ok(Some(source))
}

fn providers(config: &Config) -> Result<ProviderRegistry, StartError> {
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .tcp_nodelay(true)
        .pool_max_idle_per_host(256)
        .build()?;
    let mut registry = ProviderRegistry::new();
    let mut keyless = Vec::new();
    for (name, p) in &config.providers {
        let api_key = p
            .api_key_env
            .as_deref()
            .and_then(|var| std::env::var(var).ok())
            .filter(|k| !k.is_empty());
        if let (None, Some(var)) = (&api_key, p.api_key_env.as_deref().filter(|v| !v.is_empty())) {
            keyless.push(format!("{name} ({var})"));
        }
        registry.insert(
            name.clone(),
            build_provider(
                ProviderConfig {
                    kind: p.kind,
                    base_url: p.base_url.trim_end_matches('/').to_string(),
                    api_key,
                    api_key_env: p.api_key_env.clone().filter(|v| !v.is_empty()),
                    default_model: p.default_model.clone(),
                    idle_timeout: Duration::from_secs(p.idle_timeout_secs.max(1)),
                    request_timeout: Duration::from_secs(p.request_timeout_secs.max(1)),
                    first_token_timeout: Duration::from_secs(
                        p.first_token_timeout_secs
                            .unwrap_or(p.request_timeout_secs.max(1) + p.idle_timeout_secs.max(1)),
                    ),
                },
                http.clone(),
            ),
        );
    }
    for (name, p) in &config.providers {
        registry.set_limits(
            name.clone(),
            elfgate_engines::ContextLimits {
                provider: elfgate_engines::ModelLimits {
                    context_window_tokens: p.context_window_tokens,
                    reserve_output_tokens: p.reserve_output_tokens,
                    extended_context_window_tokens: p.extended_context_window_tokens,
                    input_usd_per_mtok: p.input_usd_per_mtok,
                    output_usd_per_mtok: p.output_usd_per_mtok,
                },
                models: p.models.clone(),
            },
        );
    }
    // One line for all of them: a new user without keys sees which providers cannot work
    // before a run fails on one (each such run fails at once with missing_api_key).
    if !keyless.is_empty() {
        tracing::warn!(
            providers = %keyless.join(", "),
            "providers whose API key variable is not set: runs on them fail with missing_api_key \
             until it is set and the daemon restarted"
        );
    }
    registry.set_default(config.defaults.provider.clone());
    Ok(registry)
}

/// The daemon's data directory (a deny zone for tools, and where the token file is): `[storage]
/// data_dir`, else the SQLite database's directory, else `data` with PostgreSQL; None for an
/// in-memory SQLite database.
pub fn data_dir(storage: &crate::config::StorageConfig) -> Option<std::path::PathBuf> {
    let absolute = |p: &std::path::Path| -> Option<std::path::PathBuf> {
        if p.is_absolute() {
            Some(p.to_path_buf())
        } else {
            Some(std::env::current_dir().ok()?.join(p))
        }
    };
    if let Some(dir) = &storage.data_dir {
        return absolute(dir);
    }
    if storage.is_postgres() {
        return absolute(std::path::Path::new("data"));
    }
    let url = &storage.url;
    let path = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = path.split('?').next().unwrap_or(path);
    if path.is_empty() || path.starts_with(':') {
        return None;
    }
    let p = std::path::Path::new(path);
    let p = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().ok()?.join(p)
    };
    p.parent().map(std::path::Path::to_path_buf)
}

/// `[engines.tinyelf]` with what only the running daemon knows: the variables holding provider
/// keys (never given to children) and whether this host can isolate a child's network.
async fn tinyelf_config(config: &Config) -> TinyElfConfig {
    let mut c = config.engines.tinyelf.clone();
    c.web_search = config.tools.web_search.clone();
    // The providers' keys and the search backend's never reach a command.
    c.secret_env = config
        .providers
        .values()
        .filter_map(|p| p.api_key_env.clone())
        .chain(
            config
                .tools
                .web_search
                .as_ref()
                .and_then(|w| w.api_key_env.clone()),
        )
        .collect();
    let probe = Isolation::probe().await;
    match (&probe, c.shell_network) {
        (Ok(iso), Network::Isolated) => tracing::info!(
            isolation = %iso,
            "shell commands and hooks run in a network namespace of their own: the daemon's API \
             and every other network are out of their reach"
        ),
        (Err(why), Network::Isolated) => tracing::warn!(
            reason = %why,
            "cannot give shell commands and hooks a network of their own: they run in the \
             host's network and can reach the daemon's API (engines.tinyelf.shell_network = \
             \"isolated\" falls back to host)"
        ),
        (_, Network::Host) => tracing::info!(
            "engines.tinyelf.shell_network = \"host\": shell commands and hooks share the \
             host's network and can reach the daemon's API"
        ),
    }
    c.isolation = probe.ok();
    c
}

/// The environment MCP stdio servers start from: the clean child environment (allow-listed
/// variables only; never the daemon's ELFGATE_* variables nor the providers' key variables), to
/// which each server's `env` is added.
fn mcp_env(tinyelf: &TinyElfConfig) -> ChildEnv {
    ChildEnv::from_daemon(&Default::default(), &[], &tinyelf.secret_env)
}

/// A fleet node's stop: it takes no new runs (readiness is already false), says so to the
/// fleet, lets its active runs finish for `cluster.drain_secs`, then interrupts what is left
/// with finish reason `node_shutdown`; their sessions go on from the other nodes.
async fn drain(
    state: &AppState,
    fleet: &crate::fleet::Fleet,
) -> Vec<tokio_util::sync::CancellationToken> {
    state.dispatcher.stop_admitting();
    if let Err(e) = fleet.store.set_draining(true).await {
        tracing::warn!(error = %e, "could not mark this node draining in the store");
    }
    let secs = state.config.cluster.as_ref().map_or(0, |c| c.drain_secs);
    let active = state.dispatcher.active().clone();
    tracing::info!(
        runs = active.len(),
        drain_secs = secs,
        "draining: active runs may finish"
    );
    let finished = async {
        while !active.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(secs), finished)
        .await
        .is_err()
    {
        tracing::warn!(
            runs = active.len(),
            "drain time over: interrupting the runs left (node_shutdown)"
        );
    }
    state
        .dispatcher
        .interrupt_all_as(elfgate_core::FinishReason::NodeShutdown)
}

/// Stops the runs of sessions whose lease this node lost to another node (it was paused or cut
/// off past its lease, and the other node ended its runs as `node_lost`): their writes are
/// refused already, and their lease guard (which the session's bus holds) mutes them, so that
/// they end without a further event to anyone; this stops their engines, tools and processes, and
/// lets a later run of the session here number from the log on a new bus.
async fn stop_fenced_runs(
    mut fenced: tokio::sync::broadcast::Receiver<elfgate_core::SessionId>,
    dispatcher: Arc<EngineDispatcher>,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        match fenced.recv().await {
            Ok(session) => {
                dispatcher.hub().remove(session);
                if dispatcher.interrupt(session).run_id.is_some() {
                    tracing::error!(%session,
                        "stopped the runs of a session another node has taken over (fenced)");
                }
            }
            Err(RecvError::Lagged(missed)) => {
                tracing::error!(missed, "missed fenced sessions: stopping every active run");
                dispatcher.active().interrupt_all();
            }
            Err(RecvError::Closed) => return,
        }
    }
}

impl Daemon {
    /// Opens the store, recovers runs a crash left behind, registers the engines.
    pub async fn build(mut config: Config) -> Result<Daemon, StartError> {
        let dir = data_dir(&config.storage);
        let token_source = settle_token(&mut config, dir.as_deref())?;
        let store = OpenStore::open(&config).await?;
        if let Some(dir) = &dir {
            elfgate_core::private_files::warn_if_open_to_others(dir, "the data directory");
        }
        let shared: Arc<dyn Store> = store.shared();
        let recovered = shared.recover_unfinished_runs().await?;
        for r in &recovered {
            tracing::info!(session = %r.session_id, run = %r.run_id, "run ended by daemon restart");
        }
        let metrics = Arc::new(Metrics::default());
        for r in &recovered {
            metrics.run_finished(r.finish_reason);
        }
        let (fleet, relay) = match (&store, &config.cluster) {
            (OpenStore::Postgres(pg), Some(cluster)) if pg.is_fleet_node() => {
                let node_id = pg.node_id().unwrap_or_default().to_string();
                let (fleet, relay) =
                    crate::fleet::Fleet::start(node_id, pg.clone(), cluster).await?;
                (Some(fleet), Some(relay))
            }
            _ => (None, None),
        };
        let hub = EventHub::with_relay(store.log_sender(), metrics.clone(), relay);
        let active = ActiveSessions::with_max_queued(config.server.max_queued_prompts_per_session);
        let ledger: Arc<dyn elfgate_core::RunLedger> = shared.clone();
        let dispatcher = EngineDispatcher::new(active.clone(), hub, ledger, metrics.clone());
        if let Some(fenced) = store.fenced_sessions() {
            tokio::spawn(stop_fenced_runs(fenced, dispatcher.clone()));
        }
        let registry = providers(&config)?;
        let chat = &config.engines.chat;
        let settings = ChatSettings {
            max_history: chat.max_history.max(1),
            temperature: None,
            max_tokens: None,
            retry: RetryPolicy {
                max_retries: chat.max_retries,
                base_delay: Duration::from_millis(chat.retry_delay_ms),
                max_delay: Duration::from_millis(chat.max_retry_delay_ms),
                backoff: chat.retry_backoff,
                jitter: chat.retry_jitter,
            },
        };
        let permissions = Arc::new(elfgate_tools::PermissionBroker::with_max_remembered(
            config.engines.tinyelf.max_remembered_decisions,
        ));
        let tinyelf_config = tinyelf_config(&config).await;
        // The database lock is held: stdio servers noted in the data directory are a killed
        // daemon's, never a running one's.
        let mcp = McpManager::new(
            config.mcp.clone(),
            mcp_env(&tinyelf_config),
            dir.as_ref().map(|d| d.join("mcp").join("running")),
        );
        let tinyelf = TinyElfEngine::new(
            shared.clone(),
            registry.clone(),
            tinyelf_config,
            permissions.clone(),
            dir.clone(),
            Some(mcp.clone()),
        )?;
        // The search backend of searchOrchestration (the configuration was checked at load).
        let search = config
            .tools
            .web_search
            .as_ref()
            .and_then(|c| elfgate_tools::search::WebSearch::new(c).ok())
            .map(Arc::new);
        for mode in [
            ChatMode::MultiTurn,
            ChatMode::SingleTurn,
            ChatMode::Stateless,
        ] {
            let engine = ChatEngine::new(mode, shared.clone(), registry.clone(), settings.clone())
                .with_search(search.clone());
            // Only the multi-turn chat keeps a conversation a tool loop can go on in.
            let engine = match mode {
                ChatMode::MultiTurn => engine.with_tool_loop(tinyelf.chat_tool_loop()),
                ChatMode::SingleTurn | ChatMode::Stateless => engine,
            };
            dispatcher.register_engine(Arc::new(engine));
        }
        let tinyelf = Arc::new(tinyelf);
        dispatcher.register_engine(tinyelf.clone());
        dispatcher.register_engine(Arc::new(elfgate_engines::workflow::WorkflowEngine::new(
            shared.clone(),
            tinyelf.clone(),
            tinyelf.clone(),
            registry.clone(),
            settings.retry.clone(),
            config.workflows.template_limits(),
        )));
        let mut cli = config.engines.cli_config(&config);
        cli.state_dir = dir.clone().unwrap_or_else(std::env::temp_dir).join("cli");
        let run_tokens = elfgate_core::RunTokens::new();
        cli.mcp_servers = config.mcp.servers.clone();
        let cli = Arc::new(
            CliEngine::new(
                shared.clone(),
                cli,
                permissions.clone(),
                run_tokens.clone(),
                tinyelf.shell_rules(),
            )
            .await,
        );
        dispatcher.register_engine(cli.clone());
        dispatcher.register_engine(Arc::new(elfgate_engines::cli::sdk::ClaudeSdkEngine::new(
            cli,
        )));
        let runs = crate::state::RunServices {
            tinyelf,
            mcp,
            permissions,
            run_tokens,
        };
        let state = AppState::new(config, shared, dispatcher, registry, metrics, runs, fleet);
        Ok(Daemon {
            state,
            token_source,
            store,
        })
    }

    /// The router with every route and layer.
    pub fn router(&self) -> Router {
        let state = self.state.clone();
        let limit = state.config.server.body_limit_bytes;
        let protected = Router::new()
            .merge(routes::sessions::routes())
            .merge(routes::engines::routes())
            .merge(routes::cluster::routes())
            .merge(routes::skills::routes())
            .merge(routes::tool_runs::routes())
            .merge(routes::workflows::routes())
            .merge(routes::webhooks::routes())
            .merge(routes::mcp::routes())
            .merge(routes::gateway::routes())
            .merge(routes::health::protected_routes())
            .merge(openapi::routes())
            // Before the auth layer, so that a wrong method without a token is still 401.
            .method_not_allowed_fallback(method_not_allowed)
            // Inside auth: a request is checked here before it is sent to another node (which
            // checks it again).
            .layer(middleware::from_fn_with_state(
                state.clone(),
                crate::fleet::forward::to_owner,
            ))
            .layer(middleware::from_fn_with_state(state.clone(), require_token));
        Router::new()
            .merge(routes::health::routes())
            // Signed by the sender instead of a token (docs/workflows.md, "Inbound webhooks").
            .merge(routes::hooks::routes())
            // The web console's static files: no data in them, so no token (docs/console.md).
            .merge(crate::console::routes())
            .merge(protected)
            // Reaches only the routes above without one: the protected ones have theirs.
            .method_not_allowed_fallback(method_not_allowed)
            .fallback(|| async { ApiError::NotFound("no such route".into()).into_response() })
            .layer(middleware::from_fn(move |mut req: Request, next: Next| {
                req.extensions_mut().insert(BodyLimit(limit));
                next.run(req)
            }))
            .layer(DefaultBodyLimit::max(limit))
            // Outermost: a request from a foreign Host or Origin is refused before anything else,
            // and a CORS preflight is answered before auth (browsers send it without the token).
            .layer(middleware::from_fn_with_state(
                Arc::new(state.request_guard.clone()),
                guard_requests,
            ))
            // Around everything: a panic anywhere in a request's handling still gets an answer.
            .layer(middleware::from_fn(crate::panic_guard::answer_panics))
            // Outside the panic guard too, so that every answer, refusals and 500s included,
            // carries the request's id.
            .layer(middleware::from_fn(crate::request_id::assign))
            .with_state(state)
    }

    /// Serves on `listener` until `signal` completes, then shuts down gracefully: refuses new work,
    /// interrupts active runs and waits for them, ends streams, flushes the event log.
    pub async fn serve(
        self,
        listener: TcpListener,
        signal: impl Future<Output = ()> + Send + 'static,
    ) {
        let app = self.router();
        // Where a CLI run through the daemon's own door reaches it: loopback on the bound port.
        if let Ok(addr) = listener.local_addr() {
            let host = match addr.ip() {
                std::net::IpAddr::V4(ip) if ip.is_unspecified() => "127.0.0.1".to_string(),
                std::net::IpAddr::V6(ip) if ip.is_unspecified() => "[::1]".to_string(),
                std::net::IpAddr::V4(ip) => ip.to_string(),
                std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            };
            self.state
                .run_tokens
                .set_url(format!("http://{host}:{}", addr.port()));
        }
        if let Some(fleet) = &self.state.fleet {
            tokio::spawn(crate::fleet::forward::answer(
                fleet.clone(),
                app.clone(),
                self.state.config.server.body_limit_bytes,
            ));
            tokio::spawn(crate::fleet::recent::answer(
                fleet.clone(),
                self.state.dispatcher.clone(),
            ));
        }
        crate::workflow_runs::load_dir(&self.state).await;
        tokio::spawn(crate::workflow_schedule::schedule(self.state.clone()));
        tokio::spawn(crate::webhooks::deliver(self.state.clone()));
        if let Some(ends) = self.state.dispatcher.watch_run_ends() {
            crate::workflow_runs::refresh_triggers(&self.state).await;
            tokio::spawn(crate::workflow_runs::on_run_ends(self.state.clone(), ends));
        }
        let state = self.state.clone();
        let grace = Duration::from_secs(state.config.server.shutdown_grace_secs);
        let settings = crate::listener::ConnectionSettings::from_config(&state.config.server);
        let shutdown_state = state.clone();
        // New connections and requests are still taken while runs wind down (they get 503 for
        // new work); the listener stops after the streams have been told to end.
        let stop = async move {
            signal.await;
            tracing::info!("shutting down");
            shutdown_state.begin_shutdown();
            let done = match &shutdown_state.fleet {
                Some(fleet) => drain(&shutdown_state, fleet).await,
                None => shutdown_state.dispatcher.interrupt_all(),
            };
            let wait_all = async {
                for d in done {
                    d.cancelled().await;
                }
            };
            let active = shutdown_state.dispatcher.active().clone();
            let wait_all = async move {
                wait_all.await;
                // Queued runs end right after the running ones, without running.
                while !active.is_empty() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            };
            if tokio::time::timeout(grace, wait_all).await.is_err() {
                tracing::warn!("some runs did not end within the shutdown grace period");
            }
            shutdown_state.shutdown.cancel();
        };
        crate::listener::serve(listener, app, settings, stop).await;
        // Runs are over: no session needs a server any more.
        state.mcp.shutdown(grace).await;
        let hub = state.dispatcher.hub().clone();
        hub.release_all();
        if tokio::time::timeout(grace, hub.flush()).await.is_err() {
            tracing::warn!("the event log did not flush within the shutdown grace period");
        }
        drop(state);
        drop(hub);
        self.store.close().await;
    }
}
