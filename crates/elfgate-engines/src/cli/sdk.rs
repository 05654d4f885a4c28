//! The claude-sdk engine: claude-code driven over its SDK protocol (stream-json in and out,
//! control requests for interrupts and for every permission it asks), the specification's engine
//! type. It is the cli engine's claude-code backend — the same process supervision, adapter,
//! permission relay and resume — with two differences: the calls always go through the daemon's
//! Anthropic door (a run token, so that every provider, alias and limit applies), and the
//! session's MCP servers are handed to claude-code (`--mcp-config`). See docs/cli.md.

use super::{CliEngine, RunPolicy};
use async_trait::async_trait;
use elfgate_core::{
    BackendInfo, CliBackend, Engine, EngineSessionContext, EngineType, RunOutcome, StartRefused,
    StartRequest,
};
use std::sync::Arc;

/// The claude-sdk engine, over the cli engine.
pub struct ClaudeSdkEngine {
    cli: Arc<CliEngine>,
}

impl ClaudeSdkEngine {
    /// The engine, sharing `cli`'s backends, limits and tokens.
    pub fn new(cli: Arc<CliEngine>) -> Self {
        ClaudeSdkEngine { cli }
    }
}

/// Why a claude-sdk request is refused.
#[derive(Debug, thiserror::Error)]
#[error("cliBackend: the claude-sdk engine runs claude-code only, not '{0}'")]
struct OtherBackend(&'static str);

#[async_trait]
impl Engine for ClaudeSdkEngine {
    fn engine_type(&self) -> EngineType {
        EngineType::ClaudeSdk
    }

    fn description(&self) -> &'static str {
        "claude-code over its SDK protocol, through the daemon's door to any provider"
    }

    fn capabilities(&self) -> Vec<&'static str> {
        vec![
            "streaming",
            "interrupt",
            "tools",
            "resume",
            "thinking",
            "permissions",
            "mcp",
        ]
    }

    async fn run_prompt(&self, mut ctx: EngineSessionContext) -> RunOutcome {
        ctx.cli_backend = Some(CliBackend::ClaudeCode);
        let policy = RunPolicy {
            through_door: true,
            mcp: true,
        };
        self.cli.run_with(ctx, policy).await
    }

    fn backends(&self) -> Option<Vec<BackendInfo>> {
        self.cli.backends().map(|all| {
            all.into_iter()
                .filter(|b| b.name == CliBackend::ClaudeCode)
                .collect()
        })
    }

    fn check_start(&self, req: &StartRequest<'_>) -> Result<(), StartRefused> {
        if let Some(b) = req.cli_backend.filter(|b| *b != CliBackend::ClaudeCode) {
            return Err(StartRefused(Box::new(OtherBackend(b.as_str()))));
        }
        let req = StartRequest {
            cli_backend: Some(CliBackend::ClaudeCode),
            ..*req
        };
        self.cli.check_start(&req)
    }

    fn interrupt(&self, session_id: elfgate_core::SessionId) -> bool {
        self.cli.interrupt(session_id)
    }
}
