//! The gateway's front doors end to end: OpenAI chat completions and Anthropic Messages against
//! the mock provider, each request a stored session.

use crate::common;

use common::{Daemon, Opts, poll_until};
use elfgate_mockllm::{MockServer, Outcome};
use serde_json::{Value, json};

async fn post_raw(d: &Daemon, path: &str, body: Value) -> reqwest::Response {
    d.http.post(d.url(path)).json(&body).send().await.unwrap()
}

/// The session a front door's answer names (`x-elfgate-session-id`).
fn session_id(resp: &reqwest::Response) -> String {
    resp.headers()["x-elfgate-session-id"]
        .to_str()
        .unwrap()
        .to_string()
}

fn sse_data(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn chat_completions_answer_stream_and_record_a_session() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let resp = post_raw(
        &d,
        "/v1/chat/completions",
        json!({"model": "mock/mock:tokens=3", "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hello"}]}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let sid = session_id(&resp);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["choices"][0]["message"]["content"], "tok0 tok1 tok2 ");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert_eq!(body["usage"]["completion_tokens"], 3);
    let (status, msgs) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    assert_eq!(status, 200, "{msgs}");
    let text = msgs.to_string();
    assert!(
        text.contains("hello") && text.contains("tok0 tok1 tok2 "),
        "{text}"
    );
    assert_eq!(
        mock.requests()[0].body["messages"][0]["content"],
        "be brief"
    );

    // Streamed, with usage, continuing the same session.
    let resp = d
        .http
        .post(d.url("/v1/chat/completions"))
        .header("x-elfgate-session-id", &sid)
        .json(&json!({"model": "mock/mock:tokens=2", "stream": true,
                      "stream_options": {"include_usage": true},
                      "messages": [{"role": "user", "content": "hello"},
                                   {"role": "assistant", "content": "tok0 tok1 tok2 "},
                                   {"role": "user", "content": "again"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-elfgate-session-id"], sid.as_str());
    let frames = sse_data(&resp.text().await.unwrap());
    assert_eq!(frames.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = frames[..frames.len() - 1]
        .iter()
        .map(|f| serde_json::from_str(f).unwrap())
        .collect();
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "tok0 tok1 ");
    assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"], 2);
    let (_, runs) = d.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(runs["id"], sid.as_str(), "{runs}");
    // The continuation stored only its new last user message, not the history it carried.
    let (_, msgs) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    let users: Vec<&str> = msgs["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["blocks"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(users, ["hello", "again"], "{msgs}");
}

#[tokio::test]
async fn chat_completions_pass_tools_through_and_return_tool_calls() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let resp = post_raw(
        &d,
        "/v1/chat/completions",
        json!({"model": "mock/mock:tokens=1,tool=lookup", "tool_choice": "auto", "stop": ["END"],
               "tools": [{"type": "function", "function": {"name": "lookup",
                          "parameters": {"type": "object"}}}],
               "messages": [{"role": "user", "content": "find it"}]}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    let choice = &body["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{body}");
    assert_eq!(
        choice["message"]["tool_calls"][0]["function"]["name"],
        "lookup"
    );
    let sent = &mock.requests()[0].body;
    assert_eq!(sent["tools"][0]["function"]["name"], "lookup");
    assert_eq!(sent["tool_choice"], "auto");
    assert_eq!(sent["stop"], json!(["END"]));
}

#[tokio::test]
async fn front_doors_answer_bad_input_in_their_callers_format() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let resp = d
        .http
        .post(d.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");
    let resp = post_raw(
        &d,
        "/v1/chat/completions",
        json!({"model": "nope/x", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(resp.status(), 404);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "model_not_found");
    let resp = post_raw(&d, "/v1/chat/completions", json!({"messages": []})).await;
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["param"], "model");
    let resp = post_raw(
        &d,
        "/v1/chat/completions",
        json!({"model": "mock/mock", "n": 2, "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(resp.status(), 400);
    let resp = post_raw(&d, "/v1/messages", json!({"model": 5, "messages": []})).await;
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    // A value of the wrong type deep in a body is named where it is, in each API's style.
    let resp = post_raw(
        &d,
        "/v1/chat/completions",
        json!({"model": "mock/mock", "messages": [{"role": "user", "content": "hi"}],
               "tools": [{"type": "function", "function": {"name": 3}}]}),
    )
    .await;
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["param"], "tools[0].function.name", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("expected a string"),
        "{body}"
    );
    let resp = post_raw(
        &d,
        "/v1/chat/completions",
        json!({"model": "mock/mock", "messages": [{"role": "user", "content": "hi"},
                                                   {"role": "user", "content": 5}]}),
    )
    .await;
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["param"], "messages[1]", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("'content' must be a string or an array of parts"),
        "{body}"
    );
    let resp = post_raw(
        &d,
        "/v1/messages",
        json!({"model": "mock/mock", "max_tokens": 5,
               "messages": [{"role": "user", "content": 5}]}),
    )
    .await;
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("messages.0.content")
            && message.contains("must be a string or an array of blocks"),
        "{body}"
    );
    let resp = d
        .http
        .post(d.url("/v1/messages"))
        .header("content-type", "application/json")
        .body("{\"model\": \"mock/mock\", \"messages\": [")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    // Both doors need the daemon's token like every other route, and store nothing without it.
    let anonymous = reqwest::Client::new();
    for path in ["/v1/chat/completions", "/v1/messages"] {
        let resp = anonymous
            .post(d.url(path))
            .json(&json!({"model": "mock/mock", "max_tokens": 5,
                          "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401, "{path}");
        let body: Value = resp.json().await.unwrap();
        assert!(body["error"]["message"].is_string(), "{path}: {body}");
        // In the door's own shape, which its SDK reads as an authentication error.
        assert_eq!(
            body["error"]["type"], "authentication_error",
            "{path}: {body}"
        );
        if path == "/v1/messages" {
            assert_eq!(body["type"], "error", "{body}");
        }
    }
    let (_, sessions) = d.get("/v1/sessions").await;
    assert_eq!(
        sessions["sessions"].as_array().map(Vec::len),
        Some(0),
        "{sessions}"
    );
    // Fields an API has and the door does not read are tolerated, as the API tolerates them.
    let resp = post_raw(
        &d,
        "/v1/chat/completions",
        json!({"model": "mock/mock", "messages": [{"role": "user", "content": "hi", "name": "ann"}],
               "user": "u-1", "seed": 7, "logit_bias": {}}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    // Still serving.
    let (status, models) = d.get("/v1/models").await;
    assert_eq!(status, 200);
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"mock/mock") && ids.contains(&"elfgate:tinyelf"),
        "{ids:?}"
    );
}

#[tokio::test]
async fn messages_stream_anthropic_events_from_either_kind_of_provider() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    for model in [
        "mock-anthropic/mock:tokens=2,think=2",
        "mock/mock:tokens=2,think=2",
    ] {
        let resp = post_raw(
            &d,
            "/v1/messages",
            json!({"model": model, "max_tokens": 100, "stream": true,
                   "system": [{"type": "text", "text": "be brief"}],
                   "messages": [{"role": "user", "content": "hello"}]}),
        )
        .await;
        assert_eq!(resp.status(), 200);
        let text = resp.text().await.unwrap();
        let events: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("event: "))
            .collect();
        assert_eq!(events.first(), Some(&"message_start"), "{text}");
        assert_eq!(events.last(), Some(&"message_stop"), "{text}");
        assert!(events.contains(&"content_block_delta"), "{text}");
        assert!(
            text.contains("thinking_delta") && text.contains("tok1 "),
            "{text}"
        );
        let resp = post_raw(
            &d,
            "/v1/messages",
            json!({"model": model, "max_tokens": 100,
                   "messages": [{"role": "user", "content": "hello"}]}),
        )
        .await;
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["type"], "message");
        assert_eq!(body["stop_reason"], "end_turn");
        let types: Vec<&str> = body["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["thinking", "text"], "{body}");
    }
    let paths: Vec<String> = mock.requests().iter().map(|r| r.path.clone()).collect();
    assert!(
        paths.iter().any(|p| p == "/v1/messages")
            && paths.iter().any(|p| p == "/v1/chat/completions"),
        "{paths:?}"
    );
}

#[tokio::test]
async fn a_closed_connection_interrupts_the_run_and_the_upstream_stream() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let mut resp = post_raw(
        &d,
        "/v1/chat/completions",
        json!({"model": "mock/mock:tokens=5,stall_after=1", "stream": true,
               "messages": [{"role": "user", "content": "hello"}]}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let sid = session_id(&resp);
    let first = resp.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("chat.completion.chunk"));
    drop(resp);
    poll_until("upstream closed", || {
        (mock.requests()[0].outcome == Outcome::ClientDisconnected).then_some(())
    })
    .await;
    let mut sse = d.events(&sid, None).await;
    let evs = sse.until_n("complete", 1).await;
    assert_eq!(evs.last().unwrap().data["finishReason"], "interrupted");
}

#[tokio::test]
async fn past_a_providers_limit_and_queue_requests_get_429_in_their_callers_format() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: format!(
                r#"
[providers.limited]
kind = "openai"
base_url = "{}/v1"
max_concurrent = 1
requests_per_minute = 600
max_queued = 0
"#,
                mock.base_url()
            ),
            ..Default::default()
        },
    );
    let mut held = post_raw(
        &d,
        "/v1/chat/completions",
        json!({"model": "limited/mock:tokens=5,stall_after=1", "stream": true,
               "messages": [{"role": "user", "content": "hello"}]}),
    )
    .await;
    assert_eq!(held.status(), 200);
    held.chunk().await.unwrap().unwrap();
    let hi = json!([{"role": "user", "content": "hi"}]);
    let resp = post_raw(
        &d,
        "/v1/chat/completions",
        json!({"model": "limited/mock:tokens=1", "messages": hi}),
    )
    .await;
    assert_eq!(resp.status(), 429);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["type"], "rate_limit_error", "{body}");
    let resp = post_raw(
        &d,
        "/v1/messages",
        json!({"model": "limited/mock:tokens=1", "max_tokens": 10, "messages": hi}),
    )
    .await;
    assert_eq!(resp.status(), 429);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["type"], "rate_limit_error", "{body}");
    // Another provider is not held back.
    let resp = post_raw(
        &d,
        "/v1/chat/completions",
        json!({"model": "mock/mock:tokens=1", "messages": hi}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    // The place comes back when the holder leaves.
    drop(held);
    poll_until("upstream closed", || {
        (mock.requests()[0].outcome == Outcome::ClientDisconnected).then_some(())
    })
    .await;
    let mut status = 0;
    for _ in 0..300 {
        let resp = post_raw(
            &d,
            "/v1/chat/completions",
            json!({"model": "limited/mock:tokens=1", "messages": hi}),
        )
        .await;
        status = resp.status().as_u16();
        if status == 200 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(status, 200);
}

#[tokio::test]
async fn cache_control_reaches_an_anthropic_provider_and_not_an_openai_one() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    for model in ["mock-anthropic/mock:tokens=1", "mock/mock:tokens=1"] {
        let resp = post_raw(
            &d,
            "/v1/messages",
            json!({"model": model, "max_tokens": 50,
                   "system": [{"type": "text", "text": "be brief",
                               "cache_control": {"type": "ephemeral"}}],
                   "messages": [{"role": "user", "content": [
                       {"type": "text", "text": "hello", "cache_control": {"type": "ephemeral"}}]}]}),
        )
        .await;
        assert_eq!(resp.status(), 200);
    }
    let reqs = mock.requests();
    let anthropic = &reqs[0].body;
    assert_eq!(
        anthropic["system"][0]["cache_control"]["type"], "ephemeral",
        "{anthropic}"
    );
    assert_eq!(
        anthropic["messages"][0]["content"][0]["cache_control"]["type"],
        "ephemeral"
    );
    assert_eq!(anthropic["model"], "mock:tokens=1");
    let openai = reqs[1].body.to_string();
    assert!(!openai.contains("cache_control"), "{openai}");
    assert_eq!(reqs[1].body["messages"][0]["content"], "be brief");
}

/// The SSE frames of an Anthropic stream as (event, data) pairs.
fn anthropic_events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter_map(|frame| {
            let event = frame.lines().find_map(|l| l.strip_prefix("event: "))?;
            let data = frame.lines().find_map(|l| l.strip_prefix("data: "))?;
            Some((event.to_string(), serde_json::from_str(data).unwrap()))
        })
        .collect()
}

#[tokio::test]
async fn an_anthropic_stream_signs_its_thinking_block_before_the_text_starts() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let resp = post_raw(
        &d,
        "/v1/messages",
        json!({"model": "mock-anthropic/mock:think=2,tokens=2", "max_tokens": 100,
               "stream": true, "thinking": {"type": "enabled", "budget_tokens": 1024},
               "messages": [{"role": "user", "content": "hello"}]}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let sid = session_id(&resp);
    let text = resp.text().await.unwrap();
    let events = anthropic_events(&text);
    let signed = events
        .iter()
        .position(|(_, d)| d["delta"]["type"] == "signature_delta")
        .unwrap_or_else(|| panic!("no signature_delta: {text}"));
    assert_eq!(events[signed].1["delta"]["signature"], "sig-mock");
    assert_eq!(events[signed].1["index"], 0, "{text}");
    let thinking_stop = events
        .iter()
        .position(|(e, d)| e == "content_block_stop" && d["index"] == 0)
        .unwrap();
    let text_start = events
        .iter()
        .position(|(_, d)| d["content_block"]["type"] == "text")
        .unwrap();
    assert!(
        signed < thinking_stop && thinking_stop < text_start,
        "{text}"
    );
    let answer: String = events
        .iter()
        .filter_map(|(_, d)| d["delta"]["text"].as_str())
        .collect();
    assert_eq!(answer, "tok0 tok1 ");

    // The stored answer keeps it too, on its thinking block.
    let (status, msgs) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    assert_eq!(status, 200, "{msgs}");
    let list = msgs.get("messages").unwrap_or(&msgs).as_array().unwrap();
    let answer = list.iter().find(|m| m["role"] == "assistant").unwrap();
    assert_eq!(answer["blocks"][0]["type"], "thinking", "{answer}");
    assert_eq!(answer["blocks"][0]["signature"], "sig-mock", "{answer}");
}

#[tokio::test]
async fn an_anthropic_providers_stop_sequence_reaches_the_anthropic_answers() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    for stream in [false, true] {
        let resp = post_raw(
            &d,
            "/v1/messages",
            json!({"model": "mock-anthropic/mock:tokens=5", "max_tokens": 100,
                   "stream": stream, "stop_sequences": ["STOP", "tok3"],
                   "messages": [{"role": "user", "content": "count"}]}),
        )
        .await;
        assert_eq!(resp.status(), 200);
        let (stop, sequence, answer) = if stream {
            let text = resp.text().await.unwrap();
            let events = anthropic_events(&text);
            let delta = &events
                .iter()
                .find(|(e, _)| e == "message_delta")
                .unwrap_or_else(|| panic!("{text}"))
                .1["delta"];
            let answer: String = events
                .iter()
                .filter_map(|(_, d)| d["delta"]["text"].as_str())
                .collect();
            (
                delta["stop_reason"].clone(),
                delta["stop_sequence"].clone(),
                answer,
            )
        } else {
            let body: Value = resp.json().await.unwrap();
            (
                body["stop_reason"].clone(),
                body["stop_sequence"].clone(),
                body["content"][0]["text"].as_str().unwrap().to_string(),
            )
        };
        assert_eq!(stop, "stop_sequence", "stream {stream}");
        assert_eq!(sequence, "tok3", "stream {stream}");
        assert_eq!(answer, "tok0 tok1 tok2 ", "stream {stream}");
    }
    assert_eq!(
        mock.requests()[0].body["stop_sequences"],
        json!(["STOP", "tok3"])
    );

    // An OpenAI-kind provider does not say which sequence stopped it: a natural end.
    let resp = post_raw(
        &d,
        "/v1/messages",
        json!({"model": "mock/mock:tokens=5", "max_tokens": 100, "stop_sequences": ["tok3"],
               "messages": [{"role": "user", "content": "count"}]}),
    )
    .await;
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["stop_reason"], "end_turn", "{body}");
    assert_eq!(body["stop_sequence"], Value::Null);
    assert_eq!(body["content"][0]["text"], "tok0 tok1 tok2 ");
}

#[tokio::test]
async fn a_responses_provider_gets_no_temperature_with_a_reasoning_effort() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: format!(
                "[providers.mock-responses]\nkind = \"openai-responses\"\n\
                 base_url = \"{}/v1\"\ndefault_model = \"mock\"\n",
                mock.base_url()
            ),
            ..Default::default()
        },
    );
    for effort in [Some("high"), None] {
        let mut body = json!({"model": "mock-responses/mock:tokens=2", "temperature": 0.5,
                              "messages": [{"role": "user", "content": "hi"}]});
        if let Some(e) = effort {
            body["reasoning_effort"] = json!(e);
        }
        let resp = post_raw(&d, "/v1/chat/completions", body).await;
        assert_eq!(resp.status(), 200);
        let answer: Value = resp.json().await.unwrap();
        assert_eq!(answer["choices"][0]["message"]["content"], "tok0 tok1 ");
    }
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 2);
    assert!(reqs.iter().all(|r| r.path == "/v1/responses"));
    let with_effort = &reqs[0].body;
    assert_eq!(with_effort["reasoning"]["effort"], "high", "{with_effort}");
    assert!(with_effort.get("temperature").is_none(), "{with_effort}");
    let without = &reqs[1].body;
    assert_eq!(without["temperature"], 0.5, "{without}");
    assert!(without.get("reasoning").is_none(), "{without}");
}

