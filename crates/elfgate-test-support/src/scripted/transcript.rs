//! Checks of the transcript a run sends upstream: every tool call answered, in the place each
//! provider format wants it.

use serde_json::{Value, json};
use std::collections::BTreeSet;

/// Checks the messages of an OpenAI request: the first non-system message is a user message,
/// every assistant tool call is answered by the tool messages right after it, and every tool
/// message answers a call of the assistant message before it.
pub fn assert_valid_openai(all: &[Value]) {
    let m: Vec<&Value> = all.iter().filter(|x| x["role"] != "system").collect();
    assert_eq!(m[0]["role"], "user", "{all:?}");
    let mut i = 0;
    while i < m.len() {
        let x = m[i];
        assert_ne!(x["role"], "tool", "message {i} answers no call: {all:?}");
        i += 1;
        if let Some(calls) = x["tool_calls"].as_array() {
            let mut want: BTreeSet<&str> =
                calls.iter().map(|c| c["id"].as_str().unwrap()).collect();
            while i < m.len() && m[i]["role"] == "tool" {
                let id = m[i]["tool_call_id"].as_str().unwrap();
                assert!(
                    want.remove(id),
                    "result {id} answers no pending call: {all:?}"
                );
                i += 1;
            }
            assert!(want.is_empty(), "calls without a result {want:?}: {all:?}");
        }
    }
    assert_eq!(m.last().unwrap()["role"], "user");
}

/// The content blocks of an Anthropic message (a plain string as one text block).
pub fn anthropic_blocks(x: &Value) -> Vec<Value> {
    match &x["content"] {
        Value::String(s) => vec![json!({"type": "text", "text": s})],
        Value::Array(a) => a.clone(),
        other => panic!("bad content {other}"),
    }
}

/// Checks the messages of an Anthropic request: it starts with a user message, every assistant
/// tool_use is answered by a tool_result in the user message right after it, and every
/// tool_result answers a tool_use of the assistant message right before it.
pub fn assert_valid_anthropic(m: &[Value]) {
    assert_eq!(m[0]["role"], "user", "{m:?}");
    let mut pending: BTreeSet<String> = Default::default();
    for x in m {
        let blocks = anthropic_blocks(x);
        let ids = |kind: &str, key: &str| -> BTreeSet<String> {
            blocks
                .iter()
                .filter(|b| b["type"] == kind)
                .map(|b| b[key].as_str().unwrap().to_string())
                .collect()
        };
        if x["role"] == "user" {
            assert_eq!(ids("tool_result", "tool_use_id"), pending, "{m:?}");
            // Results come first in their message.
            let first_other = blocks.iter().position(|b| b["type"] != "tool_result");
            let last_result = blocks.iter().rposition(|b| b["type"] == "tool_result");
            if let (Some(o), Some(r)) = (first_other, last_result) {
                assert!(r < o, "{m:?}");
            }
            pending.clear();
        } else {
            assert_eq!(x["role"], "assistant");
            assert!(
                pending.is_empty(),
                "calls without a result {pending:?}: {m:?}"
            );
            pending = ids("tool_use", "id");
        }
    }
    assert!(pending.is_empty(), "{m:?}");
    assert_eq!(m.last().unwrap()["role"], "user");
}
