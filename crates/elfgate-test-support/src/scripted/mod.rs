//! Helpers for tinyelf runs scripted with the mock provider's tool calls.

pub mod events;
pub mod procs;
pub mod transcript;

use crate::common::{Daemon, Ev, poll_until};
use elfgate_mockllm::MockServer;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Registers a script of mock responses.
pub fn script(mock: &MockServer, name: &str, responses: Value) {
    mock.set_script(
        name,
        serde_json::from_value(json!({ "responses": responses })).unwrap(),
    );
}

/// One scripted tool call.
pub fn call(id: &str, name: &str, args: Value) -> Value {
    json!({"id": id, "name": name, "arguments": args.to_string()})
}

/// A tinyelf session body; `extra`'s keys are merged in.
pub fn session(prompt: &str, model: &str, project: &Path, extra: Value) -> Value {
    let mut v = json!({
        "engine": "tinyelf",
        "prompt": prompt,
        "model": model,
        "projectPath": project.display().to_string(),
    });
    if let Value::Object(m) = extra {
        for (k, x) in m {
            v[k] = x;
        }
    }
    v
}

/// Runs one tool of a session outside a turn: (status, answer).
pub async fn tool_run(d: &Daemon, sid: &str, name: &str, arguments: Value) -> (u16, Value) {
    d.post(
        &format!("/v1/sessions/{sid}/tools/{name}"),
        json!({ "arguments": arguments }),
    )
    .await
}

/// Starts a session and reads its events up to the run's `complete`.
pub async fn run(d: &Daemon, body: Value) -> (String, String, Vec<Ev>) {
    let (sid, run) = d.create(body).await;
    let evs = d.all_events_until_complete_of(&sid, &run).await;
    (sid, run, evs)
}

/// The events of one type.
pub fn of<'a>(evs: &'a [Ev], kind: &str) -> Vec<&'a Ev> {
    evs.iter().filter(|e| e.event == kind).collect()
}

/// The messages of the `processing` events.
pub fn processing_notes(evs: &[Ev]) -> Vec<String> {
    of(evs, "processing")
        .iter()
        .map(|e| e.data["message"].as_str().unwrap().to_string())
        .collect()
}

/// The finish reason of the `complete` event that ends `evs`.
pub fn finish_of(evs: &[Ev]) -> String {
    let c = evs.last().unwrap();
    assert_eq!(c.event, "complete");
    c.data["finishReason"].as_str().unwrap().to_string()
}

/// toolCallEnd (status, content) by tool_use_id.
pub fn ends_by_id(evs: &[Ev]) -> BTreeMap<String, (String, String)> {
    of(evs, "toolCallEnd")
        .iter()
        .map(|e| {
            (
                e.data["block"]["tool_use_id"].as_str().unwrap().to_string(),
                (
                    e.data["status"].as_str().unwrap().to_string(),
                    e.data["block"]["content"].as_str().unwrap().to_string(),
                ),
            )
        })
        .collect()
}

/// A project directory with one small file, a.txt.
pub fn project() -> PathBuf {
    let dir = tempfile::tempdir().unwrap().keep();
    std::fs::write(dir.join("a.txt"), "hello world\nsecond line\nthird line\n").unwrap();
    dir
}

/// A daemon whose config has `extra_toml` appended.
pub fn daemon_with(mock: &MockServer, extra_toml: &str) -> Daemon {
    Daemon::start(
        mock,
        crate::common::Opts {
            extra_toml: extra_toml.into(),
            ..Default::default()
        },
    )
}

/// Session fields for bypassPermissions; `extra`'s keys are merged in.
pub fn bypass(extra: Value) -> Value {
    let mut v = json!({"permissionMode": "bypassPermissions"});
    if let Value::Object(m) = extra {
        for (k, x) in m {
            v[k] = x;
        }
    }
    v
}

/// Sends a prompt to an existing session and reads its events up to that run's `complete`
/// (the events of earlier runs included).
pub async fn resume(d: &Daemon, sid: &str, body: Value) -> (String, Vec<Ev>) {
    let run = d.send(sid, body).await;
    let evs = d.events(sid, None).await.until_complete(&run).await;
    (run, evs)
}

/// toolCallEnd (status, content) in the order the calls ended.
pub fn ends(evs: &[Ev]) -> Vec<(String, String)> {
    of(evs, "toolCallEnd")
        .iter()
        .map(|e| {
            (
                e.data["status"].as_str().unwrap().to_string(),
                e.data["block"]["content"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The session's stored messages.
pub async fn stored(d: &Daemon, sid: &str) -> Vec<Value> {
    let (s, v) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    assert_eq!(s, 200);
    v["messages"].as_array().unwrap().clone()
}

pub fn roles(msgs: &[Value]) -> Vec<&str> {
    msgs.iter().map(|m| m["role"].as_str().unwrap()).collect()
}

/// The bodies of the requests the mock received for `model`, oldest first.
pub fn bodies_for(mock: &MockServer, model: &str) -> Vec<Value> {
    mock.requests()
        .into_iter()
        .filter(|r| r.model == model)
        .map(|r| r.body)
        .collect()
}

/// The names of the tools an OpenAI request offered.
pub fn offered_tools(body: &Value) -> Vec<&str> {
    body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect()
}

/// Waits (bounded) until a file that a tool or hook under test writes has `min_lines` non-blank
/// lines; returns its text.
pub async fn wait_for_file(path: &Path, min_lines: usize) -> String {
    poll_until(
        &format!("{} with {min_lines} lines", path.display()),
        || {
            std::fs::read_to_string(path)
                .ok()
                .filter(|s| s.lines().filter(|l| !l.trim().is_empty()).count() >= min_lines)
        },
    )
    .await
}

/// A scripted call that spawns a background sub-agent labelled `label`.
pub fn spawn_bg(id: &str, label: &str) -> Value {
    call(
        id,
        "spawn",
        json!({"task": format!("job {label}"), "label": label, "background": true}),
    )
}

/// The texts of a session's stored user messages, in order.
pub async fn user_prompts(d: &Daemon, sid: &str) -> Vec<String> {
    let (_, m) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    m["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["blocks"][0]["text"].as_str().unwrap().to_string())
        .collect()
}
