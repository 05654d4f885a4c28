//! Runs as OpenTelemetry traces (`[telemetry]`, docs/observability.md), read back from a real
//! trace store (Arize Phoenix): a tinyelf run's tree (model calls, tool calls with the gate that
//! decided them, a sub-agent), a gateway call that joins its caller's trace, a workflow's steps,
//! no content unless asked for, a log line that names its trace, and a collector that goes away.

use crate::common;
use crate::scripted;

use common::{Daemon, Opts, poll_until};
use elfgate_mockllm::MockServer;
use elfgate_test_support::phoenix::{Phoenix, Span, children, span};
use scripted::{call, finish_of, of, project, run, script, session};
use serde_json::{Value, json};

/// A daemon exporting to `store` (a short export timeout makes a refused export fail fast).
pub(crate) fn traced_daemon(mock: &MockServer, store: &Phoenix) -> Daemon {
    Daemon::start(
        mock,
        Opts {
            extra_toml: telemetry_toml(store),
            ..Default::default()
        },
    )
}

pub(crate) fn telemetry_toml(store: &Phoenix) -> String {
    format!(
        "[telemetry]\notlp_endpoint = \"{}\"\nexport_timeout_ms = 1000\n",
        store.endpoint()
    )
}

/// The spans named `name`.
pub(crate) fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name == name).collect()
}

/// Whether `text` is anywhere in the stored spans.
fn anywhere(spans: &[Span], text: &str) -> bool {
    spans.iter().any(|s| s.raw.to_string().contains(text))
}

/// The trace id the run's `init` event names.
pub(crate) fn trace_id_of(evs: &[common::Ev]) -> String {
    let init = of(evs, "init");
    init[0].data["systemInfo"]["traceId"]
        .as_str()
        .unwrap_or_else(|| panic!("no traceId in {:?}", init[0].data))
        .to_string()
}

#[tokio::test]
async fn a_tinyelf_run_is_one_trace_of_its_model_and_tool_calls_and_its_sub_agent() {
    let Some(store) = Phoenix::shared().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let d = traced_daemon(&mock, &store);
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
    let spans = store
        .spans_until("the tinyelf run's spans", Some(&trace_id), |s| {
            named(s, "invoke_agent tinyelf").len() == 1
                && named(s, "invoke_agent helper").len() == 1
                && named(s, "chat mock:script=traced").len() == 3
                && named(s, "chat mock:script=traced-sub").len() == 1
                && named(s, "execute_tool read_file").len() == 2
                && named(s, "execute_tool spawn").len() == 1
        })
        .await;

    let root = span(&spans, "invoke_agent tinyelf");
    assert_eq!(root.parent_id, None);
    assert_eq!(root.attr_str("gen_ai.operation.name"), Some("invoke_agent"));
    assert_eq!(root.attr_str("gen_ai.agent.name"), Some("tinyelf"));
    assert_eq!(root.attr_str("gen_ai.conversation.id"), Some(sid.as_str()));
    assert_eq!(root.attr_str("elfgate.run.id"), Some(run_id.as_str()));
    assert_eq!(root.attr_str("elfgate.finish_reason"), Some("stop"));
    let usage = &of(&evs, "result")[0].data["stats"];
    assert_eq!(
        root.attr_u64("gen_ai.usage.input_tokens"),
        usage["inputTokens"].as_u64()
    );
    assert_eq!(
        root.attr_u64("gen_ai.usage.output_tokens"),
        usage["outputTokens"].as_u64()
    );

    // The run's three model calls are its children; all model calls' tokens (the sub-agent's
    // included) add up to the run's.
    let chats: Vec<&Span> = children(&spans, root)
        .into_iter()
        .filter(|s| s.attr_str("gen_ai.operation.name") == Some("chat"))
        .collect();
    assert_eq!(chats.len(), 3);
    for chat in &chats {
        assert_eq!(chat.name, "chat mock:script=traced");
        assert_eq!(chat.attr_str("gen_ai.provider.name"), Some("openai"));
        assert_eq!(
            chat.attr_str("gen_ai.request.model"),
            Some("mock:script=traced")
        );
    }
    let sum = |key: &str| -> u64 {
        spans
            .iter()
            .filter(|s| s.attr_str("gen_ai.operation.name") == Some("chat"))
            .map(|c| c.attr_u64(key).unwrap())
            .sum()
    };
    assert_eq!(
        Some(sum("gen_ai.usage.input_tokens")),
        usage["inputTokens"].as_u64()
    );
    assert_eq!(
        Some(sum("gen_ai.usage.output_tokens")),
        usage["outputTokens"].as_u64()
    );

    // Two read_file calls: one allowed and run, one the firewall refused.
    let reads = named(&spans, "execute_tool read_file");
    let by_id = |id: &str| -> &Span {
        reads
            .iter()
            .find(|s| s.attr_str("gen_ai.tool.call.id") == Some(id))
            .unwrap()
    };
    let (ok, fw) = (by_id("ok"), by_id("fw"));
    assert_eq!(ok.parent_id.as_deref(), Some(root.span_id.as_str()));
    assert_eq!(ok.attr_str("elfgate.tool.status"), Some("success"));
    assert_eq!(ok.attr_str("elfgate.tool.decision"), Some("allowed"));
    assert_eq!(fw.parent_id.as_deref(), Some(root.span_id.as_str()));
    assert_eq!(fw.attr_str("elfgate.tool.status"), Some("denied"));
    assert_eq!(fw.attr_str("elfgate.tool.decision"), Some("denied"));
    assert_eq!(fw.attr_str("elfgate.tool.gate"), Some("firewall"));
    assert_eq!(fw.status_code, "ERROR");

    // The sub-agent: an invoke_agent under the spawn call, its model call under it.
    let spawn = span(&spans, "execute_tool spawn");
    assert_eq!(spawn.parent_id.as_deref(), Some(root.span_id.as_str()));
    let helper = span(&spans, "invoke_agent helper");
    assert_eq!(helper.parent_id.as_deref(), Some(spawn.span_id.as_str()));
    let sub_chats = children(&spans, helper);
    assert_eq!(sub_chats.len(), 1);
    assert_eq!(sub_chats[0].name, "chat mock:script=traced-sub");

    // Each request to the provider carried the traceparent of its model call's span.
    let mut chat_ids: Vec<String> = chats.iter().map(|c| c.span_id.clone()).collect();
    chat_ids.push(sub_chats[0].span_id.clone());
    chat_ids.sort();
    let mut sent: Vec<String> = mock
        .requests()
        .iter()
        .map(|r| {
            let tp = r.traceparent.as_deref().expect("a traceparent");
            let parts: Vec<&str> = tp.split('-').collect();
            assert_eq!(parts[1], trace_id, "{tp}");
            parts[2].to_string()
        })
        .collect();
    sent.sort();
    assert_eq!(sent, chat_ids);

    // capture_content is off: neither the prompt, a tool's arguments nor an answer is stored.
    for text in [prompt, "etc/hostname", "sub says hi", "all done"] {
        assert!(!anywhere(&spans, text), "{text} was exported");
    }
}

