//! An MCP server's tool as one of the session's tools: `mcp__<server>__<tool>`, the server's
//! schema, its tier, and a call that reports the server's progress and log notifications as
//! `processing` events, stops at the call timeout and on interrupt (the SDK tells the server with
//! notifications/cancelled when the request is dropped).

use crate::connection::Connection;
use crate::result::{ServerTool, result_text};
use crate::unavailable::Down;
use async_trait::async_trait;
use elfgate_core::{EventEmitter, EventPayload, McpServerConfig};
use elfgate_tools::{
    FirewallTargets, PermissionTier, Tool, ToolContext, ToolError, ToolKind, ToolOutput,
};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientRequest, RequestId,
    ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient, ServiceError};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// How long telling a server about a cancelled call may take.
const CANCEL_WAIT: Duration = Duration::from_secs(2);

/// Argument names whose values are paths the firewall checks, when the schema declares them.
const PATH_ARGS: &[&str] = &["path", "paths", "file_path", "filePath"];

/// The name the model sees: `mcp__<server>__<tool>`, with characters providers refuse in a tool
/// name replaced by `_`, at most 64 characters.
pub fn tool_name(server: &str, tool: &str) -> String {
    let raw = format!("mcp__{server}__{tool}");
    raw.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect()
}

/// Tells the server with notifications/cancelled about a call nobody waits for any more (an
/// interrupt, the call timeout), unless disarmed by its answer.
struct Abandon {
    peer: Peer<RoleClient>,
    id: Option<RequestId>,
}

impl Abandon {
    /// Sends it now (briefly: the server may be hung) instead of when dropped.
    async fn send(&mut self, reason: &str) {
        let Some(id) = self.id.take() else { return };
        let note = self.peer.notify_cancelled(CancelledNotificationParam::new(
            Some(id),
            Some(reason.to_string()),
        ));
        let _ = tokio::time::timeout(CANCEL_WAIT, note).await;
    }
}

impl Drop for Abandon {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        let peer = self.peer.clone();
        tokio::spawn(
            async move {
                let _ = peer
                    .notify_cancelled(CancelledNotificationParam::new(
                        Some(id),
                        Some("the call was interrupted or timed out".into()),
                    ))
                    .await;
            }
            .in_current_span(),
        );
    }
}

/// One tool of one server, bound to the run that offers it.
pub struct McpTool {
    name: String,
    tool: ServerTool,
    tier: PermissionTier,
    timeout: Duration,
    conn: Arc<Connection>,
    events: Option<EventEmitter>,
}

impl McpTool {
    pub(crate) fn new(
        conn: Arc<Connection>,
        server: &McpServerConfig,
        tool: ServerTool,
        events: Option<EventEmitter>,
    ) -> McpTool {
        let tier = server
            .tool_tiers
            .get(&tool.name)
            .and_then(|t| t.parse().ok())
            .unwrap_or(if tool.read_only_hint {
                PermissionTier::ReadOnly
            } else {
                PermissionTier::AlwaysConfirm
            });
        let timeout = elfgate_tools::clamped_secs(
            server
                .call_timeout_secs
                .unwrap_or(elfgate_core::mcp_config::DEFAULT_CALL_TIMEOUT_SECS),
            0.001,
            86_400.0,
        );
        McpTool {
            name: tool_name(&conn.name, &tool.name),
            tool,
            tier,
            timeout,
            conn,
            events,
        }
    }

    async fn note(&self, message: String) {
        if let Some(e) = &self.events {
            e.emit(EventPayload::Processing { message }).await;
        }
    }

