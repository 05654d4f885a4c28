//! The accept loop. `axum::serve` cannot bound how long a client may take to send its request
//! header, so a client that sends half a header and then nothing held its connection (and a file
//! descriptor) forever; enough of them and `accept` failed for everyone. Here each connection is
//! served by hyper's HTTP/1 with a header-read timeout, at most `max_connections` are open at
//! once, and a stop ends them gracefully.

use crate::config::ServerConfig;
use crate::fdlimit;
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// How long the loop waits after an `accept` that failed for want of resources (EMFILE,
/// ENFILE, ENOBUFS...): retrying at once would spin on the same error, while descriptors come
/// back only as connections end.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// How connections are accepted and kept.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionSettings {
    /// Time a client has to send a whole request header, the first one and each one after on a
    /// kept-alive connection (so it also closes idle kept-alive connections).
    pub header_read_timeout: Duration,
    /// Connections open at once; past it, new ones wait in the kernel's listen queue.
    pub max_connections: usize,
    /// How long a stop waits for open connections to end.
    pub drain_timeout: Duration,
}

impl ConnectionSettings {
    /// From `[server]`; `max_connections` is lowered to what the open-file limit leaves room for
    /// (see [`crate::fdlimit`]), so that the cap, not `accept` failing, is what turns clients away.
    pub fn from_config(server: &ServerConfig) -> Self {
        ConnectionSettings {
            header_read_timeout: Duration::from_secs(server.header_read_timeout_secs),
            max_connections: connection_cap(server.max_connections),
            drain_timeout: Duration::from_secs(server.shutdown_grace_secs),
        }
    }
}

/// The cap in force: the operator's setting, lowered (with a warning) when it does not fit under
/// the open-file limit; without a setting, the room the limit leaves, quietly.
fn connection_cap(configured: Option<usize>) -> usize {
    // The most permits a semaphore holds; an unlimited open-file limit has room for more.
    let most = Semaphore::MAX_PERMITS;
    let room = match fdlimit::current() {
        Ok(limit) => Some((limit.connection_room().min(most), limit.soft)),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the open-file limit");
            None
        }
    };
    match (configured, room) {
        (Some(n), Some((room, soft))) if room < n => {
            tracing::warn!(
                configured = n,
                open_file_limit = soft,
                using = room,
                "server.max_connections does not fit under the open-file limit; lowered"
            );
            room
        }
        (Some(n), _) => n.min(most),
        (None, Some((room, _))) => room,
        (None, None) => DEFAULT_WITHOUT_LIMIT,
    }
}

/// The cap when neither a setting nor the open-file limit says: a usual soft limit's room.
const DEFAULT_WITHOUT_LIMIT: usize = 768;

/// Serves `app` on `listener` until `stop` completes, then stops accepting, lets open connections
/// finish what they are doing (up to `drain_timeout`) and returns.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    settings: ConnectionSettings,
    stop: impl Future<Output = ()>,
) {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(settings.header_read_timeout);
    let slots = Arc::new(Semaphore::new(settings.max_connections));
    let graceful = GracefulShutdown::new();
    let mut failures = Failures::default();
    let mut stop = std::pin::pin!(stop);
    loop {
        // A slot first: at the cap nothing is accepted, so connections wait in the listen queue
        // (and, once it is full, the kernel drops their SYNs and clients retry) until one ends.
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot,
            () = &mut stop => break,
        };
        let Ok(slot) = slot else {
            break;
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut stop => break,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => {
                failures.recovered();
                tcp
            }
            // The client went away between its SYN and our accept: nothing to wait for.
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                failures.failed(&e);
                tokio::select! {
                    () = tokio::time::sleep(ACCEPT_BACKOFF) => continue,
                    () = &mut stop => break,
                }
            }
        };
        nodelay(&tcp);
        let service = TowerToHyperService::new(app.clone());
        let conn = graceful.watch(http.serve_connection(TokioIo::new(tcp), service));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    // Idle connections close at once, requests in flight finish (SSE streams have ended by now);
    // a header still being received ends with its timeout or with the grace period.
    if tokio::time::timeout(settings.drain_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("some connections were still open at the end of the shutdown grace period");
    }
}

/// Without TCP_NODELAY each small SSE frame waits for the client's delayed ACK (~40 ms).
fn nodelay(tcp: &TcpStream) {
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!(error = %e, "cannot set TCP_NODELAY");
    }
}

fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// A run of failed accepts, logged once when it starts and once when it ends rather than twenty
/// times a second.
#[derive(Default)]
struct Failures(u64);

impl Failures {
    fn failed(&mut self, e: &io::Error) {
        if self.0 == 0 {
            tracing::warn!(error = %e, "cannot accept connections; retrying");
        }
        self.0 += 1;
    }

    fn recovered(&mut self) {
        if self.0 > 0 {
            tracing::info!(failed_accepts = self.0, "accepting connections again");
            self.0 = 0;
        }
    }
}
