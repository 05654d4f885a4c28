//! gemini-cli: `gemini --prompt=... --output-format stream-json`. `init` carries the session id
//! that `-r` takes; assistant `message` lines the text (as deltas; the model's thoughts are not
//! printed); `tool_use` / `tool_result` the tool calls; `error` warnings and errors; `result` the
//! stats and whether the run failed. An interrupted gemini prints nothing more and exits 0.

use super::adapter::{Adapter, AdapterEvent, CliProvider, Invocation, str_of, u64_of};
use elfgate_core::{DeltaKind, PermissionMode, TokenUsage};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub(crate) fn args(inv: &Invocation<'_>, extra: &[String]) -> Vec<String> {
    let mut a: Vec<String> = vec![
        // One argument: a prompt that starts with a dash is not taken for a flag.
        format!("--prompt={}", inv.prompt),
        "--output-format".to_string(),
        "stream-json".to_string(),
        "--skip-trust".to_string(),
        "--approval-mode".to_string(),
        approval_mode(inv.permission_mode).to_string(),
    ];
    if let Some(m) = inv.model {
        a.extend(["-m".to_string(), m.to_string()]);
    }
    if let Some(id) = inv.resume {
        a.extend(["-r".to_string(), id.to_string()]);
    }
    a.extend(extra.iter().cloned());
    a
}

fn approval_mode(m: PermissionMode) -> &'static str {
    match m {
        PermissionMode::Default => "default",
        PermissionMode::AcceptEdits => "auto_edit",
        PermissionMode::BypassPermissions => "yolo",
        PermissionMode::Plan => "plan",
    }
}

pub(crate) fn env(provider: Option<&CliProvider>, key: Option<&str>) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    // Its default launcher re-executes itself in a child that it orphans when killed, and
    // ignores SIGINT and SIGTERM.
    env.insert("GEMINI_CLI_NO_RELAUNCH".to_string(), "true".to_string());
    if let Some(p) = provider {
        env.insert(
            "GOOGLE_GEMINI_BASE_URL".to_string(),
            p.base_url.trim_end_matches('/').to_string(),
        );
        env.insert(
            "GEMINI_API_KEY".to_string(),
            key.unwrap_or("none").to_string(),
        );
    }
    env
}

/// HOME/.gemini/settings.json: the API-key auth (without it the CLI refuses a base URL).
pub(crate) fn files() -> Vec<(PathBuf, String)> {
    let settings = json!({
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
        "privacy": {"usageStatisticsEnabled": false},
        "telemetry": {"enabled": false},
    });
    vec![(
        Path::new(".gemini").join("settings.json"),
        format!("{settings:#}\n"),
    )]
}

/// What gemini's documented exit codes mean.
pub(crate) fn exit_meaning(code: i32) -> Option<&'static str> {
    Some(match code {
        41 => "authentication failed",
        42 => "invalid input (prompt or arguments)",
        44 => "sandbox error",
        52 => "invalid configuration",
        53 => "the session's turn limit was reached",
        54 => "a tool failed",
        130 => "cancelled",
        _ => return None,
    })
}

/// Reads gemini's stream-json lines.
#[derive(Debug, Default)]
pub(crate) struct GeminiAdapter {
    turns: u32,
}

