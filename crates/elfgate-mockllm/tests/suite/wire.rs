//! Wire-level integration tests: real HTTP against a `MockServer`.

// Test code: panicking on unexpected errors is the point.

use std::time::Duration;

use crate::common;

use common::{
    GUARD, assert_dropped_after_two, parse_sse, read_until, request_log, wait_for_outcome,
};
use elfgate_mockllm::{
    Format, MockServer, Outcome, RecordedRequest, Script, ScriptedResponse, ScriptedToolCall,
};
use futures_util::StreamExt;
use serde_json::{Value, json};

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

async fn post(server: &MockServer, path: &str, body: Value) -> reqwest::Response {
    client()
        .post(format!("{}{path}", server.base_url()))
        .header("authorization", "Bearer sk-test")
        .json(&body)
        .send()
        .await
        .unwrap()
}

fn openai_req(model: &str, stream: bool) -> Value {
    json!({
        "model": model,
        "stream": stream,
        "stream_options": {"include_usage": true},
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "hello mock world"},
        ],
    })
}

fn anthropic_req(model: &str, stream: bool) -> Value {
    json!({
        "model": model,
        "stream": stream,
        "max_tokens": 1024,
        "system": "You are terse.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hello mock world"}]}],
    })
}

#[tokio::test]
async fn openai_stream_tokens_done_and_usage() {
    let server = MockServer::start().await.unwrap();
    let resp = post(
        &server,
        "/v1/chat/completions",
        openai_req("mock:tokens=3", true),
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let text = resp.text().await.unwrap();
    let frames = parse_sse(&text);
    assert_eq!(frames.last().unwrap().1, "[DONE]");

    let chunks: Vec<Value> = frames[..frames.len() - 1]
        .iter()
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(chunks[0]["object"], "chat.completion.chunk");
    assert_eq!(chunks[0]["model"], "mock:tokens=3");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content, "tok0 tok1 tok2 ");
    let finish: Vec<&str> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["finish_reason"].as_str())
        .collect();
    assert_eq!(finish, vec!["stop"]);
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    // "You are terse." + "hello mock world" = 6 words.
    assert_eq!(
        usage["usage"],
        json!({"prompt_tokens": 6, "completion_tokens": 3, "total_tokens": 9,
               "prompt_tokens_details": {"cached_tokens": 0}})
    );

    let rec = wait_for_outcome(&server, 0, Outcome::Completed).await;
    assert_eq!(rec.path, "/v1/chat/completions");
    assert_eq!(rec.model, "mock:tokens=3");
    assert_eq!(rec.authorization.as_deref(), Some("Bearer sk-test"));
    assert_eq!(rec.body["messages"][1]["content"], "hello mock world");
}

#[tokio::test]
async fn openai_stream_without_usage_and_with_delay() {
    let server = MockServer::start().await.unwrap();
    let mut body = openai_req("mock:tokens=2,delay_ms=5,think=2", true);
    body.as_object_mut().unwrap().remove("stream_options");
    let text = post(&server, "/v1/chat/completions", body)
        .await
        .text()
        .await
        .unwrap();
    let frames = parse_sse(&text);
    assert_eq!(frames.last().unwrap().1, "[DONE]");
    let chunks: Vec<Value> = frames[..frames.len() - 1]
        .iter()
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect();
    assert!(chunks.iter().all(|c| c.get("usage").is_none()));
    let reasoning: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["reasoning_content"].as_str())
        .collect();
    assert_eq!(reasoning, "think0 think1 ");
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content, "tok0 tok1 ");
}

