//! The Gemini API (the format gemini-cli speaks): real HTTP against a `MockServer`.

// Test code: panicking on unexpected errors is the point.

use crate::common;

use common::{assert_dropped_after_two, parse_sse, request_log, wait_for_outcome};
use elfgate_mockllm::{Format, MockServer, Outcome};
use serde_json::{Value, json};

/// A request shaped like gemini-cli's.
fn gemini_req() -> Value {
    json!({
        "contents": [{"role": "user", "parts": [{"text": "hello mock world"}]}],
        "systemInstruction": {"role": "user", "parts": [{"text": "You are terse."}]},
        "tools": [{"functionDeclarations": [{"name": "read_file", "parameters": {"type": "object"}}]}],
        "generationConfig": {"temperature": 0, "thinkingConfig": {"includeThoughts": true}},
    })
}

/// POSTs to `/v1beta/models/{model}:{method}{query}` with the API key in the header.
async fn call(server: &MockServer, model: &str, method: &str, query: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!(
            "{}/v1beta/models/{model}:{method}{query}",
            server.base_url()
        ))
        .header("x-goog-api-key", "g-key")
        .json(&gemini_req())
        .send()
        .await
        .unwrap()
}

async fn stream(server: &MockServer, model: &str) -> reqwest::Response {
    call(server, model, "streamGenerateContent", "?alt=sse").await
}

/// The chunks of a streamed answer: `data:` lines only, each a JSON object.
fn chunks(text: &str) -> Vec<Value> {
    parse_sse(text)
        .into_iter()
        .map(|(event, data)| {
            assert_eq!(event, None, "Gemini sends no event names");
            serde_json::from_str(&data).unwrap()
        })
        .collect()
}

fn parts(chunk: &Value) -> &Vec<Value> {
    chunk["candidates"][0]["content"]["parts"]
        .as_array()
        .unwrap()
}

/// The text of the parts with (`thought` true) or without thoughts, in order.
fn text(chunks: &[Value], thought: bool) -> String {
    chunks
        .iter()
        .flat_map(parts)
        .filter(|p| p["thought"].as_bool().unwrap_or(false) == thought)
        .filter_map(|p| p["text"].as_str())
        .collect()
}

fn finish_reasons(chunks: &[Value]) -> Vec<Option<&str>> {
    chunks
        .iter()
        .map(|c| c["candidates"][0]["finishReason"].as_str())
        .collect()
}

#[tokio::test]
async fn streamed_text_chunk_by_chunk_with_usage() {
    let server = MockServer::start().await.unwrap();
    let resp = stream(&server, "mock:tokens=3").await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let ch = chunks(&resp.text().await.unwrap());
    assert_eq!(ch.len(), 3);
    for c in &ch {
        assert_eq!(c["candidates"][0]["content"]["role"], "model");
        assert_eq!(c["candidates"][0]["index"], 0);
        assert_eq!(c["modelVersion"], "mock:tokens=3");
        assert!(c["responseId"].is_string());
        assert_eq!(parts(c).len(), 1);
    }
    assert_eq!(text(&ch, false), "tok0 tok1 tok2 ");
    assert_eq!(finish_reasons(&ch), vec![None, None, Some("STOP")]);
    // "You are terse." + "hello mock world" = 6 words.
    assert_eq!(
        ch[2]["usageMetadata"],
        json!({"promptTokenCount": 6, "candidatesTokenCount": 3, "totalTokenCount": 9})
    );
    assert_eq!(ch[0]["usageMetadata"]["candidatesTokenCount"], 1);

    let rec = wait_for_outcome(&server, 0, Outcome::Completed).await;
    assert_eq!(rec.format, Format::Gemini);
    assert_eq!(rec.model, "mock:tokens=3");
    assert_eq!(
        rec.path,
        "/v1beta/models/mock:tokens=3:streamGenerateContent"
    );
    assert_eq!(rec.authorization.as_deref(), Some("g-key"));
    assert_eq!(
        rec.body["contents"][0]["parts"][0]["text"],
        "hello mock world"
    );
}

#[tokio::test]
async fn thoughts_text_then_function_call() {
    let server = MockServer::start().await.unwrap();
    let text_body = stream(&server, "mock:tokens=2,think=2,tool=read_file")
        .await
        .text()
        .await
        .unwrap();
    let ch = chunks(&text_body);
    assert_eq!(ch.len(), 5);
    assert_eq!(
        parts(&ch[0])[0],
        json!({"text": "think0 ", "thought": true})
    );
    assert_eq!(text(&ch, true), "think0 think1 ");
    assert_eq!(text(&ch, false), "tok0 tok1 ");
    assert_eq!(
        parts(&ch[4])[0],
        json!({"functionCall": {"name": "read_file", "args": {}}, "thoughtSignature": "c2lnLW1vY2s="})
    );
    assert_eq!(
        finish_reasons(&ch),
        vec![None, None, None, None, Some("STOP")]
    );
    assert_eq!(
        ch[4]["usageMetadata"],
        json!({"promptTokenCount": 6, "candidatesTokenCount": 3, "thoughtsTokenCount": 2,
               "totalTokenCount": 11})
    );
}