#[tokio::test]
async fn a_tinyelf_route_without_a_project_runs_and_its_file_and_shell_tools_refuse() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    mock.set_script(
        "noproject",
        serde_json::from_value(json!({"responses": [
            {"toolCalls": [
                {"id": "r1", "name": "read_file", "arguments": "{\"path\": \"Cargo.toml\"}"},
                {"id": "s1", "name": "shell", "arguments": "{\"command\": \"echo ran > ran.txt\"}"}
            ]},
            {"text": "No project here."}
        ]}))
        .unwrap(),
    );
    let resp = post_raw(
        &d,
        "/v1/chat/completions",
        json!({"model": "elfgate:tinyelf:mock/mock:script=noproject",
               "messages": [{"role": "user", "content": "read Cargo.toml and run a command"}]}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let sid = session_id(&resp);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        body["choices"][0]["message"]["content"], "No project here.",
        "{body}"
    );
    // Both calls were refused before they ran, with the reason, and the model saw it.
    let evs = d.events(&sid, Some(0)).await.until_n("complete", 1).await;
    let init = evs.iter().find(|e| e.event == "init").unwrap();
    assert!(init.data["systemInfo"]["projectPath"].is_null(), "{init:?}");
    let ends: Vec<&common::Ev> = evs.iter().filter(|e| e.event == "toolCallEnd").collect();
    assert_eq!(ends.len(), 2, "{evs:?}");
    for e in ends {
        assert_eq!(e.data["status"], "denied", "{e:?}");
        let content = e.data["block"]["content"].as_str().unwrap();
        assert!(
            content.contains("has no projectPath") && content.contains("x-elfgate-project-path"),
            "{content}"
        );
    }
    let second = &mock.requests()[1].body;
    assert!(
        second.to_string().contains("has no projectPath"),
        "the model was not told: {second}"
    );
}

