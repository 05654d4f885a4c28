//! The OpenAI Responses API (the format codex speaks): real HTTP against a `MockServer`.

// Test code: panicking on unexpected errors is the point.

use crate::common;

use common::{assert_dropped_after_two, parse_sse, request_log, wait_for_outcome};
use elfgate_mockllm::{Format, MockServer, Outcome};
use serde_json::{Value, json};

/// A request shaped like codex's: instructions, a list of input items, tools, streaming.
fn responses_req(model: &str, stream: bool) -> Value {
    json!({
        "model": model,
        "instructions": "You are terse.",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello mock world"}]},
        ],
        "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}}],
        "tool_choice": "auto",
        "parallel_tool_calls": false,
        "store": false,
        "stream": stream,
        "include": ["reasoning.encrypted_content"],
    })
}

async fn post(server: &MockServer, path: &str, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}{path}", server.base_url()))
        .header("authorization", "Bearer sk-codex")
        .json(&body)
        .send()
        .await
        .unwrap()
}

/// The whole streamed answer to a codex-like request for `model`.
async fn stream_text(server: &MockServer, model: &str) -> String {
    post(server, "/v1/responses", responses_req(model, true))
        .await
        .text()
        .await
        .unwrap()
}

/// The events of a streamed answer, checked to be well formed: each `data` names the same
/// type as its `event:` line, and the sequence numbers count up from 0.
fn events(text: &str) -> Vec<(String, Value)> {
    let out: Vec<(String, Value)> = parse_sse(text)
        .into_iter()
        .map(|(event, data)| {
            let event = event.expect("every frame names its event");
            let data: Value = serde_json::from_str(&data).unwrap();
            assert_eq!(data["type"], event.as_str());
            (event, data)
        })
        .collect();
    for (i, (_, data)) in out.iter().enumerate() {
        assert_eq!(data["sequence_number"], i, "{data}");
    }
    out
}

fn kinds(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(k, _)| k.as_str()).collect()
}

