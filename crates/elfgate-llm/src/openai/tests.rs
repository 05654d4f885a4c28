//! The wire's request encoding and stream decoding, tested.

use crate::TokenUsage;
use crate::http::Decoder;
use crate::openai_fast;
use crate::{ContentBlock, LlmError, LlmEvent, LlmFinishReason, LlmRequest, Role, ThinkingLevel};
use serde_json::json;
use std::borrow::Cow;

use super::request::*;
use super::stream::*;
use crate::{LlmMessage, ToolSpec};
use std::collections::VecDeque;

fn decode(frames: &[&str]) -> (Vec<Result<LlmEvent, LlmError>>, bool) {
    let mut d = OpenAiDecoder::default();
    let mut q = VecDeque::new();
    let mut done = false;
    for f in frames {
        match d.on_event("", f, &mut q) {
            Ok(true) => {
                done = true;
                break;
            }
            Ok(false) => {}
            Err(e) => {
                q.push_back(Err(e));
                break;
            }
        }
    }
    (q.into_iter().collect(), done)
}

#[test]
fn the_fast_reader_decodes_what_serde_decodes() {
    let chunks = [
        r#"{"choices":[{"delta":{"content":"tok0 "},"finish_reason":null,"index":0}],"created":1,"id":"x","model":"m","object":"chat.completion.chunk"}"#,
        r#"{"id":"x","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}"#,
        r#"{"choices":[{"delta":{"reasoning_content":"think","reasoning":"other","content":"é😀"}}]}"#,
        r#"{"choices":[{"delta":{"reasoning_content":"","reasoning":"r"}}]}"#,
        r#"{"choices":[{"delta":{"reasoning_content":null,"reasoning":"r"}}]}"#,
        r#"{"choices":[{"delta":null,"finish_reason":"stop"}]}"#,
        r#"{"choices":[{"delta":{},"finish_reason":"length"}],"usage":null,"error":null}"#,
        r#"{"choices":[{"delta":{},"finish_reason":""}]}"#,
        r#"{"choices":[{"finish_reason":"weird"}]}"#,
        r#"{"choices":null}"#,
        r#"{"choices":[]}"#,
        "{}",
        r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt","system_fingerprint":"fp","service_tier":"default","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"x"}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"Hi","extra":true,"n":1.5},"other":false}]}"#,
        " { \"choices\" : [ { \"delta\" : { \"content\" : \"a b\" } } ] , \"n\" : -0.5E-3 } ",
    ];
    for data in chunks {
        assert!(
            openai_fast::read(data.trim()).is_some(),
            "not read fast: {data}"
        );
        let (mut fast, mut slow) = (OpenAiDecoder::default(), OpenAiDecoder::default());
        let (mut qf, mut qs) = (VecDeque::new(), VecDeque::new());
        let f = fast.on_event("", data, &mut qf).map_err(|e| e.to_string());
        let s = slow
            .on_chunk(data.trim(), &mut qs)
            .map_err(|e| e.to_string());
        assert_eq!(f, s, "{data}");
        assert_eq!(format!("{qf:?}"), format!("{qs:?}"), "{data}");
    }
}