#[tokio::test]
async fn aliases_and_bare_engine_routes_resolve_and_are_listed() {
    let mock = MockServer::start().await.unwrap();
    mock.set_script(
        "alias-agent",
        serde_json::from_value(json!({"responses": [{"text": "agent here"}]})).unwrap(),
    );
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: r#"
[aliases]
single = "mock/mock:tokens=2"
agent = "elfgate:tinyelf:mock/mock:script=alias-agent"
"#
            .into(),
            ..Default::default()
        },
    );
    let (status, models) = d.get("/v1/models").await;
    assert_eq!(status, 200);
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"single") && ids.contains(&"agent"), "{ids:?}");
    let ask =
        |model: &str| json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
    // A single-string alias is a provider route.
    let resp = post_raw(&d, "/v1/chat/completions", ask("single")).await;
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "tok0 tok1 ");
    // An alias may name an engine route.
    let resp = post_raw(&d, "/v1/chat/completions", ask("agent")).await;
    assert_eq!(resp.status(), 200);
    let sid = session_id(&resp);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "agent here");
    let (_, session) = d.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(session["engine"], "tinyelf", "{session}");
    // A bare engine route runs on the default provider and its default model.
    let before = mock.requests().len();
    let resp = post_raw(&d, "/v1/chat/completions", ask("elfgate:st-chat")).await;
    assert_eq!(resp.status(), 200);
    let sid = session_id(&resp);
    let (_, session) = d.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(session["engine"], "st-chat", "{session}");
    let sent = &mock.requests()[before];
    assert_eq!(sent.model, "mock", "{:?}", sent.body);
}

