//! codex: `codex exec --json`. It prints whole items (no text deltas): `thread.started` carries
//! the thread id that `exec resume` takes, `item.started`/`item.completed` the agent's messages,
//! reasoning and tool work, `turn.completed` the usage (the thread's totals so far) and
//! `turn.failed` a failed turn. Top-level `error` lines are retries and warnings, not failures.

use super::adapter::{Adapter, AdapterEvent, CliProvider, Invocation, str_of, u64_of};
use elfgate_core::{DeltaKind, PermissionMode, TokenUsage};
use elfgate_llm::ProviderKind;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

/// The directory under the backend's home that is its CODEX_HOME.
const CODEX_HOME: &str = ".codex";

/// `codex exec` with the engine's flags, the extra ones, then `resume <id>` and the prompt.
pub(crate) fn args(inv: &Invocation<'_>, extra: &[String]) -> Vec<String> {
    let mut a: Vec<String> = ["exec", "--json", "--skip-git-repo-check"]
        .map(String::from)
        .to_vec();
    if let Some(p) = inv.provider_name {
        // The providers are all in config.toml; a run picks its own.
        a.extend(["-c".to_string(), format!("model_provider={}", toml_str(p))]);
    }
    match inv.permission_mode {
        PermissionMode::Plan => a.extend(["--sandbox", "read-only"].map(String::from)),
        PermissionMode::Default | PermissionMode::AcceptEdits => {
            a.extend(["--sandbox", "workspace-write"].map(String::from));
        }
        PermissionMode::BypassPermissions => {
            a.push("--dangerously-bypass-approvals-and-sandbox".to_string());
        }
    }
    if let Some(m) = inv.model {
        a.extend(["-m".to_string(), m.to_string()]);
    }
    a.extend(extra.iter().cloned());
    if let Some(id) = inv.resume {
        a.extend(["resume".to_string(), id.to_string()]);
    }
    // After `--`, a prompt that starts with a dash is not taken for a flag.
    a.extend(["--".to_string(), inv.prompt.to_string()]);
    a
}

/// The daemon's door as codex's provider, given on the command line (`-c`, a TOML inline
/// table) rather than in config.toml, whose provider list is written before the daemon listens;
/// and codex's own web search off when the provider behind the door cannot search.
pub(crate) fn proxy_args(name: &str, door: &CliProvider, searches: bool) -> Vec<String> {
    let mut a = vec![
        "-c".to_string(),
        format!(
            "model_providers.{name}={{name={}, base_url={}, env_key={}, wire_api=\"responses\"}}",
            toml_str(name),
            toml_str(&door.base_url),
            toml_str(&key_var(door)),
        ),
    ];
    if !searches {
        a.extend(["-c".to_string(), "web_search=\"disabled\"".to_string()]);
    }
    a
}

