//! The wire's request encoding and stream decoding, tested.

use crate::TokenUsage;
use crate::{
    ContentBlock, LlmError, LlmEvent, LlmFinishReason, LlmRequest, ProviderKind, Role,
    ThinkingLevel, ToolChoice,
};
use serde_json::json;

use super::request::*;
use super::stream::*;
use crate::testkit::{conversation, decode, fixture_json};

fn events(body: &str) -> Vec<Result<LlmEvent, LlmError>> {
    decode(ResponsesDecoder::default(), body.as_bytes())
}

#[test]
fn golden_request() {
    let body = build_body(&conversation(ProviderKind::OpenaiResponses), "gpt-test");
    let expected = fixture_json(include_str!("../../tests/fixtures/responses_request.json"));
    assert_eq!(body, expected, "{body:#}");
}

#[test]
fn temperature_is_sent_only_without_a_reasoning_effort() {
    let mut req = conversation(ProviderKind::OpenaiResponses);
    req.temperature = Some(0.5);
    req.thinking = ThinkingLevel::High;
    let body = build_body(&req, "m");
    assert!(body.get("temperature").is_none(), "{body:#}");
    assert_eq!(body["reasoning"]["effort"], "high");
    req.thinking = ThinkingLevel::None;
    let body = build_body(&req, "m");
    assert_eq!(body["temperature"], 0.5);
    assert!(body.get("reasoning").is_none(), "{body:#}");
}

#[test]
fn tool_choice_and_response_format_are_translated_and_stop_is_dropped() {
    let mut req = conversation(ProviderKind::OpenaiResponses);
    req.stop = vec!["END".into()];
    for (choice, want) in [
        (ToolChoice::Auto, json!("auto")),
        (ToolChoice::None, json!("none")),
        (ToolChoice::Required, json!("required")),
        (
            ToolChoice::Tool("read_file".into()),
            json!({"type": "function", "name": "read_file"}),
        ),
    ] {
        req.tool_choice = Some(choice);
        assert_eq!(build_body(&req, "m")["tool_choice"], want);
    }
    req.response_format = Some(json!({"type": "json_schema", "json_schema":
        {"name": "answer", "schema": {"type": "object"}, "strict": true}}));
    let body = build_body(&req, "m");
    assert_eq!(
        body["text"],
        json!({"format": {"type": "json_schema", "name": "answer",
                          "schema": {"type": "object"}, "strict": true}})
    );
    assert!(body.get("stop").is_none());
    req.response_format = Some(json!({"type": "json_object"}));
    assert_eq!(
        build_body(&req, "m")["text"],
        json!({"format": {"type": "json_object"}})
    );
    req.response_format = Some(json!({"type": "something_new"}));
    assert!(build_body(&req, "m").get("text").is_none());
}

#[test]
fn minimal_request_omits_optionals() {
    let req = LlmRequest {
        messages: vec![crate::LlmMessage {
            role: Role::User,
            blocks: vec![ContentBlock::text("hi")],
        }],
        ..Default::default()
    };
    assert_eq!(
        build_body(&req, "m"),
        json!({
            "model": "m", "stream": true, "store": false,
            "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
        })
    );
}

#[test]
fn golden_stream() {
    let got: Vec<LlmEvent> = events(include_str!("../../tests/fixtures/responses_stream.sse"))
        .into_iter()
        .map(|e| e.unwrap())
        .collect();
    assert_eq!(
        got,
        [
            LlmEvent::ThinkingDelta("Look ".into()),
            LlmEvent::ThinkingDelta("first.".into()),
            LlmEvent::TextDelta("Reading ".into()),
            LlmEvent::TextDelta("it.".into()),
            LlmEvent::ToolCall {
                id: "call_1".into(),
                name: "read_file".into(),
                arguments: "{\"path\":\"a.txt\"}".into(),
            },
            LlmEvent::Finish(LlmFinishReason::ToolCalls),
            LlmEvent::Usage(TokenUsage {
                input_tokens: 1,
                output_tokens: 5,
                cache_read_tokens: 0,
                cache_write_tokens: 0,
            }),
        ]
    );
}

#[test]
fn incomplete_response_is_a_length_finish() {
    let got = events(concat!(
        "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"a\"}\n\n",
        "event: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"response\":{\"status\":\"incomplete\",",
        "\"incomplete_details\":{\"reason\":\"max_output_tokens\"},\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n",
    ));
    assert_eq!(
        got,
        [
            Ok(LlmEvent::TextDelta("a".into())),
            Ok(LlmEvent::Finish(LlmFinishReason::Length)),
            Ok(LlmEvent::Usage(TokenUsage {
                input_tokens: 3,
                output_tokens: 1,
                cache_read_tokens: 0,
                cache_write_tokens: 0,
            })),
        ]
    );
}

#[test]
fn failures_are_upstream_errors() {
    let got = events(concat!(
        "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"a\"}\n\n",
        "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\",",
        "\"error\":{\"code\":\"server_error\",\"message\":\"The model failed.\"}}}\n\n",
    ));
    assert_eq!(
        got[1],
        Err(LlmError::Upstream(
            "The model failed. (server_error)".into()
        ))
    );
    let got = events(
        "event: error\ndata: {\"type\":\"error\",\"code\":\"rate_limit_exceeded\",\"message\":\"Slow down\",\"param\":null}\n\n",
    );
    assert_eq!(
        got,
        [Err(LlmError::Upstream(
            "Slow down (rate_limit_exceeded)".into()
        ))]
    );
    // A body cut before response.completed is a dropped stream.
    let got = events("data: {\"type\":\"response.output_text.delta\",\"delta\":\"a\"}\n\n");
    assert!(matches!(got[1], Err(LlmError::Transport(_))), "{got:?}");
}