#[tokio::test]
async fn an_alias_falls_back_past_a_refused_connection_and_a_429_and_the_last_failure_is_the_callers_429()
 {
    let mock = MockServer::start().await.unwrap();
    // Nothing listens on the "dead" provider's port: its connection is refused.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}/v1", free.local_addr().unwrap());
    drop(free);
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: format!(
                r#"
[providers.dead]
kind = "openai"
base_url = "{dead}"
default_model = "m"
request_timeout_secs = 5

[aliases]
chain = ["dead/m", "mock/mock:fail=429", "mock/mock:tokens=2"]
limited = ["dead/m", "mock/mock:fail=429"]
"#
            ),
            ..Default::default()
        },
    );
    let ask =
        |model: &str| json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
    let resp = post_raw(&d, "/v1/chat/completions", ask("chain")).await;
    assert_eq!(resp.status(), 200);
    let sid = session_id(&resp);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        body["choices"][0]["message"]["content"], "tok0 tok1 ",
        "{body}"
    );
    // Each switch was announced with the route it went to.
    let evs = d.events(&sid, Some(0)).await.until_n("complete", 1).await;
    let reasons: Vec<String> = evs
        .iter()
        .filter(|e| e.event == "retry")
        .map(|e| e.data["retry"]["reason"].as_str().unwrap().to_string())
        .collect();
    for next in ["mock/mock:fail=429", "mock/mock:tokens=2"] {
        assert!(
            reasons
                .iter()
                .any(|r| r.contains(&format!("falling back to route {next}"))),
            "{reasons:?}"
        );
    }
    // When every route failed, the caller gets the last one's refusal as its own 429.
    let resp = post_raw(&d, "/v1/chat/completions", ask("limited")).await;
    assert_eq!(resp.status(), 429);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["type"], "rate_limit_error", "{body}");
}

