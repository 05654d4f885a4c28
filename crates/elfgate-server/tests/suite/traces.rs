//! Runs as OpenTelemetry traces (`[telemetry]`, docs/observability.md), read back from a
//! collector: a tinyelf run's tree (model calls, tool calls with the gate that decided them, a
//! sub-agent), a gateway call that joins its caller's trace, a workflow's steps, no content
//! unless asked for, a log line that names its trace, and a collector that stops answering.

use super::otlp_sink::{Sink, SpanRow, named, names, one};
use crate::common;
use crate::scripted;

use common::{Daemon, Opts, poll_until};
use elfgate_mockllm::MockServer;
use scripted::{call, finish_of, of, project, run, script, session};
use serde_json::{Value, json};

/// A daemon exporting to `sink`, quickly (a short batch delay is built in; a short export
/// timeout makes a refused export fail fast).
fn traced_daemon(mock: &MockServer, sink: &Sink, extra: &str, env: Vec<(&str, &str)>) -> Daemon {
    Daemon::start(
        mock,
        Opts {
            extra_toml: format!(
                "[telemetry]\notlp_endpoint = \"{}\"\nexport_timeout_ms = 300\n{extra}",
                sink.url
            ),
            env: env
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        },
    )
}

/// The trace id the run's `init` event names.
fn trace_id_of(evs: &[common::Ev]) -> String {
    let init = of(evs, "init");
    init[0].data["systemInfo"]["traceId"]
        .as_str()
        .unwrap_or_else(|| panic!("no traceId in {:?}", init[0].data))
        .to_string()
}

fn child_of<'a>(spans: &'a [SpanRow], parent: &SpanRow) -> Vec<&'a SpanRow> {
    spans
        .iter()
        .filter(|s| s.parent_span_id == parent.span_id)
        .collect()
}