/// One decoder over a whole stream (the fast reader's template in use, learned and
/// dropped along the way) decodes each chunk as serde does, errors included.
#[test]
fn a_stream_read_against_its_template_decodes_what_serde_decodes() {
    let tok = |created: u32, field: &str, text: &str| {
        format!(
            r#"{{"choices":[{{"delta":{{"{field}":"{text}"}},"finish_reason":null,"index":0}}],"created":{created},"id":"chatcmpl-1","model":"m","object":"chat.completion.chunk"}}"#
        )
    };
    let mut stream = vec![
        r#"{"choices":[{"delta":{"content":"","role":"assistant"},"finish_reason":null,"index":0}],"created":7,"id":"chatcmpl-1","model":"m","object":"chat.completion.chunk"}"#.to_string(),
        tok(7, "reasoning_content", "let me"),
        tok(7, "reasoning_content", " think"),
        tok(7, "reasoning", "other kind"),
        tok(7, "content", "tok0 "),
        tok(7, "content", "tok1 "),
        tok(7, "content", ""),
        tok(7, "content", "é😀 naïve"),
        tok(7, "content", "a long token that spans several words of eight bytes"),
        // Escapes and control characters: serde's.
        tok(7, "content", r"line\nbreak"),
        tok(7, "content", r#"a \"quote\""#),
        tok(7, "content", r"back\\slash"),
        tok(7, "content", r"\u00e9 and \/"),
        tok(7, "content", "tab	here"),
        // Not JSON once the text is put in: the error is serde's.
        tok(7, "content", r#"x"}}],"#),
        tok(7, "content", r#"x""#),
        tok(7, "content", "tok2 "),
        // The next second: a new template.
        tok(8, "content", "tok3 "),
        tok(8, "content", "tok4 "),
        // The same bytes around a text but trailing garbage, or cut short.
        format!("{} x", tok(8, "content", "tok5 ")),
        tok(8, "content", "tok6 ")[..40].to_string(),
        tok(8, "content", "tok7 "),
        r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{}"}}]},"finish_reason":null,"index":0}],"created":8,"id":"chatcmpl-1","model":"m","object":"chat.completion.chunk"}"#.to_string(),
        tok(8, "content", "tok8 "),
        r#"{"choices":[{"delta":{},"finish_reason":"stop","index":0}],"created":8,"id":"chatcmpl-1","model":"m","object":"chat.completion.chunk"}"#.to_string(),
    ];
    stream.push("[DONE]".into());
    let mut fast = OpenAiDecoder::default();
    let mut slow = OpenAiDecoder::default();
    let mut templated = 0;
    for data in &stream {
        templated += usize::from(fast.fast.matching(data).is_some());
        let (mut qf, mut qs) = (VecDeque::new(), VecDeque::new());
        let f = fast.on_event("", data, &mut qf).map_err(|e| e.to_string());
        let s = if data == "[DONE]" {
            slow.on_event("", data, &mut qs)
        } else {
            slow.on_chunk(data, &mut qs)
        }
        .map_err(|e| e.to_string());
        assert_eq!(f, s, "{data}");
        assert_eq!(format!("{qf:?}"), format!("{qs:?}"), "{data}");
    }
    // The plain tokens that follow one of the same kind and second were read against the
    // template: " think", tok1, "", é😀, the long one, tok2, tok4, tok7, tok8.
    assert_eq!(templated, 9);
}

#[test]
fn body_mapping() {
    let req = LlmRequest {
        model: "gpt-x".into(),
        system: Some("be brief".into()),
        cache_prefix_len: 0,
        messages: vec![
            LlmMessage {
                role: Role::User,
                blocks: vec![ContentBlock::text("hi")],
            },
            LlmMessage {
                role: Role::Assistant,
                blocks: vec![
                    ContentBlock::Thinking {
                        thinking: "hmm".into(),
                        signature: None,
                    },
                    ContentBlock::text("calling"),
                    ContentBlock::ToolUse {
                        id: "c1".into(),
                        name: "read".into(),
                        input: json!({"path": "a"}),
                    },
                    ContentBlock::ToolUse {
                        id: "c2".into(),
                        name: "ls".into(),
                        input: json!({}),
                    },
                ],
            },
            LlmMessage {
                role: Role::Tool,
                blocks: vec![
                    ContentBlock::ToolResult {
                        tool_use_id: "c1".into(),
                        content: "data".into(),
                        is_error: false,
                    },
                    ContentBlock::ToolResult {
                        tool_use_id: "c2".into(),
                        content: "denied".into(),
                        is_error: true,
                    },
                ],
            },
            LlmMessage {
                role: Role::User,
                blocks: vec![
                    ContentBlock::text("look"),
                    ContentBlock::Image {
                        media_type: "image/png".into(),
                        data: Some("AAAA".into()),
                        url: None,
                    },
                    ContentBlock::Image {
                        media_type: "image/jpeg".into(),
                        data: None,
                        url: Some("https://x/y.jpg".into()),
                    },
                ],
            },
        ],
        temperature: Some(0.5),
        max_tokens: Some(100),
        thinking: ThinkingLevel::Medium,
        tools: vec![ToolSpec {
            name: "read".into(),
            description: "reads".into(),
            input_schema: json!({"type": "object"}),
        }],
        ..Default::default()
    };
    let body = build_body(&req, "gpt-x");
    let expected = json!({
        "model": "gpt-x",
        "stream": true,
        "stream_options": {"include_usage": true},
        "temperature": 0.5,
        "max_tokens": 100,
        "reasoning_effort": "medium",
        "tools": [{"type": "function", "function": {"name": "read", "description": "reads", "parameters": {"type": "object"}}}],
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "calling", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a\"}"}},
                {"id": "c2", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": "data"},
            {"role": "tool", "tool_call_id": "c2", "content": "denied"},
            {"role": "user", "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                {"type": "image_url", "image_url": {"url": "https://x/y.jpg"}},
            ]},
        ],
    });
    assert_eq!(body, expected);
}