/// The upstream call of a new session opens while the session is being stored: with the
/// database's write lock held by another connection, the provider already has the request while
/// the answer still waits for the session's commit. (The lock is released well inside SQLite's
/// busy timeout, so the commit then goes through.)
#[tokio::test]
async fn a_new_sessions_upstream_call_opens_while_the_session_is_being_stored() {
    use sqlx::Connection;
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let url = format!("sqlite://{}", d.dir.join("elfgate.db").display());
    let mut other = sqlx::SqliteConnection::connect(&url).await.unwrap();
    for (path, body) in [
        (
            "/v1/chat/completions",
            json!({"model": "mock/mock:tokens=2,id=gw-early",
                   "messages": [{"role": "user", "content": "hi"}]}),
        ),
        (
            "/v1/sessions",
            json!({"engine": "chat", "model": "mock:tokens=2,id=api-early", "prompt": "hi"}),
        ),
    ] {
        let before = mock.requests().len();
        sqlx::raw_sql("BEGIN IMMEDIATE")
            .execute(&mut other)
            .await
            .unwrap();
        let request = d.http.post(d.url(path)).json(&body).send();
        let answer = tokio::spawn(request);
        poll_until(
            &format!("{path}: the upstream request during the commit"),
            || (mock.requests().len() > before).then_some(()),
        )
        .await;
        assert!(
            !answer.is_finished(),
            "{path} was answered before its commit"
        );
        sqlx::raw_sql("ROLLBACK").execute(&mut other).await.unwrap();
        let resp = answer.await.unwrap().unwrap();
        assert!(resp.status().is_success(), "{path}: {}", resp.status());
        let body: Value = resp.json().await.unwrap();
        // The answer the early call brought is the run's, stored with it.
        let sid = match body["sessionId"].as_str() {
            Some(sid) => sid.to_string(),
            None => {
                assert_eq!(
                    body["choices"][0]["message"]["content"], "tok0 tok1 ",
                    "{body}"
                );
                let (_, list) = d.get("/v1/sessions?limit=1").await;
                list["sessions"][0]["id"].as_str().unwrap().to_string()
            }
        };
        d.events(&sid, Some(0)).await.until_n("complete", 1).await;
        let (_, msgs) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
        assert!(msgs.to_string().contains("tok0 tok1 "), "{path}: {msgs}");
        // One upstream call: the early one was used, not repeated.
        assert_eq!(mock.requests().len(), before + 1, "{path}");
    }
}

