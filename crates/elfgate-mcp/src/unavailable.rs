//! Why an MCP server cannot serve a session or a call: its last start failed, it stopped, or a
//! call found it broken. Told to the model and to GET /v1/mcp/servers as text, kept typed here.

/// Why a server cannot serve a session or a call now.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Unavailable {
    /// The daemon is shutting down.
    #[error("the server was shut down")]
    ShutDown,
    /// It is down and its next start is not due yet.
    #[error("{why} (next attempt in {secs:.0}s)")]
    BackingOff {
        /// Why it is down.
        why: Down,
        /// Seconds until the next attempt, rounded up.
        secs: f64,
    },
    /// It is down.
    #[error(transparent)]
    Down(#[from] Down),
}

/// Why a server is down: its last start failed, or it stopped.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Down {
    /// A stdio server without `cwd` and the daemon's own directory is gone.
    #[error("no working directory: {0}")]
    NoWorkingDirectory(String),
    /// Its process could not be started.
    #[error("{0}")]
    Spawn(String),
    /// Its pipes were not there.
    #[error("the server's pipes could not be opened")]
    NoPipes,
    /// Neither command nor url.
    #[error("set either command or url")]
    NoTransport,
    /// A configured header name is not one.
    #[error("header name '{name}': {why}")]
    HeaderName {
        /// The name.
        name: String,
        /// What is wrong with it.
        why: String,
    },
    /// A configured header value is not one.
    #[error("header '{name}' value: {why}")]
    HeaderValue {
        /// The header's name.
        name: String,
        /// What is wrong with the value.
        why: String,
    },
    /// The MCP handshake failed.
    #[error("initialize failed: {0}")]
    Initialize(String),
    /// tools/list failed.
    #[error("tools/list failed: {0}")]
    ListTools(String),
    /// No answer to initialize and tools/list in time.
    #[error("startup timeout: no answer to initialize and tools/list within {0:.1}s")]
    StartupTimeout(f64),
    /// It stopped by itself.
    #[error("the server stopped")]
    Stopped,
    /// A call found the connection failing.
    #[error("the connection failed during the call ({0})")]
    CallFailed(String),
    /// A call got no answer in time.
    #[error("no answer within the call timeout ({0:.1}s)")]
    CallTimeout(f64),
    /// Not running, for no known reason.
    #[error("the server is not running")]
    NotRunning,
    /// One of the above, with the end of what the server wrote on stderr.
    #[error("{why} (stderr: {stderr})")]
    WithStderr {
        /// What went wrong.
        why: Box<Down>,
        /// The end of its stderr.
        stderr: String,
    },
}

impl Down {
    /// `self`, with `stderr` when the server wrote something.
    pub(crate) fn with_stderr(self, stderr: Option<String>) -> Down {
        match stderr {
            Some(tail) if !tail.is_empty() => Down::WithStderr {
                why: Box::new(self),
                stderr: tail,
            },
            _ => self,
        }
    }
}
