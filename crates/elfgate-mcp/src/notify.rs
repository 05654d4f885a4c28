//! The client side's handler of a connection: routes a server's progress and log notifications
//! to the tool calls in flight, which report them as `processing` events.

// The protocol's newest revision deprecates log notifications, but servers speaking the earlier
// ones (which the SDK still negotiates) send them, and they are worth showing.
#![allow(
    deprecated,
    reason = "log notifications are deprecated by the newest revision only"
)]

use elfgate_core::sync::lock;
use rmcp::ClientHandler;
use rmcp::model::{
    LoggingMessageNotificationParam, NumberOrString, ProgressNotificationParam, ProgressToken,
};
use rmcp::service::{NotificationContext, RoleClient};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// Calls in flight on one connection, by progress token.
#[derive(Clone, Default)]
pub(crate) struct Notifier {
    server: Arc<str>,
    calls: Arc<Mutex<HashMap<String, mpsc::UnboundedSender<String>>>>,
}

/// A call's registration; unregisters when dropped.
pub(crate) struct Listening {
    notifier: Notifier,
    key: String,
    /// What the server said during the call, as lines for `processing` events.
    pub rx: mpsc::UnboundedReceiver<String>,
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.notifier.lock().remove(&self.key);
    }
}

impl Notifier {
    pub(crate) fn new(server: &str) -> Self {
        Notifier {
            server: server.into(),
            ..Default::default()
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, mpsc::UnboundedSender<String>>> {
        lock(&self.calls)
    }

    /// Registers a call by the progress token the SDK gave its request.
    pub(crate) fn listen(&self, token: &ProgressToken) -> Listening {
        let key = token_text(token);
        let (tx, rx) = mpsc::unbounded_channel();
        self.lock().insert(key.clone(), tx);
        Listening {
            notifier: self.clone(),
            key,
            rx,
        }
    }

    fn send_to(&self, token: &str, line: String) {
        if let Some(tx) = self.lock().get(token) {
            let _ = tx.send(line);
        }
    }

    /// Log messages belong to no request: every call in flight hears them.
    fn broadcast(&self, line: String) {
        for tx in self.lock().values() {
            let _ = tx.send(line.clone());
        }
    }
}

fn token_text(t: &ProgressToken) -> String {
    match &t.0 {
        NumberOrString::String(s) => s.to_string(),
        NumberOrString::Number(n) => n.to_string(),
    }
}

impl ClientHandler for Notifier {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let mut line = format!("mcp {}: progress {}", self.server, params.progress);
        if let Some(total) = params.total {
            line.push_str(&format!("/{total}"));
        }
        if let Some(m) = params.message.filter(|m| !m.is_empty()) {
            line.push_str(&format!(" ({m})"));
        }
        self.send_to(&token_text(&params.progress_token), line);
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let data = match &params.data {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let level = serde_json::to_value(params.level)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        self.broadcast(format!("mcp {} log [{level}]: {data}", self.server));
    }
}
