//! The wire's request encoding and stream decoding, tested.

use crate::TokenUsage;
use crate::client::Wire;
use crate::signature;
use crate::{
    ContentBlock, LlmError, LlmEvent, LlmFinishReason, LlmRequest, ProviderKind, Role, ToolChoice,
};
use serde_json::json;

use super::request::*;
use super::stream::*;
use super::*;
use crate::LlmMessage;
use crate::testkit::{conversation, decode, fixture_json};

fn events(body: &str) -> Vec<Result<LlmEvent, LlmError>> {
    let mut d = GeminiDecoder::new();
    d.id_prefix = "call".into();
    decode(d, body.as_bytes())
}

#[test]
fn made_up_call_ids_differ_between_responses() {
    assert_ne!(
        GeminiDecoder::new().id_prefix,
        GeminiDecoder::new().id_prefix
    );
}

#[test]
fn thought_signatures_go_back_where_gemini_put_them() {
    let model_turn = |blocks: Vec<ContentBlock>| LlmRequest {
        messages: vec![
            LlmMessage {
                role: Role::User,
                blocks: vec![ContentBlock::text("hi")],
            },
            LlmMessage {
                role: Role::Assistant,
                blocks,
            },
        ],
        ..conversation(ProviderKind::Gemini)
    };
    let signed = |sig: &str| ContentBlock::Thinking {
        thinking: String::new(),
        signature: Some(signature::tag(ProviderKind::Gemini, sig)),
    };
    let call = |id: &str| ContentBlock::ToolUse {
        id: id.into(),
        name: "read_file".into(),
        input: json!({}),
    };
    let parts = |req: &LlmRequest| map_contents(req)[1]["parts"].clone();
    // A signature without thought text (thoughts not asked for) goes on the turn's first call.
    let req = model_turn(vec![signed("s1"), call("c1"), call("c2")]);
    let p = parts(&req);
    assert_eq!(p.as_array().unwrap().len(), 2, "{p}");
    assert_eq!(p[0]["thoughtSignature"], "s1");
    assert!(p[1].get("thoughtSignature").is_none(), "{p}");
    // Without a call: on the last part; the thought text is not sent back.
    let req = model_turn(vec![
        ContentBlock::Thinking {
            thinking: "hmm".into(),
            signature: Some(signature::tag(ProviderKind::Gemini, "s2")),
        },
        ContentBlock::text("a"),
        ContentBlock::text("b"),
    ]);
    assert_eq!(
        parts(&req),
        json!([{"text": "a"}, {"text": "b", "thoughtSignature": "s2"}])
    );
    // Nothing else in the turn: the thought part carries it.
    let req = model_turn(vec![ContentBlock::Thinking {
        thinking: "hmm".into(),
        signature: Some(signature::tag(ProviderKind::Gemini, "s3")),
    }]);
    assert_eq!(
        parts(&req),
        json!([{"text": "hmm", "thought": true, "thoughtSignature": "s3"}])
    );
    // Another kind's signature is not Gemini's to check: the turn goes without it.
    let req = model_turn(vec![
        ContentBlock::Thinking {
            thinking: "hmm".into(),
            signature: Some("anthropic-sig".into()),
        },
        call("c1"),
    ]);
    assert!(parts(&req)[0].get("thoughtSignature").is_none());
}

#[test]
fn tool_choice_stop_and_response_format_reach_their_gemini_fields() {
    let mut req = conversation(ProviderKind::Gemini);
    req.stop = vec!["END".into()];
    for (choice, want) in [
        (ToolChoice::Auto, json!({"mode": "AUTO"})),
        (ToolChoice::None, json!({"mode": "NONE"})),
        (ToolChoice::Required, json!({"mode": "ANY"})),
        (
            ToolChoice::Tool("read_file".into()),
            json!({"mode": "ANY", "allowedFunctionNames": ["read_file"]}),
        ),
    ] {
        req.tool_choice = Some(choice);
        assert_eq!(
            build_body(&req)["toolConfig"]["functionCallingConfig"],
            want
        );
    }
    req.response_format = Some(json!({"type": "json_schema", "json_schema":
        {"name": "answer", "schema": {"type": "object"}}}));
    let config = &build_body(&req)["generationConfig"];
    assert_eq!(config["stopSequences"], json!(["END"]));
    assert_eq!(config["responseMimeType"], "application/json");
    assert_eq!(config["responseJsonSchema"], json!({"type": "object"}));
    req.response_format = Some(json!({"type": "json_object"}));
    let config = &build_body(&req)["generationConfig"];
    assert_eq!(config["responseMimeType"], "application/json");
    assert!(config.get("responseJsonSchema").is_none());
}