impl Adapter for GeminiAdapter {
    fn on_line(&mut self, line: &Value) -> Vec<AdapterEvent> {
        match str_of(line, "type").unwrap_or_default() {
            "init" => str_of(line, "session_id")
                .map(|id| vec![AdapterEvent::SessionId(id.to_string())])
                .unwrap_or_default(),
            // Its reasoning is not printed at all.
            "message" if str_of(line, "role") == Some("assistant") => str_of(line, "content")
                .map(|t| vec![AdapterEvent::Delta(DeltaKind::Text, t.to_string())])
                .unwrap_or_default(),
            "message" if str_of(line, "role") == Some("user") => {
                self.turns += 1;
                vec![AdapterEvent::Turns(self.turns)]
            }
            "tool_use" => vec![AdapterEvent::ToolStart {
                id: str_of(line, "tool_id").unwrap_or_default().to_string(),
                name: str_of(line, "tool_name").unwrap_or_default().to_string(),
                input: line.get("parameters").cloned().unwrap_or(json!({})),
            }],
            "tool_result" => {
                let is_error = str_of(line, "status") != Some("success");
                let content = match (str_of(line, "output"), line.get("error")) {
                    (Some(o), _) if !is_error => o.to_string(),
                    (_, Some(e)) => str_of(e, "message").unwrap_or_default().to_string(),
                    (o, None) => o.unwrap_or_default().to_string(),
                };
                vec![AdapterEvent::ToolEnd {
                    id: str_of(line, "tool_id").unwrap_or_default().to_string(),
                    content,
                    is_error,
                }]
            }
            "error" => vec![AdapterEvent::Notice(
                str_of(line, "message")
                    .unwrap_or("gemini reported an error")
                    .to_string(),
            )],
            "result" => {
                let stats = line.get("stats").cloned().unwrap_or(Value::Null);
                // input_tokens counts the cached ones (`cached`); `input` is the rest.
                let mut out = vec![AdapterEvent::Usage(TokenUsage {
                    input_tokens: u64_of(&stats, "input_tokens").max(u64_of(&stats, "input")),
                    output_tokens: u64_of(&stats, "output_tokens"),
                    cache_read_tokens: u64_of(&stats, "cached"),
                    cache_write_tokens: 0,
                })];
                if str_of(line, "status") != Some("success") {
                    let why = line
                        .get("error")
                        .and_then(|e| str_of(e, "message"))
                        .unwrap_or("gemini reported a failed run");
                    out.push(AdapterEvent::Failed(why.to_string()));
                }
                out.push(AdapterEvent::Finished);
                out
            }
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AdapterEvent::*;

    #[test]
    fn stream_json_lines_map_to_events() {
        let mut a = GeminiAdapter::default();
        let out: Vec<AdapterEvent> = r#"{"type":"init","timestamp":"2026-12-01T10:00:00.000Z","session_id":"c0ffee","model":"gemini-2.5-flash"}
{"type":"message","timestamp":"2026-12-01T10:00:00.001Z","role":"user","content":"list files"}
{"type":"message","timestamp":"2026-12-01T10:00:00.100Z","role":"assistant","content":"Let me look.","delta":true}
{"type":"tool_use","timestamp":"2026-12-01T10:00:00.200Z","tool_name":"run_shell_command","tool_id":"run_shell_command-1","parameters":{"command":"ls"}}
{"type":"tool_result","timestamp":"2026-12-01T10:00:00.300Z","tool_id":"run_shell_command-1","status":"success","output":"a.txt"}
{"type":"result","timestamp":"2026-12-01T10:00:00.400Z","status":"success","stats":{"total_tokens":30,"input_tokens":20,"output_tokens":10,"cached":4,"input":16,"duration_ms":400,"tool_calls":1}}"#
            .lines()
            .flat_map(|l| a.on_line(&serde_json::from_str(l).unwrap()))
            .collect();
        assert_eq!(
            out,
            vec![
                SessionId("c0ffee".into()),
                Turns(1),
                Delta(DeltaKind::Text, "Let me look.".into()),
                ToolStart {
                    id: "run_shell_command-1".into(),
                    name: "run_shell_command".into(),
                    input: json!({"command": "ls"})
                },
                ToolEnd {
                    id: "run_shell_command-1".into(),
                    content: "a.txt".into(),
                    is_error: false
                },
                Usage(TokenUsage {
                    input_tokens: 20,
                    output_tokens: 10,
                    cache_read_tokens: 4,
                    cache_write_tokens: 0
                }),
                Finished,
            ]
        );
    }

    #[test]
    fn documented_exit_codes_are_named() {
        assert_eq!(
            exit_meaning(42),
            Some("invalid input (prompt or arguments)")
        );
        assert_eq!(
            exit_meaning(53),
            Some("the session's turn limit was reached")
        );
        assert_eq!(exit_meaning(1), None);
    }

    #[test]
    fn an_error_result_fails_the_run() {
        let mut a = GeminiAdapter::default();
        let out = a.on_line(&json!({"type":"result","status":"error",
            "error":{"type":"FatalTurnLimitedError","message":"turn limit"},"stats":{}}));
        assert_eq!(out[1], Failed("turn limit".into()));
    }
}
