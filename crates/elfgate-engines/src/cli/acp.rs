//! The `acp` cli backend: an agent spoken to with the Agent Client Protocol, JSON-RPC 2.0 over
//! its stdio, one message per line. The daemon is the client: it starts the agent, initializes
//! it, opens the session's conversation (`session/new`, or `session/load` of the one it had), sends
//! each prompt with `session/prompt` and reads `session/update` notifications into the run's
//! events until the prompt is answered; it answers the agent's `session/request_permission`
//! through the daemon's permission prompts and its `fs/*` requests inside the project through the
//! tools' firewall; an interrupt is `session/cancel`.
//!
//! An ACP agent holds its conversation in memory, so a session's agent process is kept after a
//! prompt (`[engines.cli.acp] keep_alive_secs`) and the next prompt goes to it; a later prompt
//! that finds none (kept too long, or the daemon restarted) loads the conversation with
//! `session/load`, and fails with a clear error when the agent cannot, instead of starting a new
//! conversation unseen.
//!
//! The messages are few and their shapes plain JSON, and the engine's supervisor already owns the
//! process group, its pipes and the interrupt ladder, which the agent-client-protocol crate's
//! connection would want to own itself: so they are read and written here as JSON values.

use super::adapter::{Adapter, AdapterEvent, str_of, u64_of};
use elfgate_core::{DeltaKind, TokenUsage};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};

/// The protocol version this client speaks.
pub(crate) const PROTOCOL_VERSION: u64 = 1;

/// A JSON-RPC request, as a line.
pub(crate) fn request(id: u64, method: &str, params: Value) -> Vec<u8> {
    line(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
}

/// A JSON-RPC notification, as a line.
pub(crate) fn notification(method: &str, params: Value) -> Vec<u8> {
    line(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
}

/// The answer to the agent's request `id`, as a line.
pub(crate) fn response(id: &Value, result: Value) -> Vec<u8> {
    line(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

/// An error answer to the agent's request `id`, as a line.
pub(crate) fn error_response(id: &Value, code: i64, message: &str) -> Vec<u8> {
    line(&json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}))
}

fn line(v: &Value) -> Vec<u8> {
    let mut out = v.to_string().into_bytes();
    out.push(b'\n');
    out
}

/// JSON-RPC's "method not found".
pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC's "invalid params".
pub(crate) const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC's "internal error": a file request the firewall refused or that failed.
pub(crate) const INTERNAL_ERROR: i64 = -32603;
/// The protocol's "resource not found": a file to read that does not exist.
pub(crate) const RESOURCE_NOT_FOUND: i64 = -32002;

/// The `initialize` request: what this client offers (file reads and writes, terminals).
pub(crate) fn initialize(id: u64) -> Vec<u8> {
    request(
        id,
        "initialize",
        json!({
            "protocolVersion": PROTOCOL_VERSION,
            "clientCapabilities": {
                "fs": {"readTextFile": true, "writeTextFile": true},
                "terminal": true,
            },
            "clientInfo": {"name": "elfgate", "version": env!("CARGO_PKG_VERSION")},
        }),
    )
}

/// `session/new` in `cwd`.
pub(crate) fn new_session(id: u64, cwd: &str) -> Vec<u8> {
    request(id, "session/new", json!({"cwd": cwd, "mcpServers": []}))
}

/// `session/load` of the agent's session `session` in `cwd`.
pub(crate) fn load_session(id: u64, session: &str, cwd: &str) -> Vec<u8> {
    request(
        id,
        "session/load",
        json!({"sessionId": session, "cwd": cwd, "mcpServers": []}),
    )
}

/// `session/prompt` with the user's text.
pub(crate) fn prompt(id: u64, session: &str, text: &str) -> Vec<u8> {
    request(
        id,
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]}),
    )
}

/// `session/cancel`, the interrupt.
pub(crate) fn cancel(session: &str) -> Vec<u8> {
    notification("session/cancel", json!({"sessionId": session}))
}