#[test]
fn golden_request() {
    let body = build_body(&conversation(ProviderKind::Gemini));
    let expected = fixture_json(include_str!("../../tests/fixtures/gemini_request.json"));
    assert_eq!(body, expected, "{body:#}");
}

#[test]
fn url_takes_the_model_as_one_path_segment() {
    let p = GeminiWire::new("http://h:1/");
    assert_eq!(
        p.url("mock:tokens=3").unwrap(),
        "http://h:1/v1beta/models/mock:tokens=3:streamGenerateContent?alt=sse"
    );
    let p = GeminiWire::new("http://h:1/v1beta");
    assert_eq!(
        p.url("models/a b/c").unwrap(),
        "http://h:1/v1beta/models/a%20b%2Fc:streamGenerateContent?alt=sse"
    );
}

#[test]
fn golden_stream() {
    let got: Vec<LlmEvent> = events(include_str!("../../tests/fixtures/gemini_stream.sse"))
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
            LlmEvent::ThinkingSignature("gemini:c2lnLTE=".into()),
            LlmEvent::ToolCall {
                id: "call_1".into(),
                name: "read_file".into(),
                arguments: "{\"path\":\"a.txt\"}".into(),
            },
            LlmEvent::Finish(LlmFinishReason::ToolCalls),
            // Thoughts count as output.
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
fn finish_reasons_and_generated_call_ids() {
    let chunk = |part: &str, reason: &str| {
        format!(
            "data: {{\"candidates\":[{{\"content\":{{\"role\":\"model\",\"parts\":[{part}]}},\"finishReason\":\"{reason}\"}}]}}\n\n"
        )
    };
    let got = events(&chunk(r#"{"text":"a"}"#, "MAX_TOKENS"));
    assert_eq!(
        got,
        [
            Ok(LlmEvent::TextDelta("a".into())),
            Ok(LlmEvent::Finish(LlmFinishReason::Length))
        ]
    );
    let got = events(&chunk(r#"{"text":"a"}"#, "SAFETY"));
    assert_eq!(got[1], Ok(LlmEvent::Finish(LlmFinishReason::ContentFilter)));
    let got = events(&chunk(r#"{"text":"a"}"#, "MALFORMED_FUNCTION_CALL"));
    assert_eq!(
        got[1],
        Ok(LlmEvent::Finish(LlmFinishReason::Other(
            "MALFORMED_FUNCTION_CALL".into()
        )))
    );
    let got = events(&chunk(
        r#"{"functionCall":{"name":"ls","args":"{bad"}},{"functionCall":{"name":"ls"}}"#,
        "STOP",
    ));
    assert_eq!(
        got,
        [
            Ok(LlmEvent::ToolCall {
                id: "call_1".into(),
                name: "ls".into(),
                arguments: "{bad".into()
            }),
            Ok(LlmEvent::ToolCall {
                id: "call_2".into(),
                name: "ls".into(),
                arguments: "{}".into()
            }),
            Ok(LlmEvent::Finish(LlmFinishReason::ToolCalls)),
        ]
    );
}

#[test]
fn errors_and_cut_streams() {
    let got = events(concat!(
        "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}]}}]}\n\n",
        "data: {\"error\":{\"code\":503,\"message\":\"The model is overloaded.\",\"status\":\"UNAVAILABLE\"}}\n\n",
    ));
    assert_eq!(
        got[1],
        Err(LlmError::Upstream(
            "The model is overloaded. (UNAVAILABLE)".into()
        ))
    );
    // Without a finish reason, the end of the body is a dropped stream.
    let got = events("data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}]}}]}\n\n");
    assert!(matches!(got[1], Err(LlmError::Transport(_))), "{got:?}");
    let got = events("data: {\"promptFeedback\":{\"blockReason\":\"SAFETY\"}}\n\n");
    assert_eq!(got, [Ok(LlmEvent::Finish(LlmFinishReason::ContentFilter))]);
}
