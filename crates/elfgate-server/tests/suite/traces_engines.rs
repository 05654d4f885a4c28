//! Spans of the engines' own steps, read back from a real trace store (Arize Phoenix): tinyelf's
//! compaction of its context (`compact_context`, its summary call beneath it) and the cli
//! engine's runs (`invoke_agent {backend}`) with the tool calls their CLI reported as
//! `execute_tool` children.

use crate::common;
use crate::scripted;
use crate::suite::cli_engine::{CliDaemon, cli_opts, complete};
use crate::suite::traces::{named, telemetry_toml, trace_id_of};

use crate::suite::tinyelf_compaction::run_long;
use elfgate_mockllm::MockServer;
use elfgate_test_support::phoenix::{Phoenix, Span, children, span};
use scripted::{daemon_with, finish_of};
use serde_json::json;

#[tokio::test]
async fn a_compaction_is_a_compact_context_span_with_its_summary_call_beneath() {
    let Some(store) = Phoenix::shared().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    // A window the conversation outgrows: the summary step of the ladder runs (as in
    // suite::tinyelf_compaction).
    let model = "mock:script=traced-long,context_limit=700";
    let d = daemon_with(
        &mock,
        &format!(
            "{}[providers.mock.models.\"{model}\"]\ncontext_window_tokens = 800\n\
             reserve_output_tokens = 100\n",
            telemetry_toml(&store)
        ),
    );
    let (_, evs) = run_long(&d, &mock, "traced-long", model).await;
    assert_eq!(finish_of(&evs), "max_iterations");
    let trace_id = trace_id_of(&evs);
    let spans = store
        .spans_until("the compaction's spans", Some(&trace_id), |s| {
            named(s, "invoke_agent tinyelf").len() == 1
                && !named(s, "compact_context").is_empty()
                && named(s, "compact_context")
                    .iter()
                    .all(|c| !children(s, c).is_empty())
                && named(s, &format!("chat {model}")).len() >= 8
        })
        .await;
    let root = span(&spans, "invoke_agent tinyelf");
    for compaction in named(&spans, "compact_context") {
        assert_eq!(compaction.parent_id.as_deref(), Some(root.span_id.as_str()));
        assert!(
            compaction
                .attr_u64("elfgate.compaction.messages_dropped")
                .is_some_and(|n| n > 0),
            "{:?}",
            compaction.attributes
        );
        // The summary call is the compaction's only child, a model call.
        let beneath: Vec<&Span> = children(&spans, compaction);
        assert_eq!(beneath.len(), 1, "{beneath:?}");
        assert_eq!(beneath[0].attr_str("gen_ai.operation.name"), Some("chat"));
    }
}

#[tokio::test]
async fn a_cli_run_is_invoke_agent_of_its_cli_with_its_reported_tool_calls_beneath() {
    let Some(store) = Phoenix::shared().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let (mut opts, records, project) = cli_opts(&mock, "", "", "");
    opts.extra_toml.push_str(&telemetry_toml(&store));
    let c = CliDaemon::start(&mock, (opts, records, project));
    for backend in ["codex", "claude-code", "gemini-cli"] {
        let mut body = c.session(backend, "tool");
        // gemini-cli declares its shell tool only when it may run it without asking.
        body["permissionMode"] = json!("bypassPermissions");
        let (sid, run) = c.d.create(body).await;
        let evs = c.d.events(&sid, None).await.until_complete(&run).await;
        assert_eq!(
            complete(&evs),
            ["stop"],
            "{backend}: {:?}",
            common::types(&evs)
        );
        let started = scripted::of(&evs, "toolCallStart");
        assert_eq!(started.len(), 1, "{backend}");
        let (call_id, tool) = (
            started[0].data["block"]["id"].as_str().unwrap(),
            started[0].data["block"]["name"].as_str().unwrap(),
        );
        let trace_id = trace_id_of(&evs);
        let root_name = format!("invoke_agent {backend}");
        let tool_name = format!("execute_tool {tool}");
        let spans = store
            .spans_until("the cli run's spans", Some(&trace_id), |s| {
                named(s, &root_name).len() == 1 && named(s, &tool_name).len() == 1
            })
            .await;
        let root = span(&spans, &root_name);
        assert_eq!(root.attr_str("gen_ai.agent.name"), Some(backend));
        assert_eq!(root.attr_str("elfgate.engine"), Some("cli"));
        let tool_span = span(&spans, &tool_name);
        assert_eq!(
            tool_span.parent_id.as_deref(),
            Some(root.span_id.as_str()),
            "{backend}"
        );
        assert_eq!(
            tool_span.attr_str("gen_ai.operation.name"),
            Some("execute_tool")
        );
        assert_eq!(tool_span.attr_str("gen_ai.tool.name"), Some(tool));
        assert_eq!(tool_span.attr_str("gen_ai.tool.call.id"), Some(call_id));
        assert_eq!(tool_span.attr_str("elfgate.tool.reported_by"), Some("cli"));
        assert_eq!(tool_span.attr_str("elfgate.tool.status"), Some("success"));
    }
}