#[tokio::test]
async fn fail_with_and_without_count() {
    let server = MockServer::start().await.unwrap();
    let model = "mock:fail=503x1,retry_after=2,id=g-fail";
    let resp = stream(&server, model).await;
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "2");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], 503);
    assert_eq!(body["error"]["status"], "UNAVAILABLE");
    assert!(body["error"]["message"].is_string());
    let resp = stream(&server, model).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.text().await.unwrap().contains("\"STOP\""));

    for _ in 0..2 {
        let resp = call(&server, "mock:fail=429", "generateContent", "").await;
        assert_eq!(resp.status(), 429);
        let body: Value = resp.json().await.unwrap();
        assert_eq!(
            body["error"],
            json!({"code": 429, "message": body["error"]["message"], "status": "RESOURCE_EXHAUSTED"})
        );
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
async fn error_after_sends_an_error_object_in_a_data_line() {
    let server = MockServer::start().await.unwrap();
    let body = stream(&server, "mock:tokens=4,error_after=1")
        .await
        .text()
        .await
        .unwrap();
    let ch = chunks(&body);
    assert_eq!(ch.len(), 2);
    assert_eq!(text(&ch[..1], false), "tok0 ");
    assert_eq!(ch[1]["error"]["code"], 503);
    assert_eq!(ch[1]["error"]["status"], "UNAVAILABLE");
    assert!(!body.contains("finishReason"));
    wait_for_outcome(&server, 0, Outcome::Completed).await;

    let resp = call(&server, "mock:error_after=0", "generateContent", "").await;
    assert_eq!(resp.status(), 503);
}

#[tokio::test]
async fn drop_after_aborts_without_finish_reason() {
    let server = MockServer::start().await.unwrap();
    let resp = stream(&server, "mock:tokens=5,drop_after=2").await;
    let body = assert_dropped_after_two(&server, 0, resp).await;
    assert!(!body.contains("finishReason"));
}

#[tokio::test]
async fn non_streamed_generate_content_with_key_in_query() {
    let server = MockServer::start().await.unwrap();
    let resp = reqwest::Client::new()
        .post(format!(
            "{}/v1beta/models/mock:tokens=2,think=1,tool=ls:generateContent?key=q-key",
            server.base_url()
        ))
        .json(&gemini_req())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(
        v["candidates"][0]["content"],
        json!({"role": "model", "parts": [
            {"text": "think0 ", "thought": true},
            {"text": "tok0 tok1 "},
            {"functionCall": {"name": "ls", "args": {}}, "thoughtSignature": "c2lnLW1vY2s="},
        ]})
    );
    assert_eq!(v["candidates"][0]["finishReason"], "STOP");
    assert_eq!(
        v["usageMetadata"],
        json!({"promptTokenCount": 6, "candidatesTokenCount": 3, "thoughtsTokenCount": 1,
               "totalTokenCount": 10})
    );
    let rec = &server.requests()[0];
    assert_eq!(rec.authorization.as_deref(), Some("q-key"));
    assert_eq!(rec.model, "mock:tokens=2,think=1,tool=ls");
}

#[tokio::test]
async fn echo_uses_last_user_text_and_log_names_the_format() {
    let server = MockServer::start().await.unwrap();
    let body = json!({"contents": [
        {"role": "user", "parts": [{"text": "first"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "ls", "response": {"output": "a b"}}}]},
        {"role": "model", "parts": [{"text": "ok"}]},
        {"role": "user", "parts": [{"text": "<session_context/>"}, {"text": "second question"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "ls", "response": {"output": "c"}}}]},
    ]});
    let resp = reqwest::Client::new()
        .post(format!(
            "{}/v1beta/models/mock:echo=1:streamGenerateContent?alt=sse",
            server.base_url()
        ))
        .json(&body)
        .send()
        .await
        .unwrap();
    let ch = chunks(&resp.text().await.unwrap());
    assert_eq!(text(&ch, false), "You said: second question");

    let raw = request_log(&server).await;
    assert_eq!(raw[0]["format"], "gemini");
    assert_eq!(raw[0]["model"], "mock:echo=1");
}

#[tokio::test]
async fn count_tokens_and_unknown_methods() {
    let server = MockServer::start().await.unwrap();
    let v: Value = call(&server, "mock", "countTokens", "")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v, json!({"totalTokens": 6}));
    let resp = call(&server, "mock", "embedContent", "").await;
    assert_eq!(resp.status(), 404);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["status"], "NOT_FOUND");
    // Neither is a model call.
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn scripted_finish_reason_ids_and_malformed_arguments() {
    let server = MockServer::start().await.unwrap();
    server.set_script(
        "g",
        serde_json::from_value(json!({"responses": [
            {"text": "cut", "finishReason": "length"},
            {"toolCalls": [
                {"id": "call_7", "name": "run_shell_command", "arguments": "{\"command\":\"ls\"}"},
                {"name": "broken", "arguments": "{not json"},
            ]},
        ]}))
        .unwrap(),
    );
    let ch = chunks(&stream(&server, "m:script=g").await.text().await.unwrap());
    assert_eq!(finish_reasons(&ch), vec![Some("MAX_TOKENS")]);

    let ch = chunks(&stream(&server, "m:script=g").await.text().await.unwrap());
    assert_eq!(
        parts(&ch[0])[0],
        json!({"functionCall": {"id": "call_7", "name": "run_shell_command", "args": {"command": "ls"}}, "thoughtSignature": "c2lnLW1vY2s="})
    );
    assert_eq!(
        parts(&ch[1])[0],
        json!({"functionCall": {"name": "broken", "args": "{not json"}})
    );
    assert_eq!(finish_reasons(&ch), vec![None, Some("STOP")]);
}

#[tokio::test]
async fn stall_after_holds_the_stream_until_the_client_leaves() {
    let server = MockServer::start().await.unwrap();
    let resp = stream(&server, "mock:tokens=5,stall_after=1").await;
    let mut body = resp.bytes_stream();
    common::read_until(&mut body, "tok0").await;
    assert_eq!(server.requests()[0].outcome, Outcome::InProgress);
    drop(body);
    wait_for_outcome(&server, 0, Outcome::ClientDisconnected).await;
}