fn write_script(mock: &MockServer, name: &str, file: &str) {
    mock.set_script(
        name,
        serde_json::from_value(json!({"responses": [
            {"toolCalls": [{"id": "w1", "name": "write_file",
                            "arguments": json!({"path": file, "content": "x"}).to_string()}]},
            {"text": "done"}
        ]}))
        .unwrap(),
    );
}

async fn gateway_call(
    d: &Daemon,
    model: &str,
    headers: &[(&str, String)],
) -> (u16, Option<String>, Value) {
    let mut req = d.http.post(d.url("/v1/chat/completions")).json(
        &json!({"model": model, "messages": [{"role": "user", "content": "write the file"}]}),
    );
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let sid = resp
        .headers()
        .get("x-elfgate-session-id")
        .map(|v| v.to_str().unwrap().to_string());
    (status, sid, resp.json().await.unwrap())
}

#[tokio::test]
async fn a_gateway_agent_run_takes_its_permission_mode_from_a_header_and_waits_for_no_answer_nobody_can_give()
 {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = tempfile::tempdir().unwrap();
    let project = ("x-elfgate-project-path", dir.path().display().to_string());

    // Default mode and nobody following the session: the write is denied at once, saying what
    // to do, and the answer comes (not after the permission timeout).
    write_script(&mock, "gw-ask", "one.txt");
    let (st, sid, body) = gateway_call(
        &d,
        "elfgate:tinyelf:mock/mock:script=gw-ask",
        std::slice::from_ref(&project),
    )
    .await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "done", "{body}");
    let sid = sid.unwrap();
    assert!(!dir.path().join("one.txt").exists());
    let evs = d.events(&sid, Some(0)).await.until_n("complete", 1).await;
    let end = evs.iter().find(|e| e.event == "toolCallEnd").unwrap();
    assert_eq!(end.data["status"], "denied", "{end:?}");
    let why = end.data["block"]["content"].as_str().unwrap();
    assert!(why.contains("x-elfgate-permission-mode"), "{why}");
    assert!(
        evs.iter().all(|e| e.event != "permissionRequest"),
        "nobody could answer, yet it was asked: {evs:?}"
    );

    // A client that follows the session can answer: then the request is asked and waited for.
    write_script(&mock, "gw-watched", "two.txt");
    let mut sse = d.events(&sid, None).await;
    let d2_http = d.http.clone();
    let url = d.url("/v1/chat/completions");
    let sid2 = sid.clone();
    let call = tokio::spawn(async move {
        let resp = d2_http
            .post(url)
            .header("x-elfgate-session-id", sid2)
            .json(
                &json!({"model": "elfgate:tinyelf:mock/mock:script=gw-watched",
                          "messages": [{"role": "user", "content": "write the file"}]}),
            )
            .send()
            .await
            .unwrap();
        (resp.status().as_u16(), resp.json::<Value>().await.unwrap())
    });
    let asked = sse.until_n("permissionRequest", 1).await;
    let rid = asked.last().unwrap().data["requestId"]
        .as_str()
        .unwrap()
        .to_string();
    common::allow(&d, &sid, &rid).await;
    let (st, body) = call.await.unwrap();
    assert_eq!(st, 200, "{body}");
    assert!(dir.path().join("two.txt").exists());
    drop(sse);

    // The header decides ahead: acceptEdits lets the write through, stored with the session.
    write_script(&mock, "gw-accept", "three.txt");
    let (st, sid3, body) = gateway_call(
        &d,
        "elfgate:tinyelf:mock/mock:script=gw-accept",
        &[
            project.clone(),
            ("x-elfgate-permission-mode", "acceptEdits".into()),
        ],
    )
    .await;
    assert_eq!(st, 200, "{body}");
    assert!(dir.path().join("three.txt").exists());
    let (_, s) = d.get(&format!("/v1/sessions/{}", sid3.unwrap())).await;
    assert_eq!(s["permissionMode"], "acceptEdits", "{s}");

    // A mode that does not exist, and a project that does not: 4xx naming what is wrong.
    let (st, _, body) = gateway_call(
        &d,
        "elfgate:tinyelf:mock/mock:tokens=1",
        &[("x-elfgate-permission-mode", "yolo".into())],
    )
    .await;
    assert_eq!(st, 400, "{body}");
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(msg.contains("x-elfgate-permission-mode"), "{msg}");
    let (st, _, body) = gateway_call(
        &d,
        "elfgate:tinyelf:mock/mock:tokens=1",
        &[(
            "x-elfgate-project-path",
            "/nonexistent/elfgate-gateway-project".into(),
        )],
    )
    .await;
    assert_eq!(st, 422, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("x-elfgate-project-path"),
        "{body}"
    );
}

