//! The tool list tinyelf sends upstream: every tool with its parameters' schema, in both wire
//! formats. The schemas are derived from the tools' argument structs; this pins what the model
//! is told.

use crate::common;
use crate::scripted;

use common::{Daemon, Opts};
use elfgate_mockllm::MockServer;
use scripted::{run, session};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// name -> parameters schema of the tools in a recorded request body.
fn tools_of(body: &Value) -> BTreeMap<String, Value> {
    body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| match t.get("function") {
            // OpenAI
            Some(f) => (f["name"].as_str().unwrap().into(), f["parameters"].clone()),
            // Anthropic
            None => (
                t["name"].as_str().unwrap().into(),
                t["input_schema"].clone(),
            ),
        })
        .collect()
}

#[tokio::test]
async fn every_tool_reaches_the_provider_with_its_parameters() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = tempfile::tempdir().unwrap().keep();
    for provider in ["mock", "mock-anthropic"] {
        let model = format!("mock:tokens=1,id={provider}");
        run(
            &d,
            session("x", &model, &dir, json!({"providerId": provider})),
        )
        .await;
        let body = mock
            .requests()
            .into_iter()
            .find(|r| r.model == model)
            .unwrap()
            .body;
        let tools = tools_of(&body);
        assert_eq!(
            tools.keys().collect::<Vec<_>>(),
            [
                "ask_user",
                "edit_file",
                "glob",
                "grep",
                "list_dir",
                "list_sessions",
                "read_file",
                "read_session_messages",
                "shell",
                "spawn",
                "web_fetch",
                "write_file"
            ],
            "{provider}"
        );
        for (name, p) in &tools {
            assert_eq!(p["type"], "object", "{provider} {name}: {p}");
            let props = p["properties"].as_object().unwrap();
            assert!(!props.is_empty(), "{provider} {name}: {p}");
            for r in p["required"].as_array().into_iter().flatten() {
                assert!(props.contains_key(r.as_str().unwrap()), "{name}: {p}");
            }
            for (k, prop) in props {
                assert!(
                    prop["type"].is_string(),
                    "{name}.{k}: one type, no null: {p}"
                );
            }
        }
        let required = |name: &str| tools[name]["required"].clone();
        assert_eq!(required("read_file"), json!(["path"]));
        assert_eq!(
            required("edit_file"),
            json!(["path", "old_string", "new_string"])
        );
        assert_eq!(required("spawn"), json!(["task"]));
        assert_eq!(required("read_session_messages"), json!(["session_id"]));
        assert_eq!(tools["list_dir"].get("required"), None);
        assert_eq!(
            tools["shell"]["properties"]["command"],
            json!({"type": "string", "description": "The bash command line"})
        );
        assert_eq!(
            tools["read_file"]["properties"]["path"]["description"],
            "File path, relative to the project"
        );
        assert_eq!(
            tools["spawn"]["properties"]["tools"],
            json!({"type": "array", "items": {"type": "string"},
                   "description": "Tool names it may use (default: yours, without spawn)"})
        );
        assert_eq!(
            tools["list_sessions"]["properties"]["limit"],
            json!({"type": "integer", "minimum": 1, "maximum": 200})
        );
        assert_eq!(
            tools["grep"]["properties"]
                .as_object()
                .unwrap()
                .keys()
                .collect::<Vec<_>>(),
            ["case_insensitive", "glob", "max_results", "path", "pattern"]
        );
    }
}
