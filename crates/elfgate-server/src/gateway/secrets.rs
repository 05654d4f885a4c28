//! The input scan of a front door's request: every text it would send upstream or store (the
//! system prompt, whichever door's field it came from, every turn of the conversation, tool
//! results and calls, the tools' descriptions and the caller's own wire-format copy of them) is
//! looked through for the daemon's token and the providers' keys, not only the last user
//! message (which the session's own scan reads as its prompt).

use super::Inbound;
use crate::error::ApiError;
use crate::service::SecretScan;
use crate::state::AppState;
use serde_json::Value;

/// 422 naming where a secret is, before anything is stored or sent.
pub fn check_request(state: &AppState, inbound: &Inbound) -> Result<(), ApiError> {
    let scan = SecretScan::new(state);
    let req = &inbound.request;
    if let Some(system) = &req.system {
        scan.check(system, "the system prompt (system, instructions)")?;
    }
    for (i, m) in req.messages.iter().enumerate() {
        let field = format!("the conversation's turn {i} ({})", m.role.as_str());
        for block in &m.blocks {
            // Every string of the block: text, reasoning, tool input and output, file names.
            let v = serde_json::to_value(block).map_err(|e| {
                ApiError::Internal(format!("a message block could not be scanned: {e}"))
            })?;
            check_strings(&scan, &v, &field)?;
        }
    }
    for t in &req.tools {
        scan.check(&t.name, "tools")?;
        scan.check(&t.description, "tools")?;
        check_strings(&scan, &t.input_schema, "tools")?;
    }
    for s in &req.stop {
        scan.check(s, "stop")?;
    }
    if let Some(format) = &req.response_format {
        check_strings(&scan, format, "response_format")?;
    }
    if let Some((_, fields)) = &req.passthrough {
        for (key, v) in fields {
            check_strings(&scan, v, key)?;
        }
    }
    Ok(())
}

/// Every string in `v` (object keys too).
fn check_strings(scan: &SecretScan, v: &Value, field: &str) -> Result<(), ApiError> {
    match v {
        Value::String(s) => scan.check(s, field),
        Value::Array(items) => items.iter().try_for_each(|x| check_strings(scan, x, field)),
        Value::Object(map) => map.iter().try_for_each(|(k, x)| {
            scan.check(k, field)?;
            check_strings(scan, x, field)
        }),
        Value::Null | Value::Bool(_) | Value::Number(_) => Ok(()),
    }
}
