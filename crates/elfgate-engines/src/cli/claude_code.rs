//! claude-code: `claude -p --input-format stream-json --output-format stream-json --verbose
//! --include-partial-messages`. The prompt goes in as a user message on stdin, which stays open
//! so that an interrupt can go the same way (a `control_request`); it is closed when the
//! `result` line has come, and the CLI exits. `system/init` carries the session id that
//! `--resume` takes; `stream_event` lines the partial text and thinking; `assistant` lines the
//! whole blocks (text already streamed is not repeated); `user` lines the tool results; `result`
//! the usage, the number of turns and whether the run failed.

use super::adapter::{Adapter, AdapterEvent, CliProvider, Invocation, str_of, u64_of};
use elfgate_core::{DeltaKind, PermissionMode, TokenUsage};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

pub(crate) fn args(inv: &Invocation<'_>, extra: &[String]) -> Vec<String> {
    let mut a: Vec<String> = [
        "-p",
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        "--verbose",
        "--include-partial-messages",
    ]
    .map(String::from)
    .to_vec();
    if let Some(mode) = permission_mode(inv.permission_mode) {
        a.extend(["--permission-mode".to_string(), mode.to_string()]);
    }
    if inv.permission_mode != PermissionMode::BypassPermissions {
        // What claude would refuse in -p mode it asks about on stdout (can_use_tool): the
        // engine relays the question to the client as a permissionRequest.
        a.extend(["--permission-prompt-tool".to_string(), "stdio".to_string()]);
    }
    if let Some(m) = inv.model {
        a.extend(["--model".to_string(), m.to_string()]);
    }
    if let Some(id) = inv.resume {
        a.extend(["--resume".to_string(), id.to_string()]);
    }
    a.extend(extra.iter().cloned());
    a
}

/// claude's own names for the modes are Elfgate's; the default is claude's own (no flag).
fn permission_mode(m: PermissionMode) -> Option<&'static str> {
    match m {
        PermissionMode::Default => None,
        PermissionMode::AcceptEdits => Some("acceptEdits"),
        PermissionMode::BypassPermissions => Some("bypassPermissions"),
        PermissionMode::Plan => Some("plan"),
    }
}

/// One JSON line.
fn line(v: Value) -> Vec<u8> {
    let mut bytes = v.to_string().into_bytes();
    bytes.push(b'\n');
    bytes
}

/// The prompt as a stream-json user message.
pub(crate) fn user_message(prompt: &str) -> Vec<u8> {
    line(json!({
        "type": "user",
        "session_id": "",
        "message": {"role": "user", "content": prompt},
        "parent_tool_use_id": null,
    }))
}

/// The answer to a `can_use_tool` control request: allow with the input unchanged, or deny with
/// a message the model sees.
pub(crate) fn permission_answer(request_id: &str, input: &Value, denied: Option<&str>) -> Vec<u8> {
    let response = match denied {
        None => json!({"behavior": "allow", "updatedInput": input}),
        Some(why) => json!({"behavior": "deny", "message": why}),
    };
    line(json!({
        "type": "control_response",
        "response": {"subtype": "success", "request_id": request_id, "response": response},
    }))
}

/// The control request that stops the current turn.
pub(crate) fn interrupt_request() -> Vec<u8> {
    line(json!({
        "type": "control_request",
        "request_id": "elfgate-interrupt",
        "request": {"subtype": "interrupt"},
    }))
}

/// The servers (enabled ones) in claude-code's own `--mcp-config` format; None without servers.
pub(crate) fn mcp_config(
    servers: &BTreeMap<String, elfgate_core::mcp_config::McpServerConfig>,
) -> Option<String> {
    let mut out = serde_json::Map::new();
    for (name, s) in servers.iter().filter(|(_, s)| s.enabled) {
        let entry = match (&s.command, &s.url) {
            (Some(command), _) => {
                let mut e = json!({"type": "stdio", "command": command, "args": s.args,
                                   "env": s.env});
                if let Some(cwd) = &s.cwd {
                    e["cwd"] = json!(cwd);
                }
                e
            }
            (None, Some(url)) => json!({"type": "http", "url": url, "headers": s.headers}),
            (None, None) => continue,
        };
        out.insert(name.clone(), entry);
    }
    if out.is_empty() {
        return None;
    }
    Some(json!({ "mcpServers": out }).to_string())
}