#[test]
fn minimal_body_omits_optionals() {
    let req = LlmRequest {
        messages: vec![LlmMessage {
            role: Role::User,
            blocks: vec![ContentBlock::text("a"), ContentBlock::text("b")],
        }],
        ..Default::default()
    };
    let body = build_body(&req, "m");
    assert_eq!(
        body,
        json!({
            "model": "m", "stream": true, "stream_options": {"include_usage": true},
            "messages": [{"role": "user", "content": "a\nb"}],
        })
    );
}

#[test]
fn chunk_text_is_borrowed_unless_escaped() {
    let c: Chunk<'_> =
        serde_json::from_str(r#"{"choices":[{"delta":{"content":"plain","reasoning":"a\nb"}}]}"#)
            .unwrap();
    let choices = c.choices.unwrap();
    let delta = choices[0].delta.as_ref().unwrap();
    assert!(matches!(
        delta.content.as_ref().unwrap().0,
        Cow::Borrowed("plain")
    ));
    assert!(matches!(&delta.reasoning.as_ref().unwrap().0, Cow::Owned(s) if s == "a\nb"));
}

#[test]
fn decodes_text_reasoning_tools_usage() {
    let (events, done) = decode(&[
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"reasoning_content":"think"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"reasoning":"ing"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"Hel"}}],"usage":null}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"lo \"q\"\n"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"b","type":"function","function":{"name":"ls","arguments":""}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"read","arguments":"{\"pa"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"th\":1}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":4}}}"#,
        "[DONE]",
        r#"{"choices":[{"delta":{"content":"ignored"}}]}"#,
    ]);
    assert!(done);
    let events: Vec<LlmEvent> = events.into_iter().map(|e| e.unwrap()).collect();
    assert_eq!(
        events,
        // Pieces decoded together (here: all of them) are queued as one delta per kind.
        vec![
            LlmEvent::ThinkingDelta("thinking".into()),
            LlmEvent::TextDelta("Hello \"q\"\n".into()),
            LlmEvent::ToolCall {
                id: "a".into(),
                name: "read".into(),
                arguments: "{\"path\":1}".into()
            },
            LlmEvent::ToolCall {
                id: "b".into(),
                name: "ls".into(),
                arguments: String::new()
            },
            LlmEvent::Finish(LlmFinishReason::ToolCalls),
            LlmEvent::Usage(TokenUsage {
                input_tokens: 10,
                output_tokens: 5,
                cache_read_tokens: 4,
                cache_write_tokens: 0,
            }),
        ]
    );
}

#[test]
fn tool_calls_flushed_at_done_without_finish() {
    let (events, done) = decode(&[
        r#"{"choices":[{"delta":{"tool_calls":[{"id":"x","function":{"name":"f","arguments":"{}"}}]}}]}"#,
        "[DONE]",
    ]);
    assert!(done);
    assert_eq!(
        events.into_iter().map(|e| e.unwrap()).collect::<Vec<_>>(),
        vec![LlmEvent::ToolCall {
            id: "x".into(),
            name: "f".into(),
            arguments: "{}".into()
        }]
    );
}

#[test]
fn error_frame_is_upstream_error() {
    let (events, done) = decode(&[
        r#"{"choices":[{"delta":{"content":"a"}}]}"#,
        r#"{"error":{"message":"server overloaded","type":"server_error"}}"#,
    ]);
    assert!(!done);
    assert!(matches!(&events[1], Err(LlmError::Upstream(m)) if m.contains("server overloaded")));
    let (events, _) = decode(&["{not json"]);
    assert!(matches!(&events[0], Err(LlmError::Protocol(_))));
}
