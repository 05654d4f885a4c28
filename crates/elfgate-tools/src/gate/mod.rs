//! The tool gate: every tool-like action an agent takes (a model's tool call, a client's tool
//! run, a workflow's tool step, an ACP agent's file write or terminal command) is decided here,
//! in this order:
//!
//! 1. abort (the run was interrupted),
//! 2. native-search skip (a provider's own search tool is not run here),
//! 3. channel role (`canUseTool`), then the project a file or shell tool needs,
//! 4. PreToolUse hooks,
//! 5. the ExecutionFirewall,
//! 6. the guardian,
//! 7. tier and permission (the policy, then the client's answer),
//! 8. execute with the tool's timeout,
//! 9. PostToolUse hooks (fire-and-forget).
//!
//! Each gate is a small function in [`checks`] or [`execute`] that answers a permit (`Ok`) or a
//! typed [`Refusal`] naming the gate and why; [`audit_refusal`] is the one place a refusal is
//! kept in the session's audit. The engines call the gates in this order: they own the events
//! a call emits and the interrupts that cut it short.

pub mod checks;
pub mod execute;
pub mod runs;

pub use checks::{
    NATIVE_SEARCH_TOOLS, Permission, acp_mode, channel_role, firewall, guardian_reviews,
    guardian_verdict, native_search, permission_answer, policy, pre_tool_use, project,
};
pub use execute::{CLEANUP_GRACE, Ended, Executed, INTERRUPTED_RESULT, execute, post_tool_use};
pub use runs::{ToolRunAnswer, ToolRunError, ToolRuns};

use elfgate_core::{AuditRecord, BlockedCall, Gate, RunId, SessionId};
use elfgate_store::AuditLog;
use serde_json::Value;

/// A gate refused the action: which gate, and why (for the agent, the client and the audit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The gate that refused it.
    pub gate: Gate,
    /// Why, in words the agent and the client read.
    pub why: String,
}

impl Refusal {
    /// A refusal by `gate` because of `why`.
    pub fn new(gate: Gate, why: impl Into<String>) -> Self {
        Refusal {
            gate,
            why: why.into(),
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

/// Why an action did not get to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// The run was interrupted before or while it was decided.
    Interrupted,
    /// A gate refused it (audited).
    Refused(Refusal),
    /// It cannot run as asked (no such tool, a provider's own search, arguments that do not
    /// parse): an error the agent reads, not a refusal to audit.
    Error(String),
}

impl From<Refusal> for Stop {
    fn from(r: Refusal) -> Self {
        Stop::Refused(r)
    }
}

/// Keeps a refused action in the session's audit (`GET /v1/sessions/{id}/audit`): the one place
/// every engine's refusals are written. A store that fails loses only the audit line (the action
/// stays refused), and the log says so.
pub async fn audit_refusal(
    store: &dyn AuditLog,
    session_id: SessionId,
    run_id: RunId,
    call: BlockedCall,
    input: Value,
) {
    let tool = call.tool_name.clone();
    let gate = call.gate;
    let record = AuditRecord {
        session_id,
        run_id,
        call,
        input,
        created_at: chrono::Utc::now(),
    };
    if let Err(e) = store.record_blocked(&record).await {
        tracing::warn!(error = %e, %tool, gate = gate.as_str(), "could not store the audit record of a refused tool call");
    }
}
