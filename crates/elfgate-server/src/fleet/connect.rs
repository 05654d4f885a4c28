//! Connecting a node to the fleet's NATS server: who the node is to the server (a user and
//! password, a token, an NKey or a `.creds` file, the secrets read from the environment or from
//! files) and TLS (`tls://` URLs, a CA, a client certificate).
//!
//! A server that refuses the node, or a TLS handshake that fails, never stops or crashes it: the
//! reason is logged, the node keeps trying, and until it is on the bus it says so (`/readyz` 503,
//! `busConnected` false).

use super::FleetStartError;
use super::forward::FORWARD_TIMEOUT;
use crate::config::ClusterConfig;
use elfgate_core::sync::lock;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long the first attempt may take before the node starts without the bus (and keeps
/// trying in the background).
const FIRST_ATTEMPT: Duration = Duration::from_secs(3);

/// Connects to the fleet's NATS server. The first attempt's failure (an unreachable server, a
/// refused login, a certificate that does not verify) is logged with its reason; the client then
/// keeps trying in the background, so a node starts while NATS is away and joins when it is back.
pub(super) async fn connect(
    node_id: &str,
    cluster: &ClusterConfig,
) -> Result<async_nats::Client, FleetStartError> {
    install_crypto_provider();
    let options = options(node_id, cluster).await?;
    let url = cluster.nats_url.as_str();
    let first = tokio::time::timeout(
        FIRST_ATTEMPT,
        options
            .clone()
            .connection_timeout(FIRST_ATTEMPT)
            .connect(url),
    )
    .await;
    match first {
        Ok(Ok(client)) => return Ok(client),
        Ok(Err(e)) => tracing::error!(
            nats_url = %crate::config::redact_url(url),
            error = %e,
            "cannot connect to NATS; the node runs without the bus (not ready) and keeps trying"
        ),
        Err(_) => tracing::error!(
            nats_url = %crate::config::redact_url(url),
            "NATS did not answer in {} s; the node runs without the bus (not ready) and keeps \
             trying",
            FIRST_ATTEMPT.as_secs()
        ),
    }
    Ok(options.retry_on_initial_connect().connect(url).await?)
}

/// rustls needs one process-wide cryptography provider, and the build has two (ring, which the
/// NATS client uses, and aws-lc-rs, the HTTP client's): with both and none chosen, rustls panics
/// in the NATS client's connection task at the first TLS handshake. Choosing one here, before any
/// handshake, makes that impossible. Another part having chosen first is as good.
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The client's options: reconnection for ever, the node's credentials and TLS files, and a log
/// line for what the server says.
async fn options(
    node_id: &str,
    cluster: &ClusterConfig,
) -> Result<async_nats::ConnectOptions, FleetStartError> {
    let secret = |key: &str, var: &str| {
        crate::config::secret_from_env(key, var).map_err(|e| FleetStartError::Access(e.to_string()))
    };
    let mut options = async_nats::ConnectOptions::new();
    if let (Some(user), Some(var)) = (&cluster.nats_user, &cluster.nats_password_env) {
        options = options.user_and_password(user.clone(), secret("nats_password_env", var)?);
    }
    if let Some(var) = &cluster.nats_token_env {
        options = options.token(secret("nats_token_env", var)?);
    }
    if let Some(file) = &cluster.nats_nkey_file {
        let seed = tokio::fs::read_to_string(file).await.map_err(|e| {
            FleetStartError::Access(format!(
                "cluster.nats_nkey_file: cannot read {}: {e}",
                file.display()
            ))
        })?;
        options = options.nkey(seed.trim().to_string());
    }
    if let Some(file) = &cluster.nats_creds_file {
        options = options.credentials_file(file).await.map_err(|e| {
            FleetStartError::Access(format!(
                "cluster.nats_creds_file: {} is not a credentials file: {e}",
                file.display()
            ))
        })?;
    }
    if let Some(ca) = &cluster.nats_tls_ca {
        options = options.add_root_certificates(ca.clone()).require_tls(true);
    }
    if let (Some(cert), Some(key)) = (&cluster.nats_tls_cert, &cluster.nats_tls_key) {
        options = options
            .add_client_certificate(cert.clone(), key.clone())
            .require_tls(true);
    }
    let last_failure = Arc::new(Mutex::new(None));
    Ok(options
        .name(format!("elfgate-{node_id}"))
        .max_reconnects(None)
        .request_timeout(Some(FORWARD_TIMEOUT))
        .event_callback(move |event| {
            let last_failure = last_failure.clone();
            async move { log_event(event, &last_failure) }
        }))
}

/// A line for what NATS tells the node: a refused login or a failed handshake is an error the
/// operator must see (the node stays off the bus until it is fixed). The client retries every
/// few seconds: a failure is logged when its reason changes, not at every attempt.
fn log_event(event: async_nats::Event, last_failure: &Mutex<Option<String>>) {
    use async_nats::Event;
    let mut last = lock(last_failure);
    match event {
        Event::Connected => {
            *last = None;
            tracing::info!("connected to NATS");
        }
        Event::Disconnected => tracing::warn!(
            "NATS is away: streams of other nodes' sessions are read from the log, control \
             requests for them answer 503, until it is back"
        ),
        Event::ClientError(e) => {
            let reason = e.to_string();
            if last.as_deref() != Some(reason.as_str()) {
                tracing::error!(
                    error = %reason,
                    "cannot connect to NATS (the node is not ready until it can); retrying"
                );
                *last = Some(reason);
            }
        }
        Event::ServerError(e) => tracing::error!(error = %e, "the NATS server refused"),
        Event::SlowConsumer(_) | Event::LameDuckMode | Event::Draining | Event::Closed => {
            tracing::warn!(event = %event, "NATS");
        }
    }
}
