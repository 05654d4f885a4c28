//! A run's MCP tools: the servers its session uses, asked again before every iteration of the
//! top-level agent, so that a reload or a restarted server shows from the next iteration on.

use elfgate_core::sync::lock;
use elfgate_core::{EngineSessionContext, EventPayload, McpSessionConfig, SessionId};
use elfgate_mcp::McpManager;
use elfgate_tools::ToolRegistry;
use std::collections::BTreeSet;
use std::sync::Mutex;
use tokio_util::sync::CancellationToken;

/// The MCP side of one run; the session lets go of its servers when it is dropped.
pub(crate) struct McpRun {
    manager: McpManager,
    session: SessionId,
    cfg: Option<McpSessionConfig>,
    ctx: EngineSessionContext,
    /// Servers said to be unavailable, so that it is said once while they stay so.
    announced: Mutex<BTreeSet<String>>,
}

impl McpRun {
    /// The run's MCP side. A session without servers gets one too: a reload may add some.
    pub(crate) fn new(manager: &McpManager, ctx: &EngineSessionContext) -> McpRun {
        McpRun {
            manager: manager.clone(),
            session: ctx.session_id(),
            cfg: ctx.engine_config.mcp_config.clone(),
            ctx: ctx.clone(),
            announced: Mutex::new(BTreeSet::new()),
        }
    }

    /// `base` with the tools of the servers the session uses now; a server that cannot be
    /// reached is left out, with a `processing` event saying so. None when `cancel` fired first
    /// (starting a server may take up to its startup timeout).
    pub(crate) async fn tools(
        &self,
        base: &ToolRegistry,
        cancel: &CancellationToken,
    ) -> Option<ToolRegistry> {
        let got = tokio::select! {
            biased;
            _ = cancel.cancelled() => return None,
            got = self.manager.session_tools(
                self.session,
                self.cfg.as_ref(),
                Some(self.ctx.events.clone()),
            ) => got,
        };
        let mut notes = Vec::new();
        {
            let mut announced = lock(&self.announced);
            let down: BTreeSet<&String> = got.unavailable.iter().map(|(n, _)| n).collect();
            announced.retain(|n| down.contains(n));
            for (name, why) in &got.unavailable {
                if announced.insert(name.clone()) {
                    notes.push(format!(
                        "MCP server '{name}' is unavailable: {why}; the session runs without its \
                         tools"
                    ));
                }
            }
        }
        for message in notes {
            self.ctx
                .events
                .emit(EventPayload::Processing { message })
                .await;
        }
        let mut tools = base.clone();
        for t in got.tools {
            tools.register(t);
        }
        Some(tools)
    }
}

impl Drop for McpRun {
    fn drop(&mut self) {
        self.manager.release(self.session);
    }
}
