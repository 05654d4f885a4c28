//! Golden tests of the translations, from the fixtures in tests/fixtures/gateway: each front
//! door's request → the internal form, and one run's items → each front door's answers (stream
//! and not). `UPDATE_GOLDEN=1` rewrites the expected files.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly; the helpers outside #[test] functions too"
)]

use super::run::Out;
use super::{Inbound, Stop, anthropic_in, anthropic_out, openai_in, openai_out};
use serde_json::{Value, json};
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gateway")
}

fn fixture(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir().join(name)).unwrap()).unwrap()
}

/// Compares `got` with the expected file, or writes it under UPDATE_GOLDEN=1.
fn golden(name: &str, got: &str) {
    let path = dir().join(name);
    if std::env::var("UPDATE_GOLDEN").is_ok() {
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", path.display()));
    assert_eq!(got, want, "{name} differs");
}

/// The internal form as JSON, for comparing.
fn internal(i: &Inbound) -> String {
    let r = &i.request;
    let v = json!({
        "model": i.model,
        "prompt": i.prompt,
        "stream": i.stream,
        "system": r.system,
        "messages": r.messages.iter().map(|m| json!({"role": m.role, "blocks": m.blocks}))
            .collect::<Vec<_>>(),
        "temperature": r.temperature,
        "maxTokens": r.max_tokens,
        "thinking": r.thinking,
        "tools": r.tools.iter().map(|t| json!({"name": t.name, "description": t.description,
            "inputSchema": t.input_schema})).collect::<Vec<_>>(),
        "toolChoice": r.tool_choice.as_ref().map(|c| format!("{c:?}")),
        "stop": r.stop,
        "responseFormat": r.response_format,
        "passthrough": r.passthrough.as_ref()
            .map(|(kind, f)| json!({"kind": kind, "keys": f.keys().collect::<Vec<_>>()})),
    });
    serde_json::to_string_pretty(&v).unwrap() + "\n"
}

fn items() -> Vec<Out> {
    fixture("run_items.json")
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            if let Some(t) = i["text"].as_str() {
                Out::Text(t.into())
            } else if let Some(t) = i["thinking"].as_str() {
                Out::Thinking(t.into())
            } else if let Some(s) = i["signature"].as_str() {
                Out::Signature(s.into())
            } else if let Some(c) = i.get("toolCall") {
                Out::ToolCall {
                    id: c["id"].as_str().unwrap().into(),
                    name: c["name"].as_str().unwrap().into(),
                    input: c["input"].clone(),
                }
            } else {
                let e = &i["end"];
                Out::End {
                    stop: match e["stop"].as_str().unwrap() {
                        "tool_calls" => Stop::ToolCalls,
                        "length" => Stop::Length,
                        _ => Stop::End,
                    },
                    stop_sequence: e["stopSequence"].as_str().map(str::to_string),
                    input_tokens: e["inputTokens"].as_u64().unwrap(),
                    output_tokens: e["outputTokens"].as_u64().unwrap(),
                    cost_usd: None,
                }
            }
        })
        .collect()
}

#[test]
fn openai_request_to_internal() {
    let (inbound, include_usage) = openai_in::parse(&fixture("openai_request.json")).unwrap();
    assert!(include_usage);
    golden("openai_request.internal.json", &internal(&inbound));
}

#[test]
fn anthropic_request_to_internal() {
    let inbound = anthropic_in::parse(&fixture("anthropic_request.json")).unwrap();
    golden("anthropic_request.internal.json", &internal(&inbound));
}

#[test]
fn run_items_to_openai_answers() {
    let items = items();
    let (end, before) = items.split_last().unwrap();
    let body = openai_out::completion("chatcmpl-1", "mock/gpt-x", 1700000000, before, end);
    golden(
        "openai_completion.json",
        &(serde_json::to_string_pretty(&body).unwrap() + "\n"),
    );
    let mut w =
        openai_out::ChunkWriter::new("chatcmpl-1".into(), "mock/gpt-x".into(), 1700000000, true);
    let sse: String = items.iter().map(|i| w.frames(i)).collect();
    golden("openai_stream.sse", &sse);
}

#[test]
fn a_named_stop_sequence_reaches_the_anthropic_answers_only() {
    let items = [
        Out::Text("It is".into()),
        Out::End {
            stop: Stop::End,
            stop_sequence: Some("END".into()),
            input_tokens: 1,
            output_tokens: 2,
            cost_usd: None,
        },
    ];
    let body = anthropic_out::message_json("msg_1", "m", &items[..1], &items[1]);
    assert_eq!(body["stop_reason"], "stop_sequence");
    assert_eq!(body["stop_sequence"], "END");
    let mut w = anthropic_out::EventWriter::new("msg_1".into(), "m".into());
    let sse: String = items.iter().map(|i| w.frames(i)).collect();
    assert!(
        sse.contains(r#""delta":{"stop_reason":"stop_sequence","stop_sequence":"END"}"#),
        "{sse}"
    );
    let body = openai_out::completion("c", "m", 1, &items[..1], &items[1]);
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
}

#[test]
fn run_items_to_anthropic_answers() {
    let items = items();
    let (end, before) = items.split_last().unwrap();
    let body = anthropic_out::message_json("msg_1", "mock-anthropic/claude-x", before, end);
    golden(
        "anthropic_message.json",
        &(serde_json::to_string_pretty(&body).unwrap() + "\n"),
    );
    let mut w = anthropic_out::EventWriter::new("msg_1".into(), "mock-anthropic/claude-x".into());
    let sse: String = items.iter().map(|i| w.frames(i)).collect();
    golden("anthropic_stream.sse", &sse);
}
