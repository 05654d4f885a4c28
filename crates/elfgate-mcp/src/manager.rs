//! The manager: the daemon's MCP servers and the connections of every configuration in use,
//! shared by the sessions whose configuration of a server is identical.

use crate::connection::{Connection, ServerState};
use crate::tool::McpTool;
use crate::unavailable::Unavailable;
use elfgate_core::sync::{lock, read, write};
use elfgate_core::{
    EventEmitter, McpSection, McpServerConfig, McpSessionConfig, McpTransport, SessionId,
};
use elfgate_tools::Tool;
use elfgate_tools::process::{ChildSetup, kill_noted_groups};
use serde::Serialize;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio_util::task::TaskTracker;

/// The tools a session gets for one iteration.
pub struct SessionTools {
    /// `mcp__<server>__<tool>` tools of the servers that answered.
    pub tools: Vec<Arc<dyn Tool>>,
    /// Servers the session runs without this time, and why.
    pub unavailable: Vec<(String, Unavailable)>,
}

/// A server as GET /v1/mcp/servers shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerStatus {
    /// Its name (the `<server>` of its tools' names).
    pub name: String,
    /// `global`: from the configuration; `session`: from a session's mcpConfig, or a
    /// configuration a reload replaced that a session still uses.
    pub scope: &'static str,
    /// stdio or streamableHttp.
    #[schema(value_type = Option<McpTransport>)]
    pub transport: Option<McpTransport>,
    /// idle, starting, connected, failed or disabled.
    pub status: ServerState,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Tools it lists (its last listing).
    pub tool_count: usize,
    /// Sessions with a run going on that use it.
    pub sessions: Vec<SessionId>,
    /// A stdio server's process (group) id while it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
}

/// What a reload changed, by server name.
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReloadReport {
    /// New servers.
    pub added: Vec<String>,
    /// Servers no longer configured.
    pub removed: Vec<String>,
    /// Servers whose keys changed: their new configuration starts at its first use.
    pub changed: Vec<String>,
    /// Servers left alone.
    pub unchanged: Vec<String>,
}

struct Entry {
    conn: Arc<Connection>,
    users: BTreeSet<SessionId>,
}

struct Inner {
    section: RwLock<McpSection>,
    entries: Mutex<HashMap<String, Entry>>,
    /// Connection keys each session uses.
    sessions: Mutex<HashMap<SessionId, BTreeSet<String>>>,
    child: ChildSetup,
    http: reqwest::Client,
    tasks: TaskTracker,
    notes: Option<Arc<Path>>,
}

/// The daemon's MCP connections. Cloning is cheap.
#[derive(Clone)]
pub struct McpManager {
    inner: Arc<Inner>,
}

impl McpManager {
    /// A manager for the `[mcp]` section; stdio servers start from `child` (the clean child
    /// environment, plus their own `env`, in the daemon's sandbox: writable only in their `cwd`
    /// when one is configured, and the daemon's network). Each running stdio server's process group is noted in
    /// `notes` (a directory of the daemon's data directory) until it is stopped; the groups a
    /// killed daemon left noted there are killed now.
    pub fn new(section: McpSection, child: ChildSetup, notes: Option<PathBuf>) -> McpManager {
        if let Some(dir) = &notes {
            for pgid in kill_noted_groups(dir) {
                tracing::info!(pgid, "stopped an MCP server a previous daemon left running");
            }
        }
        McpManager {
            inner: Arc::new(Inner {
                section: RwLock::new(section),
                entries: Mutex::new(HashMap::new()),
                sessions: Mutex::new(HashMap::new()),
                child,
                http: reqwest::Client::new(),
                tasks: TaskTracker::new(),
                notes: notes.map(Arc::from),
            }),
        }
    }

    fn section(&self) -> McpSection {
        read(&self.inner.section).clone()
    }

    /// The tools of the servers `session` uses now (the daemon's, merged with its mcpConfig),
    /// starting the servers not running; the session holds them until [`Self::release`] or
    /// until a later call no longer lists them. `events` gets the calls' notifications.
    pub async fn session_tools(
        &self,
        session: SessionId,
        cfg: Option<&McpSessionConfig>,
        events: Option<EventEmitter>,
    ) -> SessionTools {
        let servers = McpSessionConfig::merged(cfg, &self.section().servers);
        let mut conns = Vec::new();
        let mut keys = BTreeSet::new();
        {
            let mut entries = lock(&self.inner.entries);
            for (name, server) in servers.iter().filter(|(_, s)| s.enabled) {
                let key = server.connection_key(name);
                let entry = entries.entry(key.clone()).or_insert_with(|| Entry {
                    conn: Arc::new(Connection::new(
                        name,
                        server.clone(),
                        self.inner.child.clone(),
                        self.inner.http.clone(),
                        self.inner.tasks.clone(),
                        self.inner.notes.clone(),
                    )),
                    users: BTreeSet::new(),
                });
                entry.users.insert(session);
                // Call settings (timeout, tiers) are the session's, over a shared connection.
                conns.push((entry.conn.clone(), server.clone()));
                keys.insert(key);
            }
        }
        let dropped: Vec<String> = {
            let mut sessions = lock(&self.inner.sessions);
            let old = sessions.insert(session, keys.clone()).unwrap_or_default();
            old.difference(&keys).cloned().collect()
        };
        self.let_go(session, dropped);
        let lists = futures_util::future::join_all(conns.iter().map(|(c, _)| c.tools())).await;
        let mut out = SessionTools {
            tools: Vec::new(),
            unavailable: Vec::new(),
        };
        for ((conn, server), list) in conns.into_iter().zip(lists) {
            match list {
                Ok(tools) => {
                    for t in tools {
                        out.tools.push(Arc::new(McpTool::new(
                            conn.clone(),
                            &server,
                            t,
                            events.clone(),
                        )));
                    }
                }
                Err(e) => out.unavailable.push((conn.name.clone(), e)),
            }
        }
        out
    }

