//! The built daemon's router and its serving, until a shutdown signal and through the shutdown
//! (a fleet node's drain among it).

use super::Daemon;
use crate::auth::require_token;
use crate::error::{ApiError, method_not_allowed};
use crate::extract::BodyLimit;
use crate::openapi;
use crate::request_guard::guard_requests;
use crate::routes;
use crate::state::AppState;
use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::middleware::{self, Next};
use axum::response::IntoResponse;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

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

impl Daemon {
    /// The router with every route and layer.
    pub fn router(&self) -> Router {
        let state = self.state.clone();
        let limit = state.config.server.body_limit_bytes;
        let mut protected = Router::new()
            .merge(routes::sessions::routes())
            .merge(routes::engines::routes())
            .merge(routes::cluster::routes())
            .merge(routes::skills::routes())
            .merge(routes::tool_runs::routes())
            .merge(routes::workflows::routes())
            .merge(routes::webhooks::routes())
            .merge(routes::mcp::routes())
            .merge(routes::keys::routes())
            .merge(routes::budgets::routes())
            .merge(routes::access_audit::routes())
            .merge(routes::spend::routes())
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
            // Inside auth (it needs the principal), outside the forward: a request is counted by
            // the node its client called, once.
            .layer(middleware::from_fn_with_state(
                state.clone(),
                crate::rate_limits::limit_requests,
            ));
        // Traced runs only: a request's server span, inside auth (it names the principal).
        if elfgate_core::telemetry::enabled() {
            protected = protected.layer(middleware::from_fn(
                crate::telemetry::requests::trace_requests,
            ));
        }
        let protected =
            protected.layer(middleware::from_fn_with_state(state.clone(), require_token));
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
            tokio::spawn(crate::fleet::keys::forget_changed_keys(
                fleet.clone(),
                self.state.keys.clone(),
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
