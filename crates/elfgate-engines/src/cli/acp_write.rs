//! An ACP agent's file writes (`fs/write_text_file`), served inside the session's project through
//! the tools' firewall and allowed as tinyelf's own write tools are: an `edit` permission the
//! client has just granted the agent covers the write that follows it; otherwise the session's
//! mode decides (plan refuses, acceptEdits and bypassPermissions allow) or the client is asked.
//! An agent that writes without asking first (one run with its own approvals off) is held to
//! the same rules. A refused write is kept in the session's audit with its gate.

use super::CliEngine;
use super::acp;
use super::adapter::str_of;
use elfgate_core::{BlockedCall, EngineSessionContext, Gate};
use elfgate_tools::ToolError;
use elfgate_tools::confined::write_confined;
use elfgate_tools::gate::{self, Refusal};
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
            && let Err(refused) = self.acp_permission(ctx, EDIT, &input).await
        {
            return self.refuse_write(ctx, req, input, refused).await;
        }
        match write_confined(&self.shell.firewall, cwd, path, content).await {
            Ok(()) => acp::response(req, Value::Null),
            Err(ToolError::Firewall(e)) => {
                let refused = Refusal::new(Gate::Firewall, e.to_string());
                self.refuse_write(ctx, req, input, refused).await
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
        refused: Refusal,
    ) -> Vec<u8> {
        let answer = acp::error_response(
            req,
            acp::INTERNAL_ERROR,
            &format!("the file was not written: {}", refused.why),
        );
        let id = acp_request_id(req);
        self.audit_acp_refusal(ctx, &id, "write_file", refused, input)
            .await;
        answer
    }

    /// Keeps a request of an ACP agent that a gate refused in the session's audit, as the
    /// tool `tool` (the daemon's tool that does the same) with the id `id`.
    pub(crate) async fn audit_acp_refusal(
        &self,
        ctx: &EngineSessionContext,
        id: &str,
        tool: &str,
        refused: Refusal,
        input: Value,
    ) {
        let call = BlockedCall {
            tool_use_id: id.to_string(),
            tool_name: tool.to_string(),
            gate: refused.gate,
            reason: refused.why,
        };
        gate::audit_refusal(
            self.store.as_ref(),
            ctx.session_id(),
            ctx.run_id,
            call,
            input,
        )
        .await;
    }
}

/// The audit's name for a call the agent made to the client: its JSON-RPC id.
pub(super) fn acp_request_id(req: &Value) -> String {
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