#[tokio::test]
async fn anthropic_stream_event_sequence() {
    let server = MockServer::start().await.unwrap();
    let resp = client()
        .post(format!("{}/v1/messages", server.base_url()))
        .header("x-api-key", "ak-test")
        .json(&anthropic_req("mock:tokens=2,think=1,tool=ls", true))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let frames = parse_sse(&resp.text().await.unwrap());
    let events: Vec<&str> = frames.iter().map(|(e, _)| e.as_deref().unwrap()).collect();
    assert_eq!(
        events,
        vec![
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    );
    let data: Vec<Value> = frames
        .iter()
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect();
    for ((event, _), d) in frames.iter().zip(&data) {
        assert_eq!(d["type"], event.as_deref().unwrap());
    }
    assert_eq!(data[0]["message"]["usage"]["input_tokens"], 6);
    assert_eq!(data[0]["message"]["model"], "mock:tokens=2,think=1,tool=ls");
    assert_eq!(data[2]["content_block"]["type"], "thinking");
    assert_eq!(
        data[3]["delta"],
        json!({"type": "thinking_delta", "thinking": "think0 "})
    );
    assert_eq!(
        data[4]["delta"],
        json!({"type": "signature_delta", "signature": "sig-mock"})
    );
    assert_eq!(data[6]["content_block"]["type"], "text");
    assert_eq!(data[6]["index"], 1);
    let text: String = data[7..9]
        .iter()
        .map(|d| d["delta"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "tok0 tok1 ");
    assert_eq!(data[10]["content_block"]["type"], "tool_use");
    assert_eq!(data[10]["content_block"]["name"], "ls");
    assert_eq!(data[10]["content_block"]["input"], json!({}));
    let args: String = data[11..13]
        .iter()
        .map(|d| {
            assert_eq!(d["delta"]["type"], "input_json_delta");
            d["delta"]["partial_json"].as_str().unwrap()
        })
        .collect();
    assert_eq!(args, "{}");
    assert_eq!(data[14]["delta"]["stop_reason"], "tool_use");
    assert_eq!(data[14]["usage"]["output_tokens"], 4);

    let rec = wait_for_outcome(&server, 0, Outcome::Completed).await;
    assert_eq!(rec.authorization.as_deref(), Some("ak-test"));
    assert_eq!(rec.path, "/v1/messages");
}

#[tokio::test]
async fn non_streaming_both_dialects() {
    let server = MockServer::start().await.unwrap();
    let oa: Value = post(
        &server,
        "/v1/chat/completions",
        openai_req("mock:tokens=2,tool=grep", false),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(oa["object"], "chat.completion");
    let choice = &oa["choices"][0];
    assert_eq!(choice["message"]["content"], "tok0 tok1 ");
    assert_eq!(
        choice["message"]["tool_calls"][0]["function"]["name"],
        "grep"
    );
    assert_eq!(
        choice["message"]["tool_calls"][0]["function"]["arguments"],
        "{}"
    );
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(oa["usage"]["completion_tokens"], 3);

    let an: Value = post(
        &server,
        "/v1/messages",
        anthropic_req("mock:tokens=3", false),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(an["type"], "message");
    assert_eq!(
        an["content"],
        json!([{"type": "text", "text": "tok0 tok1 tok2 "}])
    );
    assert_eq!(an["stop_reason"], "end_turn");
    assert_eq!(
        an["usage"],
        json!({"input_tokens": 6, "output_tokens": 3,
               "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0})
    );

    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    assert!(reqs.iter().all(|r| r.outcome == Outcome::Completed));
}

#[tokio::test]
async fn fail_twice_then_succeed() {
    let server = MockServer::start().await.unwrap();
    let model = "mock:fail=500x2,retry_after=7,id=fail-test";
    for _ in 0..2 {
        let resp = post(&server, "/v1/chat/completions", openai_req(model, true)).await;
        assert_eq!(resp.status(), 500);
        assert_eq!(resp.headers()["retry-after"], "7");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["type"], "server_error");
        assert!(body["error"]["message"].is_string());
    }
    let resp = post(&server, "/v1/chat/completions", openai_req(model, true)).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.text().await.unwrap().ends_with("data: [DONE]\n\n"));

    // Counters are per exact model string; Anthropic errors are Anthropic-shaped.
    let resp = post(
        &server,
        "/v1/messages",
        anthropic_req("mock:fail=429x1,id=other", false),
    )
    .await;
    assert_eq!(resp.status(), 429);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "rate_limit_error");

    let outcomes: Vec<Outcome> = server.requests().iter().map(|r| r.outcome).collect();
    assert_eq!(
        outcomes,
        vec![
            Outcome::Failed,
            Outcome::Failed,
            Outcome::Completed,
            Outcome::Failed
        ]
    );
}

#[tokio::test]
async fn drop_after_truncates_stream() {
    let server = MockServer::start().await.unwrap();
    let resp = post(
        &server,
        "/v1/chat/completions",
        openai_req("mock:tokens=5,drop_after=2", true),
    )
    .await;
    let text = assert_dropped_after_two(&server, 0, resp).await;
    assert!(!text.contains("[DONE]"));
    assert!(!text.contains("finish_reason\":\"stop"));
}

#[tokio::test]
async fn anthropic_error_after_sends_error_event() {
    let server = MockServer::start().await.unwrap();
    let text = post(
        &server,
        "/v1/messages",
        anthropic_req("mock:tokens=4,error_after=1", true),
    )
    .await
    .text()
    .await
    .unwrap();
    let frames = parse_sse(&text);
    let (event, data) = frames.last().unwrap();
    assert_eq!(event.as_deref(), Some("error"));
    let data: Value = serde_json::from_str(data).unwrap();
    assert_eq!(data["error"]["type"], "overloaded_error");
    assert!(!text.contains("message_stop"));
    assert!(text.contains("tok0") && !text.contains("tok1"));
}

#[tokio::test]
async fn script_tool_call_fragments_and_sequence() {
    let server = MockServer::start().await.unwrap();
    let args = r#"{"path":"/tmp/notes.txt","limit":10}"#;
    server.set_script(
        "agent",
        Script {
            responses: vec![
                ScriptedResponse {
                    text: Some("Let me  look.".into()),
                    tool_calls: vec![ScriptedToolCall {
                        id: Some("call_abc".into()),
                        name: "read_file".into(),
                        arguments: args.into(),
                    }],
                    ..Default::default()
                },
                ScriptedResponse {
                    text: Some("All done.".into()),
                    ..Default::default()
                },
            ],
        },
    );
    let model = "mock:script=agent";
    let text = post(&server, "/v1/chat/completions", openai_req(model, true))
        .await
        .text()
        .await
        .unwrap();
    let frames = parse_sse(&text);
    let chunks: Vec<Value> = frames[..frames.len() - 1]
        .iter()
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect();
    let content: Vec<&str> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .filter(|s| !s.is_empty())
        .collect();
    assert_eq!(content, vec!["Let ", "me  ", "look."]);
    let tc: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].get(0))
        .collect();
    assert!(tc.len() >= 3, "header + at least 2 fragments: {tc:?}");
    assert_eq!(tc[0]["id"], "call_abc");
    assert_eq!(tc[0]["type"], "function");
    assert_eq!(tc[0]["function"]["name"], "read_file");
    assert_eq!(tc[0]["function"]["arguments"], "");
    for frag in &tc[1..] {
        assert_eq!(frag["index"], 0);
        assert!(frag.get("id").is_none());
        assert!(frag["function"].get("name").is_none());
    }
    let merged: String = tc
        .iter()
        .map(|t| t["function"]["arguments"].as_str().unwrap())
        .collect();
    assert_eq!(merged, args);
    let finish: Vec<&str> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["finish_reason"].as_str())
        .collect();
    assert_eq!(finish, vec!["tool_calls"]);

    // Second and later requests: the last response repeats.
    for _ in 0..2 {
        let v: Value = post(&server, "/v1/chat/completions", openai_req(model, false))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(v["choices"][0]["message"]["content"], "All done.");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
    }
}

