//! Helpers for tinyelf runs scripted with the mock provider's tool calls.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use crate::common::{Daemon, Ev};
use elfgate_mockllm::MockServer;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;

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