#[tokio::test]
async fn a_gateway_call_with_a_traceparent_lands_in_the_callers_trace() {
    let Some(store) = Phoenix::shared().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let d = traced_daemon(&mock, &store);
    // A trace id of this test's own, so that a shared store holds no other span of it.
    let caller_trace = uuid_hex();
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
    let spans = store
        .spans_until("the gateway call's spans", Some(&caller_trace), |s| {
            named(s, "POST /v1/chat/completions").len() == 1
                && named(s, "invoke_agent chat").len() == 1
                && s.iter()
                    .any(|x| x.attr_str("gen_ai.operation.name") == Some("chat"))
        })
        .await;
    let server = span(&spans, "POST /v1/chat/completions");
    assert_eq!(server.parent_id.as_deref(), Some(caller_span));
    assert_eq!(server.attr_u64("http.response.status_code"), Some(200));
    let agent = span(&spans, "invoke_agent chat");
    assert_eq!(agent.parent_id.as_deref(), Some(server.span_id.as_str()));
    let chat = children(&spans, agent)[0];
    assert_eq!(chat.name, "chat mock:tokens=3");
    assert_eq!(
        chat.attr_u64("gen_ai.usage.output_tokens"),
        body["usage"]["completion_tokens"].as_u64()
    );
}

/// 32 random hex digits: a trace id.
fn uuid_hex() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

#[tokio::test]
async fn a_workflow_run_is_an_invoke_workflow_span_with_a_span_per_step() {
    let Some(store) = Phoenix::shared().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let d = traced_daemon(&mock, &store);
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
    let spans = store
        .spans_until("the workflow's spans", Some(&trace_id), |s| {
            named(s, "invoke_workflow traced-notes").len() == 1
                && named(s, "step write").len() == 1
                && named(s, "step check").len() == 1
                && named(s, "execute_tool write_file").len() == 1
        })
        .await;
    let root = span(&spans, "invoke_workflow traced-notes");
    assert_eq!(
        root.attr_str("gen_ai.operation.name"),
        Some("invoke_workflow")
    );
    for step in ["step write", "step check"] {
        let s = span(&spans, step);
        assert_eq!(
            s.parent_id.as_deref(),
            Some(root.span_id.as_str()),
            "{step}"
        );
        assert_eq!(s.attr_str("elfgate.workflow.step.status"), Some("success"));
    }
    let tool = span(&spans, "execute_tool write_file");
    assert_eq!(
        tool.parent_id.as_deref(),
        Some(span(&spans, "step write").span_id.as_str())
    );
}

