//! An ACP agent's file reads (`fs/read_text_file`), served inside the session's project through
//! the tools' firewall, at most [`MAX_READ_BYTES`] of a file. A read the firewall refuses is kept
//! in the session's audit with its gate, as a refused write is.

use super::CliEngine;
use super::acp;
use super::adapter::str_of;
use elfgate_core::{EngineSessionContext, Gate};
use elfgate_tools::ToolError;
use elfgate_tools::confined::read_capped;
use elfgate_tools::gate::Refusal;
use serde_json::{Value, json};
use std::path::Path;

/// Largest file an agent may read through the client (fs/read_text_file), in bytes.
const MAX_READ_BYTES: usize = 10 * 1024 * 1024;

impl CliEngine {
    /// Serves `fs/read_text_file` inside `cwd` through the firewall: the text, from `line`
    /// (1-based) for `limit` lines when given. A refused read is audited as the tool
    /// `read_file` (the daemon's tool that does the same).
    pub(crate) async fn read_text_file(
        &self,
        ctx: &EngineSessionContext,
        cwd: &Path,
        id: &Value,
        params: &Value,
        missing_empty: bool,
    ) -> Vec<u8> {
        match serve_read(&self.shell.firewall, cwd, id, params, missing_empty).await {
            Ok(answer) => answer,
            Err((answer, refused)) => {
                let input = json!({"path": str_of(params, "path")});
                let audit_id = super::acp_write::acp_request_id(id);
                self.audit_acp_refusal(ctx, &audit_id, "read_file", refused, input)
                    .await;
                answer
            }
        }
    }
}

/// The answer to `fs/read_text_file`; with the refusal when the firewall refused the path.
async fn serve_read(
    firewall: &elfgate_tools::ExecutionFirewall,
    cwd: &Path,
    id: &Value,
    params: &Value,
    missing_empty: bool,
) -> Result<Vec<u8>, (Vec<u8>, Refusal)> {
    let Some(path) = str_of(params, "path") else {
        return Ok(acp::error_response(
            id,
            acp::INVALID_PARAMS,
            "path: a string is required",
        ));
    };
    // A file that is not there, where the firewall would allow it: the protocol's not-found,
    // or empty content for an agent configured to take it so.
    if let Ok(resolved) = firewall.resolve_path(cwd, path)
        && tokio::fs::symlink_metadata(&resolved)
            .await
            .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
    {
        return Ok(if missing_empty {
            acp::response(id, json!({"content": ""}))
        } else {
            acp::error_response(
                id,
                acp::RESOURCE_NOT_FOUND,
                &format!("Resource not found: {path}"),
            )
        });
    }
    match read_capped(firewall, cwd, path, MAX_READ_BYTES).await {
        Ok(capped) => {
            let line = params.get("line").and_then(Value::as_u64).unwrap_or(1);
            let limit = params.get("limit").and_then(Value::as_u64);
            let text = if line <= 1 && limit.is_none() {
                capped.text
            } else {
                let skip = usize::try_from(line.saturating_sub(1)).unwrap_or(usize::MAX);
                let take = limit
                    .and_then(|l| usize::try_from(l).ok())
                    .unwrap_or(usize::MAX);
                capped
                    .text
                    .split_inclusive('\n')
                    .skip(skip)
                    .take(take)
                    .collect()
            };
            Ok(acp::response(id, json!({"content": text})))
        }
        Err(ToolError::Firewall(e)) => {
            let why = e.to_string();
            let answer = acp::error_response(id, acp::INTERNAL_ERROR, &why);
            Err((answer, Refusal::new(Gate::Firewall, why)))
        }
        Err(e) => Ok(acp::error_response(id, acp::INTERNAL_ERROR, &e.to_string())),
    }
}