#[tokio::test]
async fn a_tinyelf_run_is_one_trace_of_its_model_and_tool_calls_and_its_sub_agent() {
    let mock = MockServer::start().await.unwrap();
    let sink = Sink::start().await;
    let d = traced_daemon(&mock, &sink, "", vec![]);
    let dir = project();
    script(&mock, "traced-sub", json!([{"text": "sub says hi"}]));
    script(
        &mock,
        "traced",
        json!([
            {"toolCalls": [
                call("ok", "read_file", json!({"path": "a.txt"})),
                call("fw", "read_file", json!({"path": "../../../etc/hostname"}))
            ]},
            {"toolCalls": [call("sp", "spawn", json!({"task": "say hi", "label": "helper"}))]},
            {"text": "all done"}
        ]),
    );
    let prompt = "PROMPT-TEXT-THAT-MUST-STAY-PRIVATE";
    let (sid, run_id, evs) = run(
        &d,
        session(
            prompt,
            "mock:script=traced",
            &dir,
            json!({"permissionMode": "bypassPermissions",
                   "engineConfig": {"subAgentModel": "mock:script=traced-sub"}}),
        ),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop", "{:?}", common::types(&evs));
    let trace_id = trace_id_of(&evs);
    let spans = sink
        .trace_until(&trace_id, |s| {
            named(s, "invoke_agent tinyelf").len() == 1
                && named(s, "invoke_agent helper").len() == 1
        })
        .await;

    let root = one(&spans, "invoke_agent tinyelf");
    assert_eq!(root.parent_span_id, "", "{:#?}", names(&spans));
    assert_eq!(root.attr("gen_ai.operation.name"), "invoke_agent");
    assert_eq!(root.attr("gen_ai.agent.name"), "tinyelf");
    assert_eq!(root.attr("gen_ai.conversation.id"), sid.as_str());
    assert_eq!(root.attr("elfgate.run.id"), run_id.as_str());
    assert_eq!(root.attr("elfgate.finish_reason"), "stop");
    let usage = &of(&evs, "result")[0].data["stats"];
    assert_eq!(
        root.attr("gen_ai.usage.input_tokens"),
        &usage["inputTokens"]
    );
    assert_eq!(
        root.attr("gen_ai.usage.output_tokens"),
        &usage["outputTokens"]
    );

    // The run's three model calls are its children, their tokens adding up to the run's.
    let chats: Vec<&SpanRow> = child_of(&spans, root)
        .into_iter()
        .filter(|s| s.attr("gen_ai.operation.name") == "chat")
        .collect();
    assert_eq!(chats.len(), 3, "{:#?}", names(&spans));
    for chat in &chats {
        assert_eq!(chat.name, "chat mock:script=traced");
        assert_eq!(chat.kind, 3, "a client span");
        assert_eq!(chat.attr("gen_ai.provider.name"), "openai");
        assert_eq!(chat.attr("gen_ai.request.model"), "mock:script=traced");
    }
    // The run's tokens are its model calls', the sub-agent's included.
    let all_chats: Vec<&SpanRow> = spans
        .iter()
        .filter(|s| s.attr("gen_ai.operation.name") == "chat")
        .collect();
    let sum = |key: &str| -> i64 {
        all_chats
            .iter()
            .map(|c| c.attr(key).as_i64().unwrap())
            .sum()
    };
    assert_eq!(
        json!(sum("gen_ai.usage.input_tokens")),
        usage["inputTokens"]
    );
    assert_eq!(
        json!(sum("gen_ai.usage.output_tokens")),
        usage["outputTokens"]
    );

    // Two read_file calls: one allowed and run, one the firewall refused.
    let reads = named(&spans, "execute_tool read_file");
    assert_eq!(reads.len(), 2, "{:#?}", names(&spans));
    let by_id = |id: &str| -> &SpanRow {
        reads
            .iter()
            .find(|s| s.attr("gen_ai.tool.call.id") == id)
            .unwrap()
    };
    let (ok, fw) = (by_id("ok"), by_id("fw"));
    assert_eq!(ok.parent_span_id, root.span_id);
    assert_eq!(ok.attr("elfgate.tool.status"), "success");
    assert_eq!(ok.attr("elfgate.tool.decision"), "allowed");
    assert_eq!(fw.attr("elfgate.tool.status"), "denied");
    assert_eq!(fw.attr("elfgate.tool.decision"), "denied");
    assert_eq!(fw.attr("elfgate.tool.gate"), "firewall");
    assert_eq!(fw.attr("error.type"), "denied");

    // The sub-agent: an invoke_agent under the spawn call, its model call under it.
    let spawn = one(&spans, "execute_tool spawn");
    assert_eq!(spawn.parent_span_id, root.span_id);
    let helper = one(&spans, "invoke_agent helper");
    assert_eq!(helper.parent_span_id, spawn.span_id);
    let sub_chats = child_of(&spans, helper);
    assert_eq!(sub_chats.len(), 1, "{:#?}", names(&spans));
    assert_eq!(sub_chats[0].name, "chat mock:script=traced-sub");

    // capture_content is off: neither the prompt nor a tool's arguments left the daemon.
    assert!(!sink.bodies_contain(prompt));
    assert!(!sink.bodies_contain("etc/hostname"));
    assert!(!sink.bodies_contain("sub says hi"));
}

#[tokio::test]
async fn a_gateway_call_with_a_traceparent_lands_in_the_callers_trace() {
    let mock = MockServer::start().await.unwrap();
    let sink = Sink::start().await;
    let d = traced_daemon(&mock, &sink, "", vec![]);
    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let resp = d
        .http
        .post(d.url("/v1/chat/completions"))
        .header("traceparent", format!("00-{caller_trace}-{caller_span}-01"))
        .json(&json!({"model": "mock/mock:tokens=3",
                      "messages": [{"role": "user", "content": "hello"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    let spans = sink
        .trace_until(caller_trace, |s| {
            s.iter().any(|x| x.attr("gen_ai.operation.name") == "chat")
                && s.iter().any(|x| x.kind == 2)
        })
        .await;
    let server = spans.iter().find(|s| s.kind == 2).unwrap();
    assert_eq!(server.name, "POST /v1/chat/completions");
    assert_eq!(server.parent_span_id, caller_span);
    assert_eq!(server.attr("http.response.status_code"), 200);
    let chat = spans
        .iter()
        .find(|s| s.attr("gen_ai.operation.name") == "chat")
        .unwrap();
    assert_eq!(
        chat.attr("gen_ai.usage.output_tokens"),
        &body["usage"]["completion_tokens"]
    );
    // The model call is under the server span, through the run's invoke_agent.
    let mut at = chat;
    while at.parent_span_id != server.span_id {
        at = spans
            .iter()
            .find(|s| s.span_id == at.parent_span_id)
            .unwrap_or_else(|| panic!("{:#?}", names(&spans)));
    }
}

#[tokio::test]
async fn a_workflow_run_is_an_invoke_workflow_span_with_a_span_per_step() {
    let mock = MockServer::start().await.unwrap();
    let sink = Sink::start().await;
    let d = traced_daemon(&mock, &sink, "", vec![]);
    let dir = tempfile::tempdir().unwrap();
    let (status, w) = d
        .post(
            "/v1/workflows",
            json!({"name": "traced-notes", "projectPath": dir.path().display().to_string(),
            "permissionMode": "bypassPermissions",
            "steps": [
              {"id": "write", "tool": "write_file",
               "arguments": {"path": "n.md", "content": "x"}},
              {"id": "check", "if": "{{ 'x' in 'xyz' }}"}
            ]}),
        )
        .await;
    assert_eq!(status, 201, "{w}");
    let (status, started) = d
        .post("/v1/workflows/traced-notes/runs", json!({"inputs": {}}))
        .await;
    assert_eq!(status, 201, "{started}");
    let sid = started["sessionId"].as_str().unwrap();
    let run_id = started["runId"].as_str().unwrap();
    let evs = d.all_events_until_complete_of(sid, run_id).await;
    let trace_id = trace_id_of(&evs);
    let spans = sink
        .trace_until(&trace_id, |s| {
            named(s, "invoke_workflow traced-notes").len() == 1
                && named(s, "execute_tool write_file").len() == 1
        })
        .await;
    let root = one(&spans, "invoke_workflow traced-notes");
    assert_eq!(root.attr("gen_ai.operation.name"), "invoke_workflow");
    for step in ["step write", "step check"] {
        let s = one(&spans, step);
        assert_eq!(s.parent_span_id, root.span_id, "{step}");
        assert_eq!(s.attr("elfgate.workflow.step.status"), "success");
    }
    let tool = one(&spans, "execute_tool write_file");
    assert_eq!(tool.parent_span_id, one(&spans, "step write").span_id);
}

#[tokio::test]
async fn a_log_line_of_a_run_names_its_trace_and_a_stopped_collector_costs_the_run_nothing() {
    let mock = MockServer::start().await.unwrap();
    let sink = Sink::start().await;
    let log = tempfile::tempdir().unwrap().keep().join("daemon.log");
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: format!(
                "[telemetry]\notlp_endpoint = \"{}\"\nexport_timeout_ms = 300\n",
                sink.url
            ),
            env: vec![
                // The run span (info) carries the ids; the line itself is at debug.
                (
                    "ELFGATE_LOG".into(),
                    "warn,elfgate_core=info,elfgate_engines=debug".into(),
                ),
                ("ELFGATE_LOG_FORMAT".into(), "json".into()),
            ],
            log_file: Some(log.clone()),
            ..Default::default()
        },
    );
    // The chat engine logs (at debug) the tool calls it ignores: a line inside the run.
    script(
        &mock,
        "logs",
        json!([{"toolCalls": [call("c", "read_file", json!({"path": "a.txt"}))]}]),
    );
    let (_, _, evs) = run(
        &d,
        json!({"engine": "chat", "prompt": "hi", "model": "mock:script=logs"}),
    )
    .await;
    let trace_id = trace_id_of(&evs);
    let line = poll_until("the run's log line", || {
        std::fs::read_to_string(&log)
            .ok()?
            .lines()
            .find(|l| l.contains("chat engine ignores tool calls"))
            .map(str::to_string)
    })
    .await;
    let line: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(line["span"]["trace_id"], trace_id.as_str(), "{line}");
    let spans = sink
        .trace_until(&trace_id, |s| named(s, "invoke_agent chat").len() == 1)
        .await;
    assert_eq!(
        line["span"]["span_id"],
        one(&spans, "invoke_agent chat").span_id.as_str()
    );

    // The collector stops answering: runs go on as before, the lost spans are counted.
    sink.stop();
    let (_, _, evs) = run(
        &d,
        json!({"engine": "chat", "prompt": "again", "model": "mock:tokens=2"}),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop", "{:?}", common::types(&evs));
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (status, text) = d.get_text("/metrics").await;
        assert_eq!(status, 200);
        let dropped: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("elfgate_telemetry_spans_dropped_total "))
            .expect("the drop counter is exported")
            .parse()
            .unwrap();
        if dropped > 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no dropped span counted"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// `config check` (and so `serve`) refuses a `[telemetry]` that could only fail or surprise
/// later, naming the key; a sound one passes.
#[test]
fn config_check_refuses_bad_telemetry_settings() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "otlp_endpoint = \"localhost:4318\"",
            "telemetry.otlp_endpoint: 'localhost:4318' is not an http:// or https:// URL",
        ),
        (
            "sampling_ratio = 1.5",
            "telemetry.sampling_ratio: 1.5 is not between 0.0 and 1.0",
        ),
        (
            "max_content_bytes = 0",
            "telemetry.max_content_bytes: must be 1 to 1048576",
        ),
        (
            "headers_env = { \"x-key\" = \"TRACES_TEST_UNSET_KEY\" }",
            "telemetry.headers_env.x-key: the variable TRACES_TEST_UNSET_KEY is not set",
        ),
        (
            "headers_env = { \"bad header\" = \"TRACES_TEST_KEY\" }",
            "telemetry.headers_env.bad header: is not a valid HTTP header name",
        ),
        (
            "max_queue_size = 0",
            "telemetry.max_queue_size: must be at least 1",
        ),
        ("sample_ratio = 0.5", "unknown field `sample_ratio`"),
    ];
    for (telemetry, want) in cases {
        let file = dir.path().join("telemetry.toml");
        std::fs::write(&file, format!("[telemetry]\n{telemetry}\n")).unwrap();
        let (ok, out) = super::restart::run_elfgate(
            &["config", "check", "--config", file.to_str().unwrap()],
            &[("TRACES_TEST_KEY", "k")],
        );
        assert!(!ok, "{telemetry}: accepted: {out}");
        assert!(out.contains(want), "{telemetry}: {out}");
    }
    let file = dir.path().join("good.toml");
    std::fs::write(
        &file,
        "[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318\"\nsampling_ratio = 0.25\n\
         capture_content = true\nheaders_env = { \"x-key\" = \"TRACES_TEST_KEY\" }\n\
         resource_attributes = { \"deployment.environment\" = \"test\" }\n",
    )
    .unwrap();
    let (ok, out) = super::restart::run_elfgate(
        &["config", "check", "--config", file.to_str().unwrap()],
        &[("TRACES_TEST_KEY", "k")],
    );
    assert!(ok, "{out}");
}