#[tokio::test]
async fn a_log_line_of_a_run_names_its_trace_and_a_stopped_collector_costs_the_run_nothing() {
    // A store of its own: this test stops it.
    let Some(mut store) = Phoenix::start().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let log = tempfile::tempdir().unwrap().keep().join("daemon.log");
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: telemetry_toml(&store),
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
    let spans = store
        .spans_until("the chat run's spans", Some(&trace_id), |s| {
            named(s, "invoke_agent chat").len() == 1
        })
        .await;
    assert_eq!(
        line["span"]["span_id"],
        span(&spans, "invoke_agent chat").span_id.as_str()
    );

    // The collector goes away: runs go on as before, the lost spans are counted.
    store.stop();
    let (_, _, evs) = run(
        &d,
        json!({"engine": "chat", "prompt": "again", "model": "mock:tokens=2"}),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop", "{:?}", common::types(&evs));
    let deadline = tokio::time::Instant::now() + common::GUARD;
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

#[tokio::test]
async fn the_wait_for_a_permission_answer_is_a_span_under_its_tool_call() {
    let Some(store) = Phoenix::shared().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let d = traced_daemon(&mock, &store);
    let dir = project();
    script(
        &mock,
        "asks",
        json!([
            {"toolCalls": [call("w", "write_file", json!({"path": "b.txt", "content": "b"}))]},
            {"text": "written"}
        ]),
    );
    let (sid, run_id) = d
        .create(session("write", "mock:script=asks", &dir, json!({})))
        .await;
    let mut sse = d.events(&sid, None).await;
    let mut evs = Vec::new();
    let asked = scripted::events::until_requests(&mut sse, 1, &mut evs).await;
    common::allow(&d, &sid, &asked[0]).await;
    evs.extend(sse.until_complete(&run_id).await);
    assert_eq!(finish_of(&evs), "stop", "{:?}", common::types(&evs));
    let trace_id = trace_id_of(&evs);
    let spans = store
        .spans_until("the permission wait's spans", Some(&trace_id), |s| {
            named(s, "execute_tool write_file").len() == 1
                && named(s, "permission_wait write_file").len() == 1
        })
        .await;
    let tool = span(&spans, "execute_tool write_file");
    let wait = span(&spans, "permission_wait write_file");
    assert_eq!(wait.parent_id.as_deref(), Some(tool.span_id.as_str()));
    assert_eq!(wait.attr_str("elfgate.permission.answer"), Some("granted"));
    assert_eq!(tool.attr_str("elfgate.tool.status"), Some("success"));
}

#[tokio::test]
async fn with_capture_content_the_prompt_and_answer_are_on_the_spans_cut_to_the_bound() {
    let Some(store) = Phoenix::shared().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: format!(
                "{}capture_content = true\nmax_content_bytes = 12\n",
                telemetry_toml(&store)
            ),
            ..Default::default()
        },
    );
    let (_, _, evs) = run(
        &d,
        json!({"engine": "chat", "prompt": "0123456789abcdefXYZ", "model": "mock:tokens=5"}),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop", "{:?}", common::types(&evs));
    let trace_id = trace_id_of(&evs);
    let spans = store
        .spans_until("the captured run's spans", Some(&trace_id), |s| {
            named(s, "invoke_agent chat").len() == 1 && named(s, "chat mock:tokens=5").len() == 1
        })
        .await;
    let input: Value = serde_json::from_str(
        span(&spans, "invoke_agent chat")
            .attr_str("gen_ai.input.messages")
            .expect("the prompt is captured"),
    )
    .unwrap();
    assert_eq!(
        input,
        json!([{"role": "user", "parts": [{"type": "text", "content": "0123456789ab…"}]}])
    );
    assert!(!anywhere(&spans, "XYZ"), "the prompt past the bound");
    let output: Value = serde_json::from_str(
        span(&spans, "chat mock:tokens=5")
            .attr_str("gen_ai.output.messages")
            .expect("the answer is captured"),
    )
    .unwrap();
    assert_eq!(output[0]["role"], "assistant");
    assert_eq!(output[0]["parts"][0]["content"], "tok0 tok1 to…");
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
        ("sample_ratio = 0.5", "unknown field: found `sample_ratio`"),
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
