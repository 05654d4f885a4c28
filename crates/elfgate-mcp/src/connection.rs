//! One connection to one server configuration: started on first use, restarted after a crash or a
//! timed-out call (with backoff after failed starts), stopped when no session needs it.

use crate::notify::{Listening, Notifier};
use crate::result::ServerTool;
use crate::stdio::StdioProcess;
use crate::unavailable::{Down, Unavailable};
use elfgate_core::sync::lock;
use elfgate_core::{McpServerConfig, McpTransport};
use elfgate_tools::process::ChildSetup;
use rmcp::model::ProgressToken;
use rmcp::service::{Peer, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::task::TaskTracker;

/// Longest wait between two attempts to start a server that keeps failing.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// How long the SDK's side of a connection gets to wind down when it is stopped.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// Where a server stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ServerState {
    /// Configured; not started yet, or stopped because no session needs it.
    Idle,
    /// Starting: spawning, initialize, tools/list.
    Starting,
    /// Up, its tools listed.
    Connected,
    /// The last start failed or the server stopped; see the reason. Retried on the next use,
    /// with backoff.
    Failed,
    /// `enabled = false`.
    Disabled,
}

/// A connection's state as shown to clients.
#[derive(Debug, Clone)]
pub(crate) struct Shown {
    pub state: ServerState,
    pub reason: Option<String>,
    pub tool_count: usize,
    pub pid: Option<i32>,
}

/// A live connection.
struct Live {
    service: RunningService<RoleClient, Notifier>,
    process: Option<StdioProcess>,
    generation: u64,
}

struct State {
    live: Option<Live>,
    generation: u64,
    /// Failed starts in a row.
    failures: u32,
    retry_at: Option<Instant>,
    tools: Vec<ServerTool>,
    last_error: Option<Down>,
    closed: bool,
}

/// A connection ready for a call.
pub(crate) struct Ready {
    pub peer: Peer<RoleClient>,
    pub generation: u64,
}

/// One server configuration's connection.
pub(crate) struct Connection {
    pub name: String,
    pub cfg: McpServerConfig,
    child: ChildSetup,
    http: reqwest::Client,
    notifier: Notifier,
    tasks: TaskTracker,
    /// Where running stdio servers are noted (see [`crate::McpManager::new`]).
    notes: Option<Arc<Path>>,
    state: tokio::sync::Mutex<State>,
    shown: Mutex<Shown>,
}

fn backoff(failures: u32) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    let secs = 1u64 << failures.saturating_sub(1).min(16);
    Duration::from_secs(secs).min(MAX_BACKOFF)
}

impl Connection {
    pub(crate) fn new(
        name: &str,
        cfg: McpServerConfig,
        child: ChildSetup,
        http: reqwest::Client,
        tasks: TaskTracker,
        notes: Option<Arc<Path>>,
    ) -> Connection {
        Connection {
            name: name.to_string(),
            notifier: Notifier::new(name),
            cfg,
            child,
            http,
            tasks,
            notes,
            state: tokio::sync::Mutex::new(State {
                live: None,
                generation: 0,
                failures: 0,
                retry_at: None,
                tools: Vec::new(),
                last_error: None,
                closed: false,
            }),
            shown: Mutex::new(Shown {
                state: ServerState::Idle,
                reason: None,
                tool_count: 0,
                pid: None,
            }),
        }
    }

    /// Hears the notifications of the call with this progress token until dropped.
    pub(crate) fn listen(&self, token: &ProgressToken) -> Listening {
        self.notifier.listen(token)
    }

    pub(crate) fn shown(&self) -> Shown {
        lock(&self.shown).clone()
    }

    fn show(&self, state: ServerState, reason: Option<String>, tools: usize, pid: Option<i32>) {
        *lock(&self.shown) = Shown {
            state,
            reason,
            tool_count: tools,
            pid,
        };
    }

    fn startup_timeout(&self) -> Duration {
        elfgate_tools::clamped_secs(
            self.cfg
                .startup_timeout_secs
                .unwrap_or(elfgate_core::mcp_config::DEFAULT_STARTUP_TIMEOUT_SECS),
            0.1,
            3600.0,
        )
    }