/// One line of the agent's stdout.
#[derive(Debug, PartialEq)]
pub(crate) enum Incoming<'a> {
    /// The answer to one of our requests.
    Answer {
        id: u64,
        result: Result<&'a Value, String>,
    },
    /// A `session/update` notification's update.
    Update(&'a Value),
    /// A request of the agent's to the client.
    Call {
        id: &'a Value,
        method: &'a str,
        params: &'a Value,
    },
    /// Anything else (another notification).
    Other,
}

/// What a line is.
pub(crate) fn classify(v: &Value) -> Incoming<'_> {
    static NULL: Value = Value::Null;
    match (v.get("id"), str_of(v, "method")) {
        (Some(id), Some(method)) => Incoming::Call {
            id,
            method,
            params: v.get("params").unwrap_or(&NULL),
        },
        (Some(id), None) => {
            let Some(id) = id.as_u64() else {
                return Incoming::Other;
            };
            let result = match (v.get("result"), v.get("error")) {
                (_, Some(e)) => Err(rpc_error_text(e)),
                (Some(r), None) => Ok(r),
                (None, None) => Ok(&NULL),
            };
            Incoming::Answer { id, result }
        }
        (None, Some("session/update")) => match v.get("params").and_then(|p| p.get("update")) {
            Some(u) => Incoming::Update(u),
            None => Incoming::Other,
        },
        (None, _) => Incoming::Other,
    }
}

/// A JSON-RPC error as one line of text: its message and, where the agent gave them, details.
fn rpc_error_text(e: &Value) -> String {
    let message = str_of(e, "message").unwrap_or("error");
    let details = e
        .get("data")
        .map(|d| match d.get("details").and_then(Value::as_str) {
            Some(s) => s.to_string(),
            None => d.to_string(),
        })
        .filter(|d| !d.is_empty() && d != "null");
    match details {
        Some(d) => format!("{message}: {d}"),
        None => message.to_string(),
    }
}

/// A permission request's options, kept until it is answered.
#[derive(Debug, Clone)]
struct PendingAsk {
    /// The option to pick on an allow (`allow_once`, else any `allow_*`).
    allow: Option<String>,
    /// The option to pick on a deny (`reject_once`, else any `reject_*`).
    reject: Option<String>,
}

/// Reads an agent's `session/update` notifications into adapter events, and keeps what answering
/// its permission requests needs.
#[derive(Debug, Default)]
pub(crate) struct AcpAdapter {
    /// Tool calls announced (a call is announced once, whichever message names it first).
    started: HashSet<String>,
    /// The kind of each tool call that gave one (`execute`, `edit`, …): a permission request
    /// may leave it out.
    kinds: HashMap<String, String>,
    /// Tool calls ended.
    ended: HashSet<String>,
    /// Permission requests waiting, by the JSON-RPC id's text.
    pending: HashMap<String, PendingAsk>,
}