/// `--mcp-config` naming the file that holds the servers (their headers and variables are
/// secrets: never on the command line), and `--strict-mcp-config` so that only these are used.
pub(crate) fn mcp_args(file: &std::path::Path) -> Vec<String> {
    vec![
        "--mcp-config".to_string(),
        file.display().to_string(),
        "--strict-mcp-config".to_string(),
    ]
}

pub(crate) fn env(
    provider: Option<&CliProvider>,
    key: Option<&str>,
    mode: PermissionMode,
) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = [
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        ("DISABLE_TELEMETRY", "1"),
        ("DISABLE_AUTOUPDATER", "1"),
        ("DISABLE_ERROR_REPORTING", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    if mode == PermissionMode::BypassPermissions {
        // claude refuses to bypass its permissions as root unless told it runs in a sandbox; a
        // client that asks for bypassPermissions asks for exactly that.
        env.insert("IS_SANDBOX".to_string(), "1".to_string());
    }
    if let Some(p) = provider {
        // claude appends /v1/messages itself.
        let base = p.base_url.trim_end_matches('/');
        let base = base.strip_suffix("/v1").unwrap_or(base);
        env.insert("ANTHROPIC_BASE_URL".to_string(), base.to_string());
        env.insert(
            "ANTHROPIC_API_KEY".to_string(),
            key.unwrap_or("none").to_string(),
        );
    }
    env
}

/// Nothing: the variables say it all.
pub(crate) fn files() -> Vec<(PathBuf, String)> {
    Vec::new()
}

/// Reads claude's stream-json lines.
#[derive(Debug, Default)]
pub(crate) struct ClaudeAdapter {
    /// Messages whose text and thinking came as partial deltas.
    streamed: HashSet<String>,
}

/// The text of a tool_result's content: a string, or text blocks.
fn result_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| str_of(b, "text"))
            .collect::<Vec<_>>()
            .join("\n"),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

impl ClaudeAdapter {
    fn stream_event(&mut self, event: &Value) -> Vec<AdapterEvent> {
        match str_of(event, "type").unwrap_or_default() {
            "message_start" => {
                if let Some(id) = event.get("message").and_then(|m| str_of(m, "id")) {
                    self.streamed.insert(id.to_string());
                }
                Vec::new()
            }
            "content_block_delta" => {
                let delta = event.get("delta").cloned().unwrap_or(Value::Null);
                match str_of(&delta, "type").unwrap_or_default() {
                    "text_delta" => str_of(&delta, "text")
                        .map(|t| vec![AdapterEvent::Delta(DeltaKind::Text, t.to_string())])
                        .unwrap_or_default(),
                    "thinking_delta" => str_of(&delta, "thinking")
                        .map(|t| vec![AdapterEvent::Delta(DeltaKind::Thinking, t.to_string())])
                        .unwrap_or_default(),
                    _ => Vec::new(),
                }
            }
            _ => Vec::new(),
        }
    }