/// A TOML basic string.
fn toml_str(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

pub(crate) fn env(
    home: &Path,
    provider: Option<&CliProvider>,
    key: Option<&str>,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    env.insert(
        "CODEX_HOME".to_string(),
        home.join(CODEX_HOME).display().to_string(),
    );
    if let Some(p) = provider {
        env.insert(key_var(p), key.unwrap_or("none").to_string());
    }
    env
}

/// The variable codex reads the provider's key from: the provider's own variable name, or one of
/// the engine's for a provider without a key (codex wants one to be set).
fn key_var(p: &CliProvider) -> String {
    p.api_key_env
        .clone()
        .unwrap_or_else(|| "CODEX_PROVIDER_API_KEY".to_string())
}

/// CODEX_HOME/config.toml: every provider codex can speak to, no update check.
pub(crate) fn files(providers: &BTreeMap<String, CliProvider>) -> Vec<(PathBuf, String)> {
    let mut toml = String::from("check_for_update_on_startup = false\n");
    for (name, p) in providers
        .iter()
        .filter(|(_, p)| p.kind == ProviderKind::OpenaiResponses)
    {
        toml.push_str(&format!(
            "\n[model_providers.{}]\nname = {}\nbase_url = {}\nenv_key = {}\nwire_api = \"responses\"\n",
            toml_str(name),
            toml_str(name),
            toml_str(p.base_url.trim_end_matches('/')),
            toml_str(&key_var(p)),
        ));
    }
    vec![(Path::new(CODEX_HOME).join("config.toml"), toml)]
}

/// Reads `codex exec --json` lines.
#[derive(Debug, Default)]
pub(crate) struct CodexAdapter {
    /// Items whose start was reported.
    started: HashSet<String>,
    turns: u32,
    /// The kind of the last whole text item, if nothing came after it: a second message of the
    /// same kind is a new paragraph of the same block, not the same sentence.
    last_text: Option<DeltaKind>,
}

impl CodexAdapter {
    fn text(&mut self, kind: DeltaKind, text: &str) -> Vec<AdapterEvent> {
        let text = match self.last_text.replace(kind) {
            Some(k) if k == kind => format!("\n\n{text}"),
            _ => text.to_string(),
        };
        vec![AdapterEvent::Delta(kind, text)]
    }

    fn item(&mut self, item: &Value, completed: bool) -> Vec<AdapterEvent> {
        let id = str_of(item, "id").unwrap_or_default().to_string();
        let kind = str_of(item, "type").unwrap_or_default();
        let text = str_of(item, "text").unwrap_or_default();
        let mut out = Vec::new();
        let (name, input) = match kind {
            "agent_message" if completed => return self.text(DeltaKind::Text, text),
            "reasoning" if completed => return self.text(DeltaKind::Thinking, text),
            "error" if completed => return vec![AdapterEvent::Notice(text_or_message(item))],
            "command_execution" => (
                "command_execution",
                json!({"command": item.get("command").cloned().unwrap_or(Value::Null)}),
            ),
            "file_change" => (
                "file_change",
                json!({"changes": item.get("changes").cloned().unwrap_or(Value::Null)}),
            ),
            "mcp_tool_call" => (
                "mcp_tool_call",
                json!({
                    "server": item.get("server").cloned().unwrap_or(Value::Null),
                    "tool": item.get("tool").cloned().unwrap_or(Value::Null),
                    "arguments": item.get("arguments").cloned().unwrap_or(Value::Null),
                }),
            ),
            "web_search" => (
                "web_search",
                json!({"query": item.get("query").cloned().unwrap_or(Value::Null)}),
            ),
            "todo_list" => (
                "todo_list",
                json!({"items": item.get("items").cloned().unwrap_or(Value::Null)}),
            ),
            _ => return out,
        };
        self.last_text = None;
        if self.started.insert(id.clone()) {
            out.push(AdapterEvent::ToolStart {
                id: id.clone(),
                name: name.to_string(),
                input,
            });
        }
        if completed {
            let (content, is_error) = tool_result(kind, item);
            out.push(AdapterEvent::ToolEnd {
                id,
                content,
                is_error,
            });
        }
        out
    }
}

fn text_or_message(v: &Value) -> String {
    str_of(v, "message")
        .or_else(|| str_of(v, "text"))
        .unwrap_or("codex reported an error")
        .to_string()
}

/// The result text of a finished tool item and whether it failed.
fn tool_result(kind: &str, item: &Value) -> (String, bool) {
    let failed = str_of(item, "status") == Some("failed");
    match kind {
        "command_execution" => {
            let code = item.get("exit_code").and_then(Value::as_i64);
            let out = str_of(item, "aggregated_output").unwrap_or_default();
            (out.to_string(), failed || code.is_some_and(|c| c != 0))
        }
        "file_change" => {
            let changes = item.get("changes").and_then(Value::as_array);
            let lines: Vec<String> = changes
                .into_iter()
                .flatten()
                .map(|c| {
                    format!(
                        "{} {}",
                        str_of(c, "kind").unwrap_or("change"),
                        str_of(c, "path").unwrap_or("?")
                    )
                })
                .collect();
            (lines.join("\n"), failed)
        }
        "mcp_tool_call" => match item.get("error").filter(|e| !e.is_null()) {
            Some(e) => (text_or_message(e), true),
            None => (
                item.get("result").map(Value::to_string).unwrap_or_default(),
                failed,
            ),
        },
        "todo_list" => {
            let items = item.get("items").and_then(Value::as_array);
            let lines: Vec<String> = items
                .into_iter()
                .flatten()
                .map(|i| {
                    let done = i.get("completed").and_then(Value::as_bool) == Some(true);
                    let mark = if done { "[x]" } else { "[ ]" };
                    format!("{mark} {}", str_of(i, "text").unwrap_or_default())
                })
                .collect();
            (lines.join("\n"), false)
        }
        _ => (String::new(), failed),
    }
}

impl Adapter for CodexAdapter {
    fn on_line(&mut self, line: &Value) -> Vec<AdapterEvent> {
        match str_of(line, "type").unwrap_or_default() {
            "thread.started" => str_of(line, "thread_id")
                .map(|id| vec![AdapterEvent::SessionId(id.to_string())])
                .unwrap_or_default(),
            "turn.started" => {
                self.turns += 1;
                vec![AdapterEvent::Turns(self.turns)]
            }
            "item.started" | "item.updated" => match line.get("item") {
                Some(item) => self.item(item, false),
                None => Vec::new(),
            },
            "item.completed" => match line.get("item") {
                Some(item) => self.item(item, true),
                None => Vec::new(),
            },
            "turn.completed" => {
                let usage = line.get("usage").cloned().unwrap_or(Value::Null);
                vec![
                    // OpenAI's input_tokens already counts the cached ones.
                    AdapterEvent::Usage(TokenUsage {
                        input_tokens: u64_of(&usage, "input_tokens"),
                        output_tokens: u64_of(&usage, "output_tokens"),
                        cache_read_tokens: u64_of(&usage, "cached_input_tokens"),
                        cache_write_tokens: u64_of(&usage, "cache_write_input_tokens"),
                    }),
                    AdapterEvent::Finished,
                ]
            }
            "turn.failed" => {
                let error = line.get("error").cloned().unwrap_or(Value::Null);
                vec![AdapterEvent::Failed(text_or_message(&error))]
            }
            "error" => vec![AdapterEvent::Notice(text_or_message(line))],
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AdapterEvent::*;

    fn feed(lines: &str) -> Vec<AdapterEvent> {
        let mut a = CodexAdapter::default();
        lines
            .lines()
            .flat_map(|l| a.on_line(&serde_json::from_str(l).unwrap()))
            .collect()
    }

    #[test]
    fn a_tool_call_and_its_answer_as_codex_prints_them() {
        let out = feed(
            r#"{"type":"thread.started","thread_id":"01a230f7-2aab-7d61-9253-9eb1c2624373"}
{"type":"item.completed","item":{"id":"item_0","type":"error","message":"Model metadata for `gpt-5-codex` not found. Defaulting to fallback metadata; this can degrade performance and cause issues."}}
{"type":"turn.started"}
{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"/bin/bash -lc 'echo hi'","aggregated_output":"","exit_code":null,"status":"in_progress"}}
{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"/bin/bash -lc 'echo hi'","aggregated_output":"hi\n","exit_code":0,"status":"completed"}}
{"type":"item.completed","item":{"id":"item_2","type":"agent_message","text":"The command printed hi. Done."}}
{"type":"turn.completed","usage":{"input_tokens":240,"cached_input_tokens":40,"cache_write_input_tokens":0,"output_tokens":60,"reasoning_output_tokens":0}}"#,
        );
        assert_eq!(
            out,
            vec![
                SessionId("01a230f7-2aab-7d61-9253-9eb1c2624373".into()),
                Notice("Model metadata for `gpt-5-codex` not found. Defaulting to fallback metadata; this can degrade performance and cause issues.".into()),
                Turns(1),
                ToolStart {
                    id: "item_1".into(),
                    name: "command_execution".into(),
                    input: json!({"command": "/bin/bash -lc 'echo hi'"}),
                },
                ToolEnd { id: "item_1".into(), content: "hi\n".into(), is_error: false },
                Delta(DeltaKind::Text, "The command printed hi. Done.".into()),
                Usage(TokenUsage {
                    input_tokens: 240,
                    output_tokens: 60,
                    cache_read_tokens: 40,
                    cache_write_tokens: 0
                }),
                Finished,
            ]
        );
    }

    #[test]
    fn reasoning_is_thinking_and_a_failed_turn_fails_while_retries_are_notices() {
        let out = feed(
            r#"{"type":"item.completed","item":{"id":"item_1","type":"reasoning","text":"Let me think about this carefully before answering."}}
{"type":"error","message":"Reconnecting... 1/5 (We’re currently experiencing high demand, which may cause temporary errors.)"}
{"type":"turn.failed","error":{"message":"exceeded retry limit, last status: 429 Too Many Requests"}}"#,
        );
        assert_eq!(
            out,
            vec![
                Delta(
                    DeltaKind::Thinking,
                    "Let me think about this carefully before answering.".into()
                ),
                Notice("Reconnecting... 1/5 (We’re currently experiencing high demand, which may cause temporary errors.)".into()),
                Failed("exceeded retry limit, last status: 429 Too Many Requests".into()),
            ]
        );
    }

    #[test]
    fn two_messages_in_a_row_are_two_paragraphs() {
        let out = feed(
            r#"{"type":"item.completed","item":{"id":"a","type":"agent_message","text":"Looking."}}
{"type":"item.completed","item":{"id":"b","type":"agent_message","text":"Found it."}}
{"type":"item.completed","item":{"id":"c","type":"web_search","query":"x"}}
{"type":"item.completed","item":{"id":"d","type":"agent_message","text":"Done."}}"#,
        );
        assert_eq!(out[0], Delta(DeltaKind::Text, "Looking.".into()));
        assert_eq!(out[1], Delta(DeltaKind::Text, "\n\nFound it.".into()));
        assert_eq!(out[4], Delta(DeltaKind::Text, "Done.".into()));
    }

    #[test]
    fn a_failed_command_and_a_file_change_are_tool_results() {
        let out = feed(
            r#"{"type":"item.completed","item":{"id":"c","type":"command_execution","command":"false","aggregated_output":"","exit_code":1,"status":"failed"}}
{"type":"item.completed","item":{"id":"f","type":"file_change","changes":[{"path":"a.txt","kind":"add"}],"status":"completed"}}"#,
        );
        assert!(matches!(&out[1], ToolEnd { is_error: true, .. }));
        assert_eq!(
            out[3],
            ToolEnd {
                id: "f".into(),
                content: "add a.txt".into(),
                is_error: false
            }
        );
    }

    #[test]
    fn resume_comes_after_the_flags_and_the_prompt_after_a_double_dash() {
        let inv = Invocation {
            prompt: "-x",
            model: Some("gpt-5.5"),
            resume: Some("t1"),
            permission_mode: PermissionMode::Plan,
            provider_name: Some("mock"),
        };
        assert_eq!(
            args(&inv, &["--ephemeral".to_string()]).join(" "),
            "exec --json --skip-git-repo-check -c model_provider=\"mock\" --sandbox read-only \
             -m gpt-5.5 --ephemeral resume t1 -- -x"
        );
    }
}