    /// The server's tools, starting it if needed. Err: why it is not available.
    pub(crate) async fn tools(&self) -> Result<Vec<ServerTool>, Unavailable> {
        self.ensure().await
    }

    /// A live connection for one call, started if needed.
    pub(crate) async fn ready(&self) -> Result<Ready, Unavailable> {
        self.ensure().await?;
        let st = self.state.lock().await;
        match &st.live {
            Some(live) => Ok(Ready {
                peer: live.service.peer().clone(),
                generation: live.generation,
            }),
            None => Err(st.last_error.clone().unwrap_or(Down::NotRunning).into()),
        }
    }

    async fn ensure(&self) -> Result<Vec<ServerTool>, Unavailable> {
        let mut st = self.state.lock().await;
        if st.closed {
            return Err(Unavailable::ShutDown);
        }
        if let Some(live) = &st.live {
            if !live.service.is_closed() && !live.service.peer().is_transport_closed() {
                return Ok(st.tools.clone());
            }
            // It stopped between calls: restarted now, with no wait.
            let why = self.stopped_reason(live);
            self.teardown(&mut st, why);
            st.retry_at = None;
        }
        if let Some(at) = st.retry_at
            && at > Instant::now()
        {
            let wait = at.saturating_duration_since(Instant::now());
            return Err(Unavailable::BackingOff {
                why: st.last_error.clone().unwrap_or(Down::NotRunning),
                secs: wait.as_secs_f64().ceil(),
            });
        }
        self.show(ServerState::Starting, None, st.tools.len(), None);
        let mut starting = Starting {
            conn: self,
            done: false,
        };
        let outcome = self.connect().await;
        starting.done = true;
        match outcome {
            Ok((live, tools)) => {
                st.failures = 0;
                st.retry_at = None;
                st.last_error = None;
                st.generation += 1;
                let pid = live.process.as_ref().map(StdioProcess::pid);
                st.live = Some(Live {
                    generation: st.generation,
                    ..live
                });
                st.tools = tools;
                self.show(ServerState::Connected, None, st.tools.len(), pid);
                Ok(st.tools.clone())
            }
            Err(e) => {
                st.failures += 1;
                st.retry_at = Some(Instant::now() + backoff(st.failures));
                st.last_error = Some(e.clone());
                self.show(ServerState::Failed, Some(e.to_string()), 0, None);
                Err(e.into())
            }
        }
    }

    fn stopped_reason(&self, live: &Live) -> Down {
        Down::Stopped.with_stderr(live.process.as_ref().map(StdioProcess::stderr_tail))
    }

    /// Starts the server and lists its tools, within the startup timeout; a process started for
    /// a failed attempt is stopped.
    async fn connect(&self) -> Result<(Live, Vec<ServerTool>), Down> {
        let timeout = self.startup_timeout();
        let mut process = None;
        let attempt = async {
            let service = match self.cfg.transport() {
                Some(McpTransport::Stdio) => {
                    let (p, stdout, stdin) =
                        StdioProcess::spawn(&self.cfg, &self.child, self.notes.as_deref())?;
                    process = Some(p);
                    rmcp::serve_client(self.notifier.clone(), (stdout, stdin))
                        .await
                        .map_err(|e| Down::Initialize(e.to_string()))?
                }
                Some(McpTransport::StreamableHttp) => {
                    let transport = StreamableHttpClientTransport::with_client(
                        self.http.clone(),
                        self.http_config()?,
                    );
                    rmcp::serve_client(self.notifier.clone(), transport)
                        .await
                        .map_err(|e| Down::Initialize(e.to_string()))?
                }
                None => return Err(Down::NoTransport),
            };
            let tools = match service.peer().list_all_tools().await {
                Ok(t) => t,
                Err(e) => {
                    let _ = tokio::time::timeout(CLOSE_WAIT, service.cancel()).await;
                    return Err(Down::ListTools(e.to_string()));
                }
            };
            let tools = tools
                .iter()
                .filter_map(|t| serde_json::to_value(t).ok())
                .filter_map(|v| ServerTool::from_json(&v))
                .collect();
            Ok((service, tools))
        };
        let outcome = match tokio::time::timeout(timeout, attempt).await {
            Ok(r) => r,
            Err(_) => Err(Down::StartupTimeout(timeout.as_secs_f64())),
        };
        match outcome {
            Ok((service, tools)) => Ok((
                Live {
                    service,
                    process,
                    generation: 0,
                },
                tools,
            )),
            Err(e) => {
                let e = e.with_stderr(process.as_ref().map(StdioProcess::stderr_tail));
                if let Some(p) = process {
                    self.tasks.spawn(p.stop());
                }
                Err(e)
            }
        }
    }