    fn assistant(&mut self, line: &Value, message: &Value) -> Vec<AdapterEvent> {
        // An upstream error as a made-up answer: the result that follows carries it.
        if line.get("is_api_error_message").and_then(Value::as_bool) == Some(true) {
            return Vec::new();
        }
        let streamed = str_of(message, "id").is_some_and(|id| self.streamed.contains(id));
        let blocks = message.get("content").and_then(Value::as_array);
        let mut out = Vec::new();
        for b in blocks.into_iter().flatten() {
            match str_of(b, "type").unwrap_or_default() {
                "text" if !streamed => out.extend(
                    str_of(b, "text").map(|t| AdapterEvent::Delta(DeltaKind::Text, t.into())),
                ),
                "thinking" if !streamed => out.extend(
                    str_of(b, "thinking")
                        .map(|t| AdapterEvent::Delta(DeltaKind::Thinking, t.into())),
                ),
                "tool_use" => out.push(AdapterEvent::ToolStart {
                    id: str_of(b, "id").unwrap_or_default().to_string(),
                    name: str_of(b, "name").unwrap_or_default().to_string(),
                    input: b.get("input").cloned().unwrap_or(json!({})),
                }),
                _ => {}
            }
        }
        out
    }

    fn result(&mut self, line: &Value) -> Vec<AdapterEvent> {
        let usage = line.get("usage").cloned().unwrap_or(Value::Null);
        // Anthropic's input_tokens leaves out the cached parts.
        let cache_read = u64_of(&usage, "cache_read_input_tokens");
        let cache_write = u64_of(&usage, "cache_creation_input_tokens");
        let mut out = vec![AdapterEvent::Usage(TokenUsage {
            input_tokens: u64_of(&usage, "input_tokens") + cache_read + cache_write,
            output_tokens: u64_of(&usage, "output_tokens"),
            cache_read_tokens: cache_read,
            cache_write_tokens: cache_write,
        })];
        if let Some(n) = line.get("num_turns").and_then(Value::as_u64) {
            out.push(AdapterEvent::Turns(u32::try_from(n).unwrap_or(u32::MAX)));
        }
        if let Some(cost) = line.get("total_cost_usd").and_then(Value::as_f64) {
            out.push(AdapterEvent::Cost(cost));
        }
        // claude marks a failed run with is_error; the subtype may still say success.
        let failed = line.get("is_error").and_then(Value::as_bool) == Some(true);
        if failed {
            let why = str_of(line, "result")
                .map(str::to_string)
                .or_else(|| {
                    line.get("errors")
                        .and_then(Value::as_array)
                        .map(|e| e.iter().map(|x| result_text(Some(x))).collect::<Vec<_>>())
                        .map(|e| e.join("; "))
                })
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| {
                    format!(
                        "claude ended with {}",
                        str_of(line, "subtype").unwrap_or("an error")
                    )
                });
            out.push(AdapterEvent::Failed(why));
        }
        out.push(AdapterEvent::Finished);
        out
    }
}

/// The `system` lines worth a `processing` event: retries and refused tool calls.
fn system_notice(line: &Value) -> Option<AdapterEvent> {
    let text = match str_of(line, "subtype")? {
        "api_retry" => format!(
            "claude retries its API call ({}/{}, status {})",
            u64_of(line, "attempt"),
            u64_of(line, "max_retries"),
            line.get("error_status")
                .map(Value::to_string)
                .unwrap_or_default()
        ),
        "permission_denied" => str_of(line, "message")?.to_string(),
        _ => return None,
    };
    Some(AdapterEvent::Notice(text))
}