fn deltas(events: &[(String, Value)], kind: &str) -> String {
    events
        .iter()
        .filter(|(k, _)| k == kind)
        .map(|(_, d)| d["delta"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn streamed_text_in_event_order_with_usage() {
    let server = MockServer::start().await.unwrap();
    let resp = post(
        &server,
        "/v1/responses",
        responses_req("mock:tokens=3", true),
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let ev = events(&resp.text().await.unwrap());
    assert_eq!(
        kinds(&ev),
        vec![
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    assert_eq!(ev[0].1["response"]["status"], "in_progress");
    assert_eq!(ev[0].1["response"]["model"], "mock:tokens=3");
    assert_eq!(ev[2].1["item"]["type"], "message");
    assert_eq!(ev[2].1["item"]["role"], "assistant");
    assert_eq!(deltas(&ev, "response.output_text.delta"), "tok0 tok1 tok2 ");
    assert_eq!(ev[7].1["text"], "tok0 tok1 tok2 ");
    assert_eq!(
        ev[9].1["item"]["content"],
        json!([{"type": "output_text", "text": "tok0 tok1 tok2 ", "annotations": []}])
    );
    let done = &ev[10].1["response"];
    assert_eq!(done["id"], "resp_mock");
    assert_eq!(done["status"], "completed");
    assert_eq!(done["output"], json!([ev[9].1["item"]]));
    // "You are terse." + "hello mock world" = 6 words.
    assert_eq!(
        done["usage"],
        json!({
            "input_tokens": 6,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 3,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 9,
        })
    );

    let rec = wait_for_outcome(&server, 0, Outcome::Completed).await;
    assert_eq!(rec.format, Format::OpenAiResponses);
    assert_eq!(rec.path, "/v1/responses");
    assert_eq!(rec.model, "mock:tokens=3");
    assert_eq!(rec.authorization.as_deref(), Some("Bearer sk-codex"));
    assert_eq!(rec.body["instructions"], "You are terse.");
}

#[tokio::test]
async fn reasoning_then_text_then_function_call() {
    let server = MockServer::start().await.unwrap();
    let text = stream_text(&server, "mock:tokens=2,think=2,tool=shell").await;
    let ev = events(&text);
    assert_eq!(
        kinds(&ev),
        vec![
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.reasoning_summary_part.added",
            "response.reasoning_summary_text.delta",
            "response.reasoning_summary_text.delta",
            "response.reasoning_summary_text.done",
            "response.reasoning_summary_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    assert_eq!(
        deltas(&ev, "response.reasoning_summary_text.delta"),
        "think0 think1 "
    );
    assert!(
        ev.iter()
            .filter(|(k, _)| k == "response.reasoning_summary_text.delta")
            .all(|(_, d)| d["summary_index"] == 0)
    );
    assert_eq!(
        ev[8].1["item"],
        // The request asked for the encrypted reasoning (`include`).
        json!({"id": "rs_mock", "type": "reasoning",
               "summary": [{"type": "summary_text", "text": "think0 think1 "}],
               "encrypted_content": "enc-mock"})
    );
    assert_eq!(deltas(&ev, "response.output_text.delta"), "tok0 tok1 ");
    assert_eq!(
        ev[16].1["item"],
        json!({"id": "fc_mock_0", "type": "function_call", "status": "in_progress",
               "arguments": "", "call_id": "call_mock_0", "name": "shell"})
    );
    assert_eq!(ev[16].1["output_index"], 2);
    assert_eq!(deltas(&ev, "response.function_call_arguments.delta"), "{}");
    assert_eq!(ev[19].1["arguments"], "{}");
    assert_eq!(ev[20].1["item"]["arguments"], "{}");
    assert_eq!(ev[20].1["item"]["status"], "completed");
    let done = &ev[21].1["response"];
    let types: Vec<&str> = done["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, vec!["reasoning", "message", "function_call"]);
    assert_eq!(done["usage"]["output_tokens"], 5);
    assert_eq!(
        done["usage"]["output_tokens_details"]["reasoning_tokens"],
        2
    );
}

#[tokio::test]
async fn fail_with_and_without_count() {
    let server = MockServer::start().await.unwrap();
    let model = "mock:fail=500x1,retry_after=3,id=resp-fail";
    let resp = post(&server, "/v1/responses", responses_req(model, true)).await;
    assert_eq!(resp.status(), 500);
    assert_eq!(resp.headers()["retry-after"], "3");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["type"], "server_error");
    assert!(body["error"]["message"].is_string());
    let resp = post(&server, "/v1/responses", responses_req(model, true)).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.text().await.unwrap().contains("response.completed"));

    for _ in 0..2 {
        let resp = post(
            &server,
            "/v1/responses",
            responses_req("mock:fail=429", true),
        )
        .await;
        assert_eq!(resp.status(), 429);
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["type"], "rate_limit_error");
    }
    let outcomes: Vec<Outcome> = server.requests().iter().map(|r| r.outcome).collect();
    assert_eq!(
        outcomes,
        vec![
            Outcome::Failed,
            Outcome::Completed,
            Outcome::Failed,
            Outcome::Failed
        ]
    );
}

#[tokio::test]
async fn error_after_ends_with_response_failed() {
    let server = MockServer::start().await.unwrap();
    let text = stream_text(&server, "mock:tokens=4,error_after=1").await;
    let ev = events(&text);
    let (kind, last) = ev.last().unwrap();
    assert_eq!(kind, "response.failed");
    assert_eq!(last["response"]["status"], "failed");
    assert_eq!(last["response"]["id"], "resp_mock");
    assert_eq!(last["response"]["error"]["code"], "server_error");
    assert!(last["response"]["error"]["message"].is_string());
    assert_eq!(deltas(&ev, "response.output_text.delta"), "tok0 ");
    assert!(!kinds(&ev).contains(&"response.completed"));
    assert!(!kinds(&ev).contains(&"response.output_item.done"));
    wait_for_outcome(&server, 0, Outcome::Completed).await;
}

#[tokio::test]
async fn drop_after_aborts_before_completion() {
    let server = MockServer::start().await.unwrap();
    let resp = post(
        &server,
        "/v1/responses",
        responses_req("mock:tokens=5,drop_after=2", true),
    )
    .await;
    let text = assert_dropped_after_two(&server, 0, resp).await;
    assert!(!text.contains("response.completed"));
}

#[tokio::test]
async fn non_streamed_response_object() {
    let server = MockServer::start().await.unwrap();
    // codex without a `/v1` in its base URL posts to `/responses`.
    let resp = post(
        &server,
        "/responses",
        responses_req("mock:tokens=2,think=1,tool=ls", false),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["object"], "response");
    assert_eq!(v["status"], "completed");
    assert_eq!(
        v["output"],
        json!([
            {"id": "rs_mock", "type": "reasoning", "summary": [{"type": "summary_text", "text": "think0 "}],
             "encrypted_content": "enc-mock"},
            {"id": "msg_mock", "type": "message", "status": "completed", "role": "assistant",
             "content": [{"type": "output_text", "text": "tok0 tok1 ", "annotations": []}]},
            {"id": "fc_mock_0", "type": "function_call", "status": "completed", "arguments": "{}",
             "call_id": "call_mock_0", "name": "ls"},
        ])
    );
    assert_eq!(v["usage"]["output_tokens"], 4);
    assert_eq!(v["usage"]["total_tokens"], 10);

    let resp = post(
        &server,
        "/v1/responses",
        responses_req("mock:error_after=0", false),
    )
    .await;
    assert_eq!(resp.status(), 500);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["type"], "server_error");

    let reqs = server.requests();
    assert_eq!(reqs[0].path, "/responses");
    assert_eq!(reqs[0].format, Format::OpenAiResponses);
}

#[tokio::test]
async fn echo_uses_last_user_input_and_log_names_the_format() {
    let server = MockServer::start().await.unwrap();
    let mut body = responses_req("mock:echo=1", false);
    body["input"] = json!([
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<environment_context/>"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "first question"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "an answer"}]},
        {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "file.txt"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "second  question"}]},
    ]);
    let v: Value = post(&server, "/v1/responses", body)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        v["output"][0]["content"][0]["text"],
        "You said: second  question"
    );

    let mut body = responses_req("mock:echo=1", true);
    body["input"] = json!("plain string input");
    let text = post(&server, "/v1/responses", body)
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(
        deltas(&events(&text), "response.output_text.delta"),
        "You said: plain string input"
    );

    let raw = request_log(&server).await;
    assert_eq!(raw[0]["format"], "openai-responses");
    assert_eq!(raw[0]["model"], "mock:echo=1");
}

#[tokio::test]
async fn scripted_tool_call_keeps_its_id() {
    let server = MockServer::start().await.unwrap();
    server.set_script(
        "codex",
        serde_json::from_value(json!({"responses": [
            {"text": "Running it.", "toolCalls": [{"id": "call_x", "name": "shell", "arguments": "{\"command\":[\"ls\"]}"}]},
        ]}))
        .unwrap(),
    );
    let text = stream_text(&server, "m:script=codex").await;
    let ev = events(&text);
    assert_eq!(deltas(&ev, "response.output_text.delta"), "Running it.");
    let call = ev
        .iter()
        .find(|(k, d)| k == "response.output_item.done" && d["item"]["type"] == "function_call")
        .map(|(_, d)| &d["item"])
        .unwrap();
    assert_eq!(call["call_id"], "call_x");
    assert_eq!(call["arguments"], "{\"command\":[\"ls\"]}");
    assert_eq!(
        deltas(&ev, "response.function_call_arguments.delta"),
        "{\"command\":[\"ls\"]}"
    );
}

#[tokio::test]
async fn length_finish_makes_the_response_incomplete() {
    let server = MockServer::start().await.unwrap();
    server.set_script(
        "cut",
        serde_json::from_value(
            json!({"responses": [{"text": "cut short", "finishReason": "length"}]}),
        )
        .unwrap(),
    );
    let ev = events(&stream_text(&server, "m:script=cut").await);
    let (kind, last) = ev.last().unwrap();
    assert_eq!(kind, "response.incomplete");
    assert_eq!(last["response"]["status"], "incomplete");
    assert_eq!(
        last["response"]["incomplete_details"],
        json!({"reason": "max_output_tokens"})
    );
    assert_eq!(deltas(&ev, "response.output_text.delta"), "cut short");
}
