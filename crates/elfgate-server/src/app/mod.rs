//! Builds the daemon: store, engines, dispatcher, router; runs it until a shutdown signal. The
//! store is opened in store.rs, the other parts are made in setup.rs, the router and the serving
//! are in serve.rs.

mod serve;
mod setup;
mod store;

pub use setup::data_dir;
pub use store::migrate;

use crate::config::Config;
use crate::state::AppState;
use crate::token_file::{self, TokenSource};
use elfgate_core::{ActiveSessions, EngineDispatcher, EventHub, Metrics};
use elfgate_engines::{ChatEngine, ChatMode, ChatSettings, CliEngine, TinyElfEngine};
use elfgate_llm::RetryPolicy;
use elfgate_mcp::McpManager;
use elfgate_store::Store;
use setup::{mcp_child, providers, settle_token, tinyelf_config};
use std::sync::Arc;
use std::time::Duration;
use store::OpenStore;

/// A built daemon, ready to serve.
pub struct Daemon {
    /// Shared state.
    pub state: AppState,
    /// Where the bearer token came from; None when auth is off.
    pub token_source: Option<TokenSource>,
    store: OpenStore,
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
            mcp_child(&tinyelf_config),
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
        state
            .budgets
            .start(
                &state.config.budgets,
                state.fleet.is_some(),
                state.shutdown.clone(),
            )
            .await?;
        Ok(Daemon {
            state,
            token_source,
            store,
        })
    }
}