impl Adapter for ClaudeAdapter {
    fn on_line(&mut self, line: &Value) -> Vec<AdapterEvent> {
        match str_of(line, "type").unwrap_or_default() {
            "system" if str_of(line, "subtype") == Some("init") => str_of(line, "session_id")
                .map(|id| vec![AdapterEvent::SessionId(id.to_string())])
                .unwrap_or_default(),
            "stream_event" => match line.get("event") {
                Some(e) => self.stream_event(e),
                None => Vec::new(),
            },
            "assistant" => match line.get("message") {
                Some(m) => self.assistant(line, m),
                None => Vec::new(),
            },
            "system" => system_notice(line).into_iter().collect(),
            "user" => {
                let blocks = line
                    .get("message")
                    .and_then(|m| m.get("content"))
                    .and_then(Value::as_array);
                blocks
                    .into_iter()
                    .flatten()
                    .filter(|b| str_of(b, "type") == Some("tool_result"))
                    .map(|b| AdapterEvent::ToolEnd {
                        id: str_of(b, "tool_use_id").unwrap_or_default().to_string(),
                        content: result_text(b.get("content")),
                        is_error: b.get("is_error").and_then(Value::as_bool) == Some(true),
                    })
                    .collect()
            }
            "result" => self.result(line),
            "control_request" => {
                let request = line.get("request").cloned().unwrap_or(Value::Null);
                match (str_of(line, "request_id"), str_of(&request, "subtype")) {
                    (Some(id), Some("can_use_tool")) => vec![AdapterEvent::PermissionAsk {
                        request_id: id.to_string(),
                        tool_name: str_of(&request, "tool_name")
                            .unwrap_or_default()
                            .to_string(),
                        input: request.get("input").cloned().unwrap_or(json!({})),
                    }],
                    _ => Vec::new(),
                }
            }
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AdapterEvent::*;

    fn feed(a: &mut ClaudeAdapter, lines: &str) -> Vec<AdapterEvent> {
        lines
            .lines()
            .flat_map(|l| a.on_line(&serde_json::from_str(l).unwrap()))
            .collect()
    }

    #[test]
    fn partial_text_is_streamed_once_and_tool_calls_come_from_whole_messages() {
        let mut a = ClaudeAdapter::default();
        let out = feed(
            &mut a,
            r#"{"type":"system","subtype":"init","session_id":"5e7a","model":"claude-sonnet-4-5"}
{"type":"stream_event","event":{"type":"message_start","message":{"id":"msg_1","role":"assistant","content":[]}},"session_id":"5e7a"}
{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}},"session_id":"5e7a"}
{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lo"}},"session_id":"5e7a"}
{"type":"assistant","message":{"id":"msg_1","role":"assistant","content":[{"type":"text","text":"Hello"}]},"session_id":"5e7a"}
{"type":"assistant","message":{"id":"msg_1","role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls"}}]},"session_id":"5e7a"}
{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_1","type":"tool_result","content":"a.txt","is_error":false}]},"session_id":"5e7a"}
{"type":"result","subtype":"success","is_error":false,"num_turns":2,"result":"Hello","session_id":"5e7a","total_cost_usd":0.01,"usage":{"input_tokens":10,"cache_read_input_tokens":5,"output_tokens":7}}"#,
        );
        assert_eq!(
            out,
            vec![
                SessionId("5e7a".into()),
                Delta(DeltaKind::Text, "Hel".into()),
                Delta(DeltaKind::Text, "lo".into()),
                ToolStart {
                    id: "toolu_1".into(),
                    name: "Bash".into(),
                    input: json!({"command": "ls"})
                },
                ToolEnd {
                    id: "toolu_1".into(),
                    content: "a.txt".into(),
                    is_error: false
                },
                Usage(TokenUsage {
                    input_tokens: 15,
                    output_tokens: 7,
                    cache_read_tokens: 5,
                    cache_write_tokens: 0
                }),
                Turns(2),
                Cost(0.01),
                Finished,
            ]
        );
    }

    #[test]
    fn without_partial_messages_whole_blocks_are_the_deltas_and_an_error_result_fails() {
        let mut a = ClaudeAdapter::default();
        let out = feed(
            &mut a,
            r#"{"type":"assistant","message":{"id":"msg_2","content":[{"type":"thinking","thinking":"hmm","signature":"s"},{"type":"text","text":"Hi"}]}}
{"type":"result","subtype":"error_during_execution","is_error":true,"num_turns":1,"session_id":"5e7a","usage":{}}"#,
        );
        assert_eq!(out[0], Delta(DeltaKind::Thinking, "hmm".into()));
        assert_eq!(out[1], Delta(DeltaKind::Text, "Hi".into()));
        assert_eq!(
            out[4],
            Failed("claude ended with error_during_execution".into())
        );
        assert_eq!(out[5], Finished);
    }

    #[test]
    fn an_upstream_error_is_a_failure_not_an_answer_even_with_subtype_success() {
        let mut a = ClaudeAdapter::default();
        let out = feed(
            &mut a,
            r#"{"type":"system","subtype":"api_retry","attempt":1,"max_retries":1,"retry_delay_ms":601,"error_status":429,"error":"rate_limit","session_id":"83a0"}
{"type":"assistant","message":{"id":"58d3","model":"<synthetic>","role":"assistant","type":"message","content":[{"type":"text","text":"API Error: Request rejected (429) · scripted upstream failure 429"}]},"session_id":"83a0","error":"rate_limit","is_api_error_message":true,"api_error_status":429}
{"duration_api_ms":0,"stop_reason":"stop_sequence","session_id":"83a0","total_cost_usd":0,"usage":{"input_tokens":0,"output_tokens":0},"terminal_reason":"api_error","is_error":true,"num_turns":1,"subtype":"success","api_error_status":429,"result":"API Error: Request rejected (429) · scripted upstream failure 429","type":"result"}"#,
        );
        assert_eq!(
            out,
            vec![
                Notice("claude retries its API call (1/1, status 429)".into()),
                Usage(TokenUsage::default()),
                Turns(1),
                Cost(0.0),
                Failed("API Error: Request rejected (429) · scripted upstream failure 429".into()),
                Finished,
            ]
        );
    }

    #[test]
    fn an_interrupted_turn_keeps_the_streamed_text_once() {
        let mut a = ClaudeAdapter::default();
        let out = feed(
            &mut a,
            r#"{"type":"stream_event","event":{"type":"message_start","message":{"id":"msg_10","type":"message","role":"assistant","content":[]}},"session_id":"f3ea"}
{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"tok0 tok1 "}},"session_id":"f3ea"}
{"type":"control_response","response":{"subtype":"success","request_id":"elfgate-interrupt","response":{"still_queued":[]}}}
{"type":"assistant","message":{"id":"msg_10","type":"message","role":"assistant","content":[{"type":"text","text":"tok0 tok1 "}]},"session_id":"f3ea","aborted":true}
{"type":"user","message":{"role":"user","content":[{"type":"text","text":"[Request interrupted by user]"}]},"session_id":"f3ea"}"#,
        );
        assert_eq!(out, vec![Delta(DeltaKind::Text, "tok0 tok1 ".into())]);
    }

    #[test]
    fn a_permission_question_is_asked_and_answered_in_the_control_protocol() {
        let mut a = ClaudeAdapter::default();
        let out = feed(
            &mut a,
            r#"{"type":"control_request","request_id":"e59a0c1f-bbab-49b0-8447-5cb215287dc0","request":{"subtype":"can_use_tool","tool_name":"Bash","display_name":"Bash","input":{"command":"touch made-by-tool && echo done","description":"Print hi"},"description":"Print hi","permission_suggestions":[],"blocked_path":"/tmp/cl/work/made-by-tool","tool_use_id":"toolu_000005"}}"#,
        );
        let input =
            json!({"command": "touch made-by-tool && echo done", "description": "Print hi"});
        assert_eq!(
            out,
            vec![PermissionAsk {
                request_id: "e59a0c1f-bbab-49b0-8447-5cb215287dc0".into(),
                tool_name: "Bash".into(),
                input: input.clone(),
            }]
        );
        let allow: Value =
            serde_json::from_slice(&permission_answer("e59a", &input, None)).unwrap();
        assert_eq!(
            allow,
            json!({"type":"control_response","response":{"subtype":"success","request_id":"e59a",
                "response":{"behavior":"allow","updatedInput":input}}})
        );
        let deny: Value =
            serde_json::from_slice(&permission_answer("e59a", &input, Some("no"))).unwrap();
        assert_eq!(
            deny["response"]["response"],
            json!({"behavior":"deny","message":"no"})
        );
    }
}
