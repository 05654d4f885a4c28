//! Builds the daemon: store, engines, dispatcher, router; runs it until a shutdown signal.

use crate::auth::require_token;
use crate::config::Config;
use crate::error::{ApiError, BodyLimit};
use crate::routes;
use crate::state::AppState;
use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::middleware::{self, Next};
use axum::response::IntoResponse;
use axum::serve::ListenerExt;
use elfgate_core::{ActiveSessions, EngineDispatcher, EventHub, Metrics};
use elfgate_engines::{ChatEngine, ChatMode, ChatSettings, ProviderRegistry, TinyElfEngine};
use elfgate_llm::{ProviderConfig, ProviderKind, RetryPolicy, build_provider};
use elfgate_store::{SqliteStore, Store, StoreOptions};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// A built daemon, ready to serve.
pub struct Daemon {
    /// Shared state.
    pub state: AppState,
    store: SqliteStore,
}

fn providers(config: &Config) -> anyhow::Result<ProviderRegistry> {
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .tcp_nodelay(true)
        .pool_max_idle_per_host(256)
        .build()?;
    let mut registry = ProviderRegistry::new();
    for (name, p) in &config.providers {
        let api_key = p
            .api_key_env
            .as_deref()
            .and_then(|var| std::env::var(var).ok())
            .filter(|k| !k.is_empty());
        let kind = match p.kind {
            crate::config::ProviderKindConfig::Openai => ProviderKind::Openai,
            crate::config::ProviderKindConfig::Anthropic => ProviderKind::Anthropic,
        };
        registry.insert(
            name.clone(),
            build_provider(
                ProviderConfig {
                    kind,
                    base_url: p.base_url.trim_end_matches('/').to_string(),
                    api_key,
                    default_model: p.default_model.clone(),
                    idle_timeout: Duration::from_secs(p.idle_timeout_secs.max(1)),
                    request_timeout: Duration::from_secs(p.request_timeout_secs.max(1)),
                },
                http.clone(),
            ),
        );
    }
    registry.set_default(config.defaults.provider.clone());
    Ok(registry)
}

/// The directory of the SQLite database (a deny zone for tools).
fn data_dir(url: &str) -> Option<std::path::PathBuf> {
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
    p.parent().map(|d| d.to_path_buf())
}

impl Daemon {
    /// Opens the store, recovers runs a crash left behind, registers the engines.
    pub async fn build(config: Config) -> anyhow::Result<Daemon> {
        let store = SqliteStore::open_with(
            &config.storage.url,
            StoreOptions {
                log_queue_events: config.storage.log_queue_events,
            },
        )
        .await?;
        let recovered = store.recover_unfinished_runs().await?;
        for r in &recovered {
            tracing::info!(session = %r.session_id, run = %r.run_id, "run ended by daemon restart");
        }
        let metrics = Arc::new(Metrics::default());
        for _ in &recovered {
            metrics.run_finished(elfgate_core::FinishReason::DaemonRestart);
        }
        let hub = EventHub::new(store.log_sender(), metrics.clone());
        let active = ActiveSessions::with_max_queued(config.server.max_queued_prompts_per_session);
        let shared: Arc<dyn Store> = Arc::new(store.clone());
        let ledger: Arc<dyn elfgate_core::RunLedger> = Arc::new(store.clone());
        let dispatcher = EngineDispatcher::new(active.clone(), hub, ledger, metrics.clone());
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
            },
        };
        for mode in [
            ChatMode::MultiTurn,
            ChatMode::SingleTurn,
            ChatMode::Stateless,
        ] {
            dispatcher.register_engine(Arc::new(ChatEngine::new(
                mode,
                shared.clone(),
                registry.clone(),
                settings.clone(),
            )));
        }
        let permissions = Arc::new(elfgate_tools::PermissionBroker::with_max_remembered(
            config.engines.tinyelf.max_remembered_decisions,
        ));
        let tinyelf = TinyElfEngine::new(
            shared.clone(),
            registry.clone(),
            config.engines.tinyelf.clone(),
            permissions.clone(),
            data_dir(&config.storage.url),
        )?;
        dispatcher.register_engine(Arc::new(tinyelf));
        let state = AppState::new(config, shared, dispatcher, registry, metrics, permissions);
        Ok(Daemon { state, store })
    }

    /// The router with every route and layer.
    pub fn router(&self) -> Router {
        let state = self.state.clone();
        let limit = state.config.server.body_limit_bytes;
        let protected = Router::new()
            .merge(routes::sessions::routes())
            .merge(routes::engines::routes())
            .merge(routes::health::protected_routes())
            .layer(middleware::from_fn_with_state(state.clone(), require_token));
        Router::new()
            .merge(routes::health::routes())
            .merge(protected)
            .fallback(|| async { ApiError::NotFound("no such route".into()).into_response() })
            .layer(middleware::from_fn(move |mut req: Request, next: Next| {
                req.extensions_mut().insert(BodyLimit(limit));
                next.run(req)
            }))
            .layer(DefaultBodyLimit::max(limit))
            .with_state(state)
    }

    /// Serves on `listener` until `signal` completes, then shuts down gracefully: refuses new work,
    /// interrupts active runs and waits for them, ends streams, flushes the event log.
    pub async fn serve(
        self,
        listener: TcpListener,
        signal: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let app = self.router();
        let state = self.state.clone();
        let grace = Duration::from_secs(state.config.server.shutdown_grace_secs);
        let shutdown_state = state.clone();
        // Without TCP_NODELAY each small SSE frame waits for the client's delayed ACK (~40 ms).
        let listener = listener.tap_io(|tcp| {
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::debug!(error = %e, "cannot set TCP_NODELAY");
            }
        });
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                signal.await;
                tracing::info!("shutting down");
                shutdown_state.begin_shutdown();
                let done = shutdown_state.dispatcher.interrupt_all();
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
            })
            .await?;
        let hub = state.dispatcher.hub().clone();
        hub.release_all();
        if tokio::time::timeout(grace, hub.flush()).await.is_err() {
            tracing::warn!("the event log did not flush within the shutdown grace period");
        }
        drop(state);
        drop(hub);
        self.store.close().await;
        Ok(())
    }
}