    /// The session's run ended: the servers only it used are stopped after the idle time.
    pub fn release(&self, session: SessionId) {
        let keys = lock(&self.inner.sessions).remove(&session);
        if let Some(keys) = keys {
            self.let_go(session, keys.into_iter().collect());
        }
    }

    /// `session` no longer uses `keys`; a connection nobody uses is stopped after the idle time.
    fn let_go(&self, session: SessionId, keys: Vec<String>) {
        let idle = self.section().idle_shutdown_secs;
        for key in keys {
            let unused = {
                let mut entries = lock(&self.inner.entries);
                entries.get_mut(&key).is_some_and(|e| {
                    e.users.remove(&session);
                    e.users.is_empty()
                })
            };
            if unused {
                let this = self.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(elfgate_tools::clamped_secs(idle, 0.0, 86_400.0)).await;
                    this.stop_if_unused(&key).await;
                });
            }
        }
    }

    async fn stop_if_unused(&self, key: &str) {
        let conn = {
            let mut entries = lock(&self.inner.entries);
            let Some(e) = entries.get(key) else { return };
            if !e.users.is_empty() {
                return;
            }
            let conn = e.conn.clone();
            // A configuration no longer in the daemon's set is forgotten.
            let configured = self
                .section()
                .servers
                .iter()
                .any(|(n, s)| s.connection_key(n) == key);
            if !configured {
                entries.remove(key);
            }
            conn
        };
        conn.idle().await;
    }

    /// Replaces the daemon's servers. Connections of servers that changed or went away are
    /// stopped once no session uses them; a session sees the new set at its next iteration.
    pub async fn reload(&self, section: McpSection) -> ReloadReport {
        let old = {
            let mut s = write(&self.inner.section);
            std::mem::replace(&mut *s, section.clone())
        };
        let mut report = ReloadReport::default();
        for (name, s) in &section.servers {
            match old.servers.get(name) {
                None => report.added.push(name.clone()),
                Some(o) if o == s => report.unchanged.push(name.clone()),
                Some(_) => report.changed.push(name.clone()),
            }
        }
        report.removed = old
            .servers
            .keys()
            .filter(|n| !section.servers.contains_key(*n))
            .cloned()
            .collect();
        let unused: Vec<String> = lock(&self.inner.entries)
            .iter()
            .filter(|(_, e)| e.users.is_empty())
            .map(|(k, _)| k.clone())
            .collect();
        for key in unused {
            let still = section
                .servers
                .iter()
                .any(|(n, s)| s.enabled && s.connection_key(n) == key);
            if !still {
                self.stop_if_unused(&key).await;
            }
        }
        report
    }

    /// Every configured server and every connection in use, with its status.
    pub fn statuses(&self) -> Vec<ServerStatus> {
        let section = self.section();
        let entries = lock(&self.inner.entries);
        let mut seen = BTreeSet::new();
        let status = |name: &str, cfg: &McpServerConfig, scope, e: Option<&Entry>| {
            let shown = e.map(|e| e.conn.shown());
            ServerStatus {
                name: name.to_string(),
                scope,
                transport: cfg.transport(),
                status: if !cfg.enabled {
                    ServerState::Disabled
                } else {
                    shown.as_ref().map_or(ServerState::Idle, |s| s.state)
                },
                reason: shown.as_ref().and_then(|s| s.reason.clone()),
                tool_count: shown.as_ref().map_or(0, |s| s.tool_count),
                sessions: e
                    .map(|e| e.users.iter().copied().collect())
                    .unwrap_or_default(),
                pid: shown.and_then(|s| s.pid),
            }
        };
        let mut out: Vec<ServerStatus> = section
            .servers
            .iter()
            .map(|(name, cfg)| {
                let key = cfg.connection_key(name);
                seen.insert(key.clone());
                status(name, cfg, "global", entries.get(&key))
            })
            .collect();
        let mut others: Vec<ServerStatus> = entries
            .iter()
            .filter(|(k, _)| !seen.contains(*k))
            .map(|(_, e)| status(&e.conn.name, &e.conn.cfg, "session", Some(e)))
            .collect();
        others.sort_by(|a, b| a.name.cmp(&b.name));
        out.extend(others);
        out
    }

    /// Stops every server and waits until their processes are gone (daemon shutdown).
    pub async fn shutdown(&self, grace: Duration) {
        let conns: Vec<Arc<Connection>> = lock(&self.inner.entries)
            .drain()
            .map(|(_, e)| e.conn)
            .collect();
        for c in &conns {
            c.shutdown().await;
        }
        self.inner.tasks.close();
        if tokio::time::timeout(grace, self.inner.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!("some MCP servers did not stop within the shutdown grace period");
        }
    }
}