#[tokio::test]
async fn an_answer_cut_at_the_output_limit_says_so_in_the_result_and_in_each_doors_own_words() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let cut = |name: &str| {
        mock.set_script(
            name,
            serde_json::from_value(json!({"responses": [
                {"text": "cut sho", "finishReason": "length"}
            ]}))
            .unwrap(),
        );
    };
    // The native API: the run's own finish reason stays the loop's, the model's is beside it.
    for (engine, name) in [("chat", "cut-chat"), ("tinyelf", "cut-agent")] {
        cut(name);
        let (sid, run) = d
            .create(
                json!({"engine": engine, "prompt": "go", "model": format!("mock:script={name}")}),
            )
            .await;
        let evs = d.all_events_until_complete_of(&sid, &run).await;
        let stats = &evs.iter().find(|e| e.event == "result").unwrap().data["stats"];
        assert_eq!(stats["finishReason"], "stop", "{engine}: {stats}");
        assert_eq!(
            stats["modelFinishReason"], "max_tokens",
            "{engine}: {stats}"
        );
    }
    // The doors map that field to their APIs' values.
    cut("cut-openai");
    let resp = post_raw(
        &d,
        "/v1/chat/completions",
        json!({"model": "mock/mock:script=cut-openai",
               "messages": [{"role": "user", "content": "go"}]}),
    )
    .await;
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["choices"][0]["finish_reason"], "length", "{body}");
    cut("cut-anthropic");
    let resp = post_raw(
        &d,
        "/v1/messages",
        json!({"model": "elfgate:chat:mock/mock:script=cut-anthropic", "max_tokens": 10,
               "messages": [{"role": "user", "content": "go"}]}),
    )
    .await;
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["stop_reason"], "max_tokens", "{body}");
}