#[tokio::test]
async fn script_via_http_and_status() {
    let server = MockServer::start().await.unwrap();
    let c = client();
    let script = json!({"responses": [{"status": 503}, {"thinking": "hmm ok", "text": "hi"}]});
    let resp = c
        .put(format!("{}/_mock/scripts/s1", server.base_url()))
        .json(&script)
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success());
    let resp = post(&server, "/v1/messages", anthropic_req("m:script=s1", false)).await;
    assert_eq!(resp.status(), 503);
    let v: Value = post(&server, "/v1/messages", anthropic_req("m:script=s1", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        v["content"],
        json!([
            {"type": "thinking", "thinking": "hmm ok", "signature": "sig-mock"},
            {"type": "text", "text": "hi"},
        ])
    );
    let resp = post(
        &server,
        "/v1/messages",
        anthropic_req("m:script=nope", false),
    )
    .await;
    assert_eq!(resp.status(), 400);
}

#[tokio::test]
async fn client_disconnect_on_stall_is_recorded() {
    let server = MockServer::start().await.unwrap();
    let resp = post(
        &server,
        "/v1/chat/completions",
        openai_req("mock:tokens=5,stall_after=1", true),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let mut stream = resp.bytes_stream();
    read_until(&mut stream, "tok0").await;
    // Nothing more arrives while stalled.
    assert!(
        tokio::time::timeout(Duration::from_millis(100), stream.next())
            .await
            .is_err()
    );
    assert_eq!(server.requests()[0].outcome, Outcome::InProgress);
    drop(stream);
    wait_for_outcome(&server, 0, Outcome::ClientDisconnected).await;
}

#[tokio::test]
async fn echo_and_malformed_and_admin_endpoints() {
    let server = MockServer::start().await.unwrap();
    let c = client();
    let base = server.base_url();

    let v: Value = post(
        &server,
        "/v1/chat/completions",
        openai_req("mock:echo=1", false),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "You said: hello mock world"
    );

    let resp = c
        .post(format!("{base}/v1/messages"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");

    let resp = c
        .post(format!("{base}/v1/chat/completions"))
        .body("[1,2]")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert!(body["error"]["message"].is_string());

    let health = c.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(health.text().await.unwrap(), "ok");

    let listed: Vec<RecordedRequest> = c
        .get(format!("{base}/_mock/requests"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed.len(), 3);
    assert_eq!(listed[1].outcome, Outcome::Failed);
    let raw: Value = c
        .get(format!("{base}/_mock/requests"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(raw[0]["outcome"], "completed");
    assert!(raw[0].get("authorization").is_some());

    let del = c
        .delete(format!("{base}/_mock/requests"))
        .send()
        .await
        .unwrap();
    assert!(del.status().is_success());
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn garbage_model_strings_use_defaults() {
    let server = MockServer::start().await.unwrap();
    for model in [
        "",
        "::",
        "mock:tokens=abc,delay_ms=-5,fail=zz,drop_after=",
        "x:=,=,,",
    ] {
        let v: Value = post(&server, "/v1/chat/completions", openai_req(model, false))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(
            v["choices"][0]["message"]["content"], "tok0 tok1 tok2 tok3 tok4 ",
            "model {model:?}"
        );
    }
    // Missing model field entirely.
    let v: Value = post(&server, "/v1/messages", json!({"messages": []}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["usage"]["input_tokens"], 1);
}

#[tokio::test]
async fn dropping_server_ends_stalled_streams() {
    let server = MockServer::start().await.unwrap();
    let resp = post(
        &server,
        "/v1/messages",
        anthropic_req("mock:stall_after=0", true),
    )
    .await;
    let mut stream = resp.bytes_stream();
    let first = tokio::time::timeout(GUARD, stream.next()).await.unwrap();
    assert!(first.is_some());
    drop(server);
    let ended = tokio::time::timeout(GUARD, async {
        while let Some(Ok(_)) = stream.next().await {}
    })
    .await;
    assert!(
        ended.is_ok(),
        "stalled stream must end when the server is dropped"
    );
}

#[tokio::test]
async fn request_log_names_the_format_and_client_probes_answer() {
    let server = MockServer::start().await.unwrap();
    let c = client();
    let base = server.base_url();
    post(
        &server,
        "/v1/chat/completions",
        openai_req("mock:tokens=1", false),
    )
    .await;
    // claude-code adds `?beta=true` to the Messages path.
    let resp = post(
        &server,
        "/v1/messages?beta=true",
        anthropic_req("mock:tokens=1", false),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let reqs = server.requests();
    assert_eq!(reqs[0].format, Format::OpenAiChat);
    assert_eq!(reqs[1].format, Format::Anthropic);
    assert_eq!(reqs[1].path, "/v1/messages");
    let raw = request_log(&server).await;
    assert_eq!(raw[0]["format"], "openai-chat");
    assert_eq!(raw[1]["format"], "anthropic");

    let hello = c.head(format!("{base}/api/hello")).send().await.unwrap();
    assert_eq!(hello.status(), 200);
    for path in ["/v1/models", "/models"] {
        let models: Value = c
            .get(format!("{base}{path}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(models["data"][0]["id"], "mock");
        assert_eq!(models["models"], json!([]));
    }
    // Probes are not model calls: the log still holds the two requests.
    assert_eq!(server.requests().len(), 2);
}