    fn declares(&self, arg: &str) -> bool {
        self.tool
            .input_schema
            .get("properties")
            .and_then(|p| p.get(arg))
            .is_some()
    }
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.tool.description
    }

    fn schema(&self) -> Value {
        self.tool.input_schema.clone()
    }

    fn tier(&self) -> PermissionTier {
        self.tier
    }

    fn kind(&self) -> ToolKind {
        if self.tier == PermissionTier::ReadOnly {
            ToolKind::Read
        } else {
            ToolKind::Execute
        }
    }

    fn firewall_targets(&self, input: &Value) -> FirewallTargets {
        let mut paths = Vec::new();
        for arg in PATH_ARGS.iter().filter(|a| self.declares(a)) {
            match input.get(*arg) {
                Some(Value::String(s)) => paths.push(s.clone()),
                Some(Value::Array(a)) => {
                    paths.extend(a.iter().filter_map(|v| v.as_str().map(str::to_string)));
                }
                _ => {}
            }
        }
        FirewallTargets {
            paths,
            command: None,
        }
    }

    async fn execute(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let server = &self.conn.name;
        // Starting the server may take up to its startup timeout: an interrupt does not wait.
        let ready = tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => return Err(ToolError::Interrupted),
            r = self.conn.ready() => r,
        };
        let ready = match ready {
            Ok(r) => r,
            Err(e) => {
                self.note(format!("mcp {server}: unavailable: {e}")).await;
                return Ok(ToolOutput::error(format!(
                    "Error: MCP server '{server}' is unavailable: {e}"
                )));
            }
        };
        let mut params = CallToolRequestParams::new(self.tool.name.clone());
        params.arguments = match input {
            Value::Object(m) => Some(m),
            _ => None,
        };
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let sent = ready
            .peer
            .send_request_with_option(request, PeerRequestOptions::no_options())
            .await;
        let outcome = match sent {
            Err(e) => Some(Err(e)),
            Ok(handle) => {
                // The SDK gives the request its own progress token.
                let mut listening = self.conn.listen(&handle.progress_token);
                let mut abandon = Abandon {
                    peer: ready.peer.clone(),
                    id: Some(handle.id.clone()),
                };
                let call = handle.await_response();
                tokio::pin!(call);
                let deadline = tokio::time::sleep(self.timeout);
                tokio::pin!(deadline);
                let outcome = loop {
                    tokio::select! {
                        biased;
                        _ = ctx.cancel.cancelled() => return Err(ToolError::Interrupted),
                        r = &mut call => break Some(r),
                        Some(line) = listening.rx.recv() => self.note(line).await,
                        _ = &mut deadline => break None,
                    }
                };
                match outcome {
                    Some(_) => abandon.id = None,
                    // Told before the server is stopped as hung (below), not after.
                    None => abandon.send("the call timed out").await,
                }
                // Notifications that came with the answer.
                while let Ok(line) = listening.rx.try_recv() {
                    self.note(line).await;
                }
                outcome
            }
        };
        match outcome {
            Some(Ok(result)) => {
                let v = match result {
                    ServerResult::CallToolResult(r) => serde_json::to_value(&r),
                    other => serde_json::to_value(&other),
                }
                .unwrap_or(Value::Null);
                let (text, is_error) = result_text(&v);
                Ok(if is_error {
                    ToolOutput::error(text)
                } else {
                    ToolOutput::ok(text)
                })
            }
            Some(Err(ServiceError::McpError(e))) => Ok(ToolOutput::error(format!(
                "Error: MCP server '{server}' refused the call: {}",
                e.message
            ))),
            Some(Err(e)) => {
                let why = Down::CallFailed(e.to_string());
                self.conn.broken(ready.generation, why.clone()).await;
                self.note(format!(
                    "mcp {server}: {why}; it is restarted on the next call"
                ))
                .await;
                Ok(ToolOutput::error(format!(
                    "Error: MCP server '{server}' failed during the call: {e}. It is restarted \
                     on the next call."
                )))
            }
            None => {
                let why = Down::CallTimeout(self.timeout.as_secs_f64());
                self.conn.broken(ready.generation, why.clone()).await;
                self.note(format!(
                    "mcp {server}: {why}; the server is restarted on the next call"
                ))
                .await;
                Ok(ToolOutput::error(format!(
                    "Error: MCP server '{server}' gave no answer within {:.1}s; the call was \
                     cancelled and the server is restarted on the next call.",
                    self.timeout.as_secs_f64()
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_are_prefixed_and_safe_for_providers() {
        assert_eq!(
            tool_name("everything", "get-sum"),
            "mcp__everything__get-sum"
        );
        assert_eq!(tool_name("s", "a.b/c d"), "mcp__s__a_b_c_d");
        assert_eq!(tool_name("s", &"x".repeat(100)).len(), 64);
    }
}
