//! An ACP agent's file reads (`fs/read_text_file`), served inside the session's project through
//! the tools' firewall, at most [`MAX_READ_BYTES`] of a file.

use super::acp;
use super::adapter::str_of;
use elfgate_tools::ExecutionFirewall;
use elfgate_tools::confined::read_capped;
use serde_json::{Value, json};
use std::path::Path;

/// Largest file an agent may read through the client (fs/read_text_file), in bytes.
const MAX_READ_BYTES: usize = 10 * 1024 * 1024;

/// Serves `fs/read_text_file` inside `cwd` through the firewall: the text, from `line`
/// (1-based) for `limit` lines when given.
pub(crate) async fn read_text_file(
    firewall: &ExecutionFirewall,
    cwd: &Path,
    id: &Value,
    params: &Value,
    missing_empty: bool,
) -> Vec<u8> {
    let Some(path) = str_of(params, "path") else {
        return acp::error_response(id, acp::INVALID_PARAMS, "path: a string is required");
    };
    // A file that is not there, where the firewall would allow it: the protocol's not-found,
    // or empty content for an agent configured to take it so.
    if let Ok(resolved) = firewall.resolve_path(cwd, path)
        && tokio::fs::symlink_metadata(&resolved)
            .await
            .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
    {
        return if missing_empty {
            acp::response(id, json!({"content": ""}))
        } else {
            acp::error_response(
                id,
                acp::RESOURCE_NOT_FOUND,
                &format!("Resource not found: {path}"),
            )
        };
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
            acp::response(id, json!({"content": text}))
        }
        Err(e) => acp::error_response(id, acp::INTERNAL_ERROR, &e.to_string()),
    }
}
