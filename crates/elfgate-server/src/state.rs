//! The state every handler shares.

use crate::config::Config;
use elfgate_core::{EngineDispatcher, Metrics};
use elfgate_engines::{ProviderRegistry, TinyElfEngine};
use elfgate_mcp::McpManager;
use elfgate_store::Store;
use elfgate_tools::PermissionBroker;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio_util::sync::CancellationToken;

/// Shared daemon state; cloning is cheap.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<AppInner>,
}

/// What [`AppState`] holds.
pub struct AppInner {
    /// The loaded configuration.
    pub config: Config,
    /// Persistence.
    pub store: Arc<dyn Store>,
    /// Engines and runs.
    pub dispatcher: Arc<EngineDispatcher>,
    /// Configured providers.
    pub providers: ProviderRegistry,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// What every model call of every run goes through (budgets, rate limits, spend).
    pub meters: elfgate_core::Meters,
    /// Pending permission requests (tinyelf).
    pub permissions: Arc<PermissionBroker>,
    /// MCP servers and their connections (tinyelf's MCP tools).
    pub mcp: McpManager,
    /// Fired when the daemon shuts down: ends SSE streams.
    pub shutdown: CancellationToken,
    shutting_down: AtomicBool,
    /// Sessions being deleted (they take no new prompt), and the gates that keep prompts and
    /// deletions apart.
    pub sessions: crate::session_gate::SessionGates,
    /// Idempotency keys (`clientMsgId`) of requests being handled.
    pub client_keys: crate::idempotency::KeyLocks,
    /// Host and Origin checks, CORS.
    pub request_guard: crate::request_guard::RequestGuard,
    /// The gateway's per-provider limits.
    pub gateway_limits: crate::gateway::limits::ProviderLimits,
    /// The agent engine, for what the API asks of it outside runs (skills, prompt hooks).
    pub tinyelf: Arc<TinyElfEngine>,
    /// Tool runs outside a model's turn, through the tool gate (`POST …/tools/{name}`).
    pub tool_runs: Arc<dyn elfgate_tools::gate::ToolRuns>,
    /// This node's fleet connections (`[cluster]`); None for a single node.
    pub fleet: Option<Arc<crate::fleet::Fleet>>,
    /// Run tokens of CLIs going through the daemon's doors (the proxy), and its address.
    pub run_tokens: Arc<elfgate_core::RunTokens>,
    /// The workflows a run's end may start, as last read from the store.
    pub run_end_triggers: crate::run_end_triggers::RunEndTriggers,
    /// Single sign-on's JWT checks (`[auth.jwt]`); None when it is off.
    pub jwt: Option<Arc<crate::jwt::JwtVerifier>>,
    /// API keys, read from the store by public id and kept briefly (`[auth] key_cache_ms`).
    pub keys: Arc<crate::keys::KeyAuth>,
    /// Key changes and refused requests, written to the store at a bounded rate.
    pub access_audit: crate::access_audit::AccessAuditor,
}

/// What the daemon's runs share beside the store and the dispatcher, built once at start.
pub struct RunServices {
    /// The agent engine (for its skills and tool runs).
    pub tinyelf: Arc<TinyElfEngine>,
    /// The MCP servers.
    pub mcp: McpManager,
    /// Where permission requests wait for their answers; the engines that ask hold the same one.
    pub permissions: Arc<PermissionBroker>,
    /// Run tokens of CLIs going through the daemon's doors; the cli engine holds the same one.
    pub run_tokens: Arc<elfgate_core::RunTokens>,
}

impl AppState {
    /// Builds the state.
    pub fn new(
        config: Config,
        store: Arc<dyn Store>,
        dispatcher: Arc<EngineDispatcher>,
        providers: ProviderRegistry,
        metrics: Arc<Metrics>,
        runs: RunServices,
        fleet: Option<Arc<crate::fleet::Fleet>>,
    ) -> Self {
        let RunServices {
            tinyelf,
            mcp,
            permissions,
            run_tokens,
        } = runs;
        let bind = config
            .bind_addr()
            .unwrap_or_else(|_| std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, 0)));
        let request_guard = crate::request_guard::RequestGuard::new(
            bind,
            &config.server.allowed_hosts,
            &config.server.allowed_origins,
        );
        let gateway_limits =
            crate::gateway::limits::ProviderLimits::new(config.providers.iter().map(|(n, p)| {
                (
                    n.clone(),
                    crate::gateway::limits::LimitConfig {
                        max_concurrent: p.max_concurrent,
                        requests_per_minute: p.requests_per_minute,
                        max_queued: p.max_queued,
                    },
                )
            }));
        let jwt = config.auth.jwt.clone().map(crate::jwt::JwtVerifier::new);
        let keys = Arc::new(crate::keys::KeyAuth::new(
            store.clone(),
            std::time::Duration::from_millis(config.auth.key_cache_ms),
        ));
        let access_audit = crate::access_audit::AccessAuditor::start(store.clone());
        let meters = crate::model_meters::model_meters(&config, &store, fleet.as_ref());
        AppState {
            inner: Arc::new(AppInner {
                keys,
                access_audit,
                config,
                store,
                dispatcher,
                providers,
                metrics,
                meters,
                permissions,
                tool_runs: tinyelf.clone(),
                tinyelf,
                mcp,
                shutdown: CancellationToken::new(),
                shutting_down: AtomicBool::new(false),
                sessions: Default::default(),
                client_keys: Default::default(),
                request_guard,
                gateway_limits,
                fleet,
                run_tokens,
                run_end_triggers: Default::default(),
                jwt,
            }),
        }
    }

    /// Refuse new work from now on.
    pub fn begin_shutdown(&self) {
        self.inner.shutting_down.store(true, Ordering::SeqCst);
    }

    /// Whether the daemon is shutting down.
    pub fn is_shutting_down(&self) -> bool {
        self.inner.shutting_down.load(Ordering::SeqCst)
    }
}

impl std::ops::Deref for AppState {
    type Target = AppInner;
    fn deref(&self) -> &AppInner {
        &self.inner
    }
}
