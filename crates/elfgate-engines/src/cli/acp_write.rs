//! An ACP agent's file writes (`fs/write_text_file`), served inside the session's project through
//! the tools' firewall and allowed as tinyelf's own write tools are: an `edit` permission the
//! client has just granted the agent covers the write that follows it; otherwise the session's
//! mode decides (plan refuses, acceptEdits and bypassPermissions allow) or the client is asked.
//! An agent that writes without asking first (one run with its own approvals off) is held to
//! the same rules. A refused write is kept in the session's audit with its gate.

use super::CliEngine;
use super::acp;
use super::adapter::str_of;
use elfgate_core::{AuditRecord, BlockedCall, EngineSessionContext, Gate, PermissionMode};
use elfgate_tools::ToolError;
use elfgate_tools::confined::write_confined;
use serde_json::{Value, json};
use std::path::Path;

/// The permission's name in the ACP tool kinds (what the agent asks for before an edit).
const EDIT: &str = "edit";

/// `edit` permissions the client granted the agent in this turn that no write has used yet.
#[derive(Debug, Default)]
pub(crate) struct EditGrants(u32);

impl EditGrants {
    /// The client allowed the agent an `edit` call: its write may go ahead without asking again.
    pub(crate) fn grant(&mut self) {
        self.0 += 1;
    }

    fn take(&mut self) -> bool {
        let had = self.0 > 0;
        self.0 = self.0.saturating_sub(1);
        had
    }
}

impl CliEngine {
    /// `fs/write_text_file`: allowed (a grant, the session's mode, or the client's answer), then
    /// written inside `cwd` through the firewall.
    pub(crate) async fn write_text_file(
        &self,
        ctx: &EngineSessionContext,
        grants: &mut EditGrants,
        cwd: &Path,
        req: &Value,
        params: &Value,
    ) -> Vec<u8> {
        let (Some(path), Some(content)) = (str_of(params, "path"), str_of(params, "content"))
        else {
            return acp::error_response(
                req,
                acp::INVALID_PARAMS,
                "path and content: strings are required",
            );
        };
        let input = json!({"path": path, "content": content});
        if !grants.take()
            && let Some(why) = self.acp_permission(ctx, EDIT, &input).await
        {
            let gate = match ctx.permission_mode.unwrap_or_default() {
                PermissionMode::Plan => Gate::Policy,
                _ => Gate::Permission,
            };
            return self.refuse_write(ctx, req, input, gate, why).await;
        }
        match write_confined(&self.shell.firewall, cwd, path, content).await {
            Ok(()) => acp::response(req, Value::Null),
            Err(ToolError::Firewall(e)) => {
                self.refuse_write(ctx, req, input, Gate::Firewall, e.to_string())
                    .await
            }
            Err(e) => acp::error_response(req, acp::INTERNAL_ERROR, &e.to_string()),
        }
    }

    /// Refuses a write: the agent is told why, the session's audit keeps which gate it was.
    async fn refuse_write(
        &self,
        ctx: &EngineSessionContext,
        req: &Value,
        input: Value,
        gate: Gate,
        why: String,
    ) -> Vec<u8> {
        let call = BlockedCall {
            tool_use_id: acp_request_id(req),
            tool_name: "write_file".to_string(),
            gate,
            reason: why.clone(),
        };
        self.audit_acp_refusal(ctx, call, input).await;
        acp::error_response(
            req,
            acp::INTERNAL_ERROR,
            &format!("the file was not written: {why}"),
        )
    }

    /// Keeps a request of an ACP agent that the daemon refused in the session's audit.
    pub(crate) async fn audit_acp_refusal(
        &self,
        ctx: &EngineSessionContext,
        call: BlockedCall,
        input: Value,
    ) {
        let tool = call.tool_name.clone();
        let record = AuditRecord {
            session_id: ctx.session_id(),
            run_id: ctx.run_id,
            call,
            input,
            created_at: chrono::Utc::now(),
        };
        if let Err(e) = self.store.record_blocked(&record).await {
            tracing::warn!(error = %e, %tool, "could not store the audit record of an ACP agent's refused request");
        }
    }
}

/// The audit's name for a call the agent made to the client: its JSON-RPC id.
fn acp_request_id(req: &Value) -> String {
    match req {
        Value::String(s) => format!("acp-{s}"),
        other => format!("acp-{other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_covers_one_write() {
        let mut grants = EditGrants::default();
        assert!(!grants.take());
        grants.grant();
        assert!(grants.take());
        assert!(!grants.take());
    }
}