    fn http_config(&self) -> Result<StreamableHttpClientTransportConfig, Down> {
        let url = self.cfg.url.clone().unwrap_or_default();
        let mut headers = HashMap::new();
        for (k, v) in &self.cfg.headers {
            let name = reqwest::header::HeaderName::from_bytes(k.as_bytes()).map_err(|e| {
                Down::HeaderName {
                    name: k.clone(),
                    why: e.to_string(),
                }
            })?;
            let value =
                reqwest::header::HeaderValue::from_str(v).map_err(|e| Down::HeaderValue {
                    name: k.clone(),
                    why: e.to_string(),
                })?;
            headers.insert(name, value);
        }
        Ok(StreamableHttpClientTransportConfig::with_uri(url).custom_headers(headers))
    }

    /// Stops the live connection, in the background (tracked: the daemon waits for it at exit).
    fn teardown(&self, st: &mut State, reason: Down) {
        if let Some(live) = st.live.take() {
            let tasks = self.tasks.clone();
            tasks.spawn(stop(live));
        }
        self.show(
            ServerState::Failed,
            Some(reason.to_string()),
            st.tools.len(),
            None,
        );
        st.last_error = Some(reason);
    }

    /// A call on `generation` found the server dead or hung: it is stopped and restarted on the
    /// next use, with no wait. A later generation is left alone.
    pub(crate) async fn broken(&self, generation: u64, reason: Down) {
        let mut st = self.state.lock().await;
        if st.live.as_ref().is_some_and(|l| l.generation == generation) {
            self.teardown(&mut st, reason);
            st.retry_at = None;
        }
    }

    /// Stops it for good (daemon shutdown): the stop runs on the tracker the daemon waits for.
    pub(crate) async fn shutdown(&self) {
        let mut st = self.state.lock().await;
        st.closed = true;
        if let Some(live) = st.live.take() {
            self.tasks.spawn(stop(live));
        }
        self.show(ServerState::Idle, None, st.tools.len(), None);
    }

    /// Stops it until the next use (nobody needs it now).
    pub(crate) async fn idle(&self) {
        let mut st = self.state.lock().await;
        if let Some(live) = st.live.take() {
            self.tasks.spawn(stop(live));
            self.show(ServerState::Idle, None, st.tools.len(), None);
        }
    }
}

/// Shows a start whose caller went away (an interrupt) as idle again; the attempt's process is
/// stopped when the attempt is dropped.
struct Starting<'a> {
    conn: &'a Connection,
    done: bool,
}

impl Drop for Starting<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.conn.show(
                ServerState::Idle,
                Some("its start was abandoned: the run waiting for it was interrupted".into()),
                0,
                None,
            );
        }
    }
}

/// Closes the transport (a stdio server's stdin), then stops its process group.
async fn stop(live: Live) {
    let _ = tokio::time::timeout(CLOSE_WAIT, live.service.cancel()).await;
    if let Some(p) = live.process {
        p.stop().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_starts_back_off_up_to_a_minute() {
        assert_eq!(backoff(0), Duration::ZERO);
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(3), Duration::from_secs(4));
        assert_eq!(backoff(40), MAX_BACKOFF);
    }
}