impl AcpAdapter {
    /// The events of one update; `terminal` gives a terminal's output by its id, for a tool
    /// call whose content names one.
    pub(crate) fn on_update(
        &mut self,
        u: &Value,
        terminal: &dyn Fn(&str) -> Option<String>,
    ) -> Vec<AdapterEvent> {
        match str_of(u, "sessionUpdate").unwrap_or_default() {
            "agent_message_chunk" => text_of(u)
                .map(|t| vec![AdapterEvent::Delta(DeltaKind::Text, t)])
                .unwrap_or_default(),
            "agent_thought_chunk" => text_of(u)
                .map(|t| vec![AdapterEvent::Delta(DeltaKind::Thinking, t)])
                .unwrap_or_default(),
            "tool_call" | "tool_call_update" => self.on_tool_call(u, terminal),
            "plan" => {
                let steps: Vec<String> = u
                    .get("entries")
                    .and_then(Value::as_array)
                    .map(|entries| {
                        entries
                            .iter()
                            .map(|e| {
                                format!(
                                    "[{}] {}",
                                    str_of(e, "status").unwrap_or("pending"),
                                    str_of(e, "content").unwrap_or_default()
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                if steps.is_empty() {
                    Vec::new()
                } else {
                    vec![AdapterEvent::Notice(format!("plan:\n{}", steps.join("\n")))]
                }
            }
            // The agent's own reckoning of the session's cost (in US dollars only).
            "usage_update" => u
                .get("cost")
                .filter(|c| str_of(c, "currency").is_none_or(|cur| cur.eq_ignore_ascii_case("USD")))
                .and_then(|c| c.get("amount"))
                .and_then(Value::as_f64)
                .map(|amount| vec![AdapterEvent::Cost(amount)])
                .unwrap_or_default(),
            // The user's own message echoed, the agent's commands and modes: nothing to relay.
            _ => Vec::new(),
        }
    }

    /// A tool call's announcement or update: its start once, its end once it completed or failed.
    fn on_tool_call(
        &mut self,
        u: &Value,
        terminal: &dyn Fn(&str) -> Option<String>,
    ) -> Vec<AdapterEvent> {
        let Some(id) = str_of(u, "toolCallId") else {
            return Vec::new();
        };
        if let Some(kind) = str_of(u, "kind") {
            self.kinds.insert(id.to_string(), kind.to_string());
        }
        let mut out = Vec::new();
        if !self.started.contains(id) {
            self.started.insert(id.to_string());
            out.push(AdapterEvent::ToolStart {
                id: id.to_string(),
                name: self.tool_name(u),
                input: tool_input(u),
            });
        }
        let status = str_of(u, "status").unwrap_or_default();
        if matches!(status, "completed" | "failed") && self.ended.insert(id.to_string()) {
            out.push(AdapterEvent::ToolEnd {
                id: id.to_string(),
                content: content_text(u.get("content"), terminal),
                is_error: status == "failed",
            });
        }
        out
    }

    /// A `session/request_permission` call: its tool call announced (agents may ask before they
    /// announce it) and the question for the client.
    pub(crate) fn on_permission(&mut self, id: &Value, params: &Value) -> Vec<AdapterEvent> {
        let call = params.get("toolCall").cloned().unwrap_or(Value::Null);
        let mut out = self.on_tool_call(&call, &|_| None);
        let options = params
            .get("options")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let pick = |kinds: [&str; 2]| {
            kinds.iter().find_map(|k| {
                options
                    .iter()
                    .find(|o| str_of(o, "kind") == Some(*k))
                    .and_then(|o| str_of(o, "optionId"))
                    .map(str::to_string)
            })
        };
        let request_id = id.to_string();
        self.pending.insert(
            request_id.clone(),
            PendingAsk {
                allow: pick(["allow_once", "allow_always"]),
                reject: pick(["reject_once", "reject_always"]),
            },
        );
        out.push(AdapterEvent::PermissionAsk {
            request_id,
            tool_name: self.tool_name(&call),
            input: tool_input(&call),
        });
        out
    }

    /// The answer to permission request `request_id` (the id's JSON text): the option that
    /// allows or rejects once, or a cancelled outcome when the agent offered none.
    pub(crate) fn permission_answer(&mut self, request_id: &str, denied: bool) -> Option<Vec<u8>> {
        let ask = self.pending.remove(request_id)?;
        let id: Value = serde_json::from_str(request_id).ok()?;
        let option = if denied { ask.reject } else { ask.allow };
        let outcome = match option {
            Some(option_id) => json!({"outcome": "selected", "optionId": option_id}),
            None => json!({"outcome": "cancelled"}),
        };
        Some(response(&id, json!({"outcome": outcome})))
    }
}

impl AcpAdapter {
    /// A tool call's name as the client is shown it: its kind (read, edit, execute, …), given
    /// now or when the call was announced, which "allow for the session" then covers; else its
    /// title.
    fn tool_name(&self, call: &Value) -> String {
        str_of(call, "kind")
            .or_else(|| {
                str_of(call, "toolCallId")
                    .and_then(|id| self.kinds.get(id))
                    .map(String::as_str)
            })
            .or_else(|| str_of(call, "title"))
            .unwrap_or("tool")
            .to_string()
    }
}

impl Adapter for AcpAdapter {
    fn on_line(&mut self, line: &Value) -> Vec<AdapterEvent> {
        match classify(line) {
            Incoming::Update(u) => self.on_update(u, &|_| None),
            _ => Vec::new(),
        }
    }
}

/// A tool call's input as the client is shown it: the agent's raw input when it gives one, else
/// its title, locations and content (a diff, say).
fn tool_input(call: &Value) -> Value {
    if let Some(raw) = call.get("rawInput").filter(|v| !v.is_null()) {
        return raw.clone();
    }
    let mut input = serde_json::Map::new();
    for key in ["title", "locations", "content"] {
        if let Some(v) = call.get(key).filter(|v| !v.is_null()) {
            input.insert(key.to_string(), v.clone());
        }
    }
    Value::Object(input)
}

/// The text of a content block (`{"content": {"type": "text", "text": …}}`).
fn text_of(u: &Value) -> Option<String> {
    let c = u.get("content")?;
    (str_of(c, "type") == Some("text"))
        .then(|| str_of(c, "text").map(str::to_string))
        .flatten()
        .filter(|t| !t.is_empty())
}

/// A tool call's content as text: its text blocks, its diffs as the path and new text, its
/// terminals' output.
fn content_text(content: Option<&Value>, terminal: &dyn Fn(&str) -> Option<String>) -> String {
    let Some(items) = content.and_then(Value::as_array) else {
        return String::new();
    };
    let mut parts = Vec::new();
    for item in items {
        match str_of(item, "type") {
            Some("content") => {
                if let Some(t) = item.get("content").and_then(|c| str_of(c, "text")) {
                    parts.push(t.to_string());
                }
            }
            Some("diff") => parts.push(format!(
                "{}:\n{}",
                str_of(item, "path").unwrap_or_default(),
                str_of(item, "newText").unwrap_or_default()
            )),
            Some("terminal") => {
                let id = str_of(item, "terminalId").unwrap_or_default();
                parts.push(terminal(id).unwrap_or_else(|| format!("terminal {id}")));
            }
            _ => {}
        }
    }
    parts.join("\n")
}

/// Token figures from a prompt's answer, where the agent reports them (gemini-cli puts them in
/// `_meta.quota.token_count`; the protocol's own `usage` field where an agent fills it).
pub(crate) fn usage_of(result: &Value) -> Option<TokenUsage> {
    let (input, output) = if let Some(u) = result.get("usage").filter(|u| u.is_object()) {
        (u64_of(u, "inputTokens"), u64_of(u, "outputTokens"))
    } else {
        let c = result.get("_meta")?.get("quota")?.get("token_count")?;
        (u64_of(c, "input_tokens"), u64_of(c, "output_tokens"))
    };
    (input > 0 || output > 0).then(|| TokenUsage {
        input_tokens: input,
        output_tokens: output,
        ..TokenUsage::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_usage_update_in_dollars_is_the_runs_cost() {
        let mut adapter = AcpAdapter::default();
        let update = json!({"sessionUpdate": "usage_update", "used": 10, "size": 100,
                            "cost": {"amount": 0.25, "currency": "USD"}});
        let events = adapter.on_update(&update, &|_| None);
        assert!(matches!(events.as_slice(), [AdapterEvent::Cost(c)] if (*c - 0.25).abs() < 1e-12));
        let euros =
            json!({"sessionUpdate": "usage_update", "cost": {"amount": 1.0, "currency": "EUR"}});
        assert!(adapter.on_update(&euros, &|_| None).is_empty());
    }

    #[test]
    fn lines_are_classified_as_answers_updates_and_calls() {
        let answer = json!({"jsonrpc": "2.0", "id": 3, "result": {"stopReason": "end_turn"}});
        assert!(matches!(
            classify(&answer),
            Incoming::Answer {
                id: 3,
                result: Ok(_)
            }
        ));
        let failed = json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -32603,
            "message": "Internal error", "data": {"details": "No previous sessions found"}}});
        assert_eq!(
            classify(&failed),
            Incoming::Answer {
                id: 2,
                result: Err("Internal error: No previous sessions found".into())
            }
        );
        let call = json!({"jsonrpc": "2.0", "id": 0, "method": "fs/read_text_file",
            "params": {"path": "a"}});
        assert!(matches!(
            classify(&call),
            Incoming::Call {
                method: "fs/read_text_file",
                ..
            }
        ));
        let update = json!({"jsonrpc": "2.0", "method": "session/update", "params": {
            "sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "hi"}}}});
        let mut a = AcpAdapter::default();
        assert_eq!(
            a.on_line(&update),
            vec![AdapterEvent::Delta(DeltaKind::Text, "hi".into())]
        );
    }

    #[test]
    fn a_permission_asked_before_its_call_announces_it_and_is_answered_with_its_options() {
        let mut a = AcpAdapter::default();
        let params = json!({"sessionId": "s", "options": [
            {"optionId": "proceed_always", "kind": "allow_always"},
            {"optionId": "proceed_once", "kind": "allow_once"},
            {"optionId": "cancel", "kind": "reject_once"}],
            "toolCall": {"toolCallId": "w1", "status": "pending", "title": "Writing to a.txt",
                "kind": "edit", "content": [{"type": "diff", "path": "/p/a.txt",
                "oldText": "", "newText": "hello"}]}});
        let evs = a.on_permission(&json!(0), &params);
        assert!(
            matches!(&evs[0], AdapterEvent::ToolStart { id, name, .. } if id == "w1" && name == "edit")
        );
        assert!(
            matches!(&evs[1], AdapterEvent::PermissionAsk { request_id, .. } if request_id == "0")
        );
        let allow: Value =
            serde_json::from_slice(&a.permission_answer("0", false).unwrap()).unwrap();
        assert_eq!(allow["result"]["outcome"]["optionId"], "proceed_once");
        assert!(a.permission_answer("0", false).is_none(), "answered once");
        a.on_permission(&json!(1), &params);
        let deny: Value = serde_json::from_slice(&a.permission_answer("1", true).unwrap()).unwrap();
        assert_eq!(deny["result"]["outcome"]["optionId"], "cancel");
        // The update that completes it ends the call once; the start is not repeated.
        let done = json!({"sessionUpdate": "tool_call_update", "toolCallId": "w1",
            "status": "completed", "content": [{"type": "diff", "path": "/p/a.txt",
            "newText": "hello"}]});
        let evs = a.on_update(&done, &|_| None);
        assert_eq!(
            evs,
            vec![AdapterEvent::ToolEnd {
                id: "w1".into(),
                content: "/p/a.txt:\nhello".into(),
                is_error: false
            }]
        );
        assert!(a.on_update(&done, &|_| None).is_empty());
    }

    #[test]
    fn usage_comes_from_the_protocol_field_or_gemini_clis_meta() {
        let gemini = json!({"stopReason": "end_turn", "_meta": {"quota": {"token_count":
            {"input_tokens": 10, "output_tokens": 3}}}});
        let u = usage_of(&gemini).unwrap();
        assert_eq!((u.input_tokens, u.output_tokens), (10, 3));
        let own = json!({"stopReason": "end_turn", "usage": {"inputTokens": 5, "outputTokens": 2}});
        assert_eq!(usage_of(&own).unwrap().output_tokens, 2);
        assert!(usage_of(&json!({"stopReason": "end_turn"})).is_none());
    }
}
