//! The wire's request encoding and stream decoding, tested.

use crate::TokenUsage;
use crate::http::Decoder;
use crate::signature;
use crate::{
    ContentBlock, LlmError, LlmEvent, LlmFinishReason, LlmRequest, ProviderKind, Role,
    ThinkingLevel,
};
use serde_json::json;

use super::request::*;
use super::stream::*;
use crate::{LlmMessage, ToolSpec};
use std::collections::VecDeque;

#[test]
fn only_anthropic_signatures_go_back_to_anthropic() {
    let thinking = |sig: String| ContentBlock::Thinking {
        thinking: "hmm".into(),
        signature: Some(sig),
    };
    assert_eq!(
        map_block(&thinking("EqQB".into()), Role::Assistant),
        Some(json!({"type": "thinking", "thinking": "hmm", "signature": "EqQB"}))
    );
    for foreign in [ProviderKind::Gemini, ProviderKind::OpenaiResponses] {
        let block = thinking(signature::tag(foreign, "EqQB"));
        assert_eq!(map_block(&block, Role::Assistant), None, "{foreign:?}");
    }
}

#[test]
fn body_mapping() {
    let req = LlmRequest {
        model: "claude-x".into(),
        system: Some("sys".into()),
        cache_prefix_len: 0,
        messages: vec![
            LlmMessage {
                role: Role::User,
                blocks: vec![
                    ContentBlock::text("hi"),
                    ContentBlock::Image {
                        media_type: "image/png".into(),
                        data: Some("AAAA".into()),
                        url: None,
                    },
                ],
            },
            LlmMessage {
                role: Role::User,
                blocks: vec![ContentBlock::Image {
                    media_type: "image/png".into(),
                    data: None,
                    url: Some("https://x/i.png".into()),
                }],
            },
            LlmMessage {
                role: Role::Assistant,
                blocks: vec![
                    ContentBlock::Thinking {
                        thinking: "t".into(),
                        signature: Some("sig".into()),
                    },
                    ContentBlock::Thinking {
                        thinking: "unsigned".into(),
                        signature: None,
                    },
                    ContentBlock::text(""),
                    ContentBlock::ToolUse {
                        id: "tu1".into(),
                        name: "read".into(),
                        input: json!({"p": 1}),
                    },
                ],
            },
            LlmMessage {
                role: Role::Tool,
                blocks: vec![ContentBlock::ToolResult {
                    tool_use_id: "tu1".into(),
                    content: "ok".into(),
                    is_error: false,
                }],
            },
            LlmMessage {
                role: Role::User,
                blocks: vec![ContentBlock::text("next")],
            },
        ],
        temperature: Some(0.3),
        max_tokens: Some(2000),
        thinking: ThinkingLevel::Medium,
        tools: vec![ToolSpec {
            name: "read".into(),
            description: "reads".into(),
            input_schema: json!({"type": "object"}),
        }],
        ..Default::default()
    };
    let body = build_body(&req, "claude-x");
    let expected = json!({
        "model": "claude-x",
        "max_tokens": 6096,
        "system": "sys",
        "stream": true,
        "thinking": {"type": "enabled", "budget_tokens": 4096},
        "tools": [{"name": "read", "description": "reads", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "hi"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
                {"type": "image", "source": {"type": "url", "url": "https://x/i.png"}},
            ]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "t", "signature": "sig"},
                {"type": "tool_use", "id": "tu1", "name": "read", "input": {"p": 1}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "tu1", "content": "ok", "is_error": false},
                {"type": "text", "text": "next"},
            ]},
        ],
    });
    assert_eq!(body, expected);
}

#[test]
fn defaults_without_thinking() {
    let req = LlmRequest {
        temperature: Some(0.5),
        messages: vec![LlmMessage {
            role: Role::User,
            blocks: vec![ContentBlock::text("x")],
        }],
        ..Default::default()
    };
    let body = build_body(&req, "m");
    assert_eq!(body["max_tokens"], json!(8192));
    assert_eq!(body["temperature"], json!(0.5));
    assert!(body.get("thinking").is_none());
    assert!(body.get("system").is_none());
    assert!(body.get("tools").is_none());
}

/// One decoder over a whole stream (its delta template learned, used and dropped) decodes
/// each event as serde does, errors included.
#[test]
fn a_stream_read_against_its_delta_template_decodes_what_serde_decodes() {
    let delta = |index: u32, kind: &str, field: &str, text: &str| {
        format!(
            r#"{{"type":"content_block_delta","index":{index},"delta":{{"type":"{kind}","{field}":"{text}"}}}}"#
        )
    };
    let text = |t: &str| delta(1, "text_delta", "text", t);
    let frames = vec![
        r#"{"type":"message_start","message":{"id":"m","usage":{"input_tokens":12,"output_tokens":1}}}"#.to_string(),
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#.to_string(),
        delta(0, "thinking_delta", "thinking", "let me"),
        delta(0, "thinking_delta", "thinking", " think"),
        delta(0, "signature_delta", "signature", "SIG"),
        r#"{"type":"content_block_stop","index":0}"#.to_string(),
        r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#.to_string(),
        text("Hi"),
        text(" there"),
        text(""),
        text("é😀 naïve and a longer piece of text"),
        text(r"line\nbreak"),
        text(r#"a \"quote\""#),
        text(r"\u00e9 and \/"),
        text("tab	here"),
        text(r#"x"}}"#),
        text("again"),
        format!("{} x", text("garbage after")),
        text("again")[..30].to_string(),
        // The same bytes around another kind of text: not a text delta.
        delta(1, "text_delta", "partial_json", "p"),
        text("last"),
        r#"{"type":"content_block_stop","index":1}"#.to_string(),
        r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"tu","name":"read","input":{}}}"#.to_string(),
        delta(2, "input_json_delta", "partial_json", "{}"),
        r#"{"type":"content_block_stop","index":2}"#.to_string(),
        r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":7}}"#.to_string(),
        r#"{"type":"message_stop"}"#.to_string(),
    ];
    let (mut fast, mut slow) = (AnthropicDecoder::default(), AnthropicDecoder::default());
    let mut templated = 0;
    for f in &frames {
        templated += usize::from(fast.delta_template.matching(f).is_some());
        // The reference never reads against a template.
        slow.delta_template.forget();
        let (mut qf, mut qs) = (VecDeque::new(), VecDeque::new());
        let a = fast.on_event("", f, &mut qf).map_err(|e| e.to_string());
        let b = slow.on_event("", f, &mut qs).map_err(|e| e.to_string());
        assert_eq!(a, b, "{f}");
        assert_eq!(format!("{qf:?}"), format!("{qs:?}"), "{f}");
    }
    // " think", " there", "", the long one, "last" ("again" follows escapes and errors: it
    // is parsed and makes the template again).
    assert_eq!(templated, 5);
}

#[test]
fn decodes_events() {
    let frames = [
        r#"{"type":"message_start","message":{"id":"m","usage":{"input_tokens":12,"output_tokens":1}}}"#,
        r#"{"type":"ping"}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hm"}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"SIG"}}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#,
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi"}}"#,
        r#"{"type":"content_block_stop","index":1}"#,
        r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"tu","name":"read","input":{}}}"#,
        r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}"#,
        r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"1}"}}"#,
        r#"{"type":"content_block_stop","index":2}"#,
        r#"{"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"tv","name":"ls","input":{}}}"#,
        r#"{"type":"content_block_stop","index":3}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":7}}"#,
        r#"{"type":"message_stop"}"#,
    ];
    let mut d = AnthropicDecoder::default();
    let mut q = VecDeque::new();
    let mut done = false;
    for f in frames {
        done = d.on_event("", f, &mut q).unwrap();
    }
    assert!(done);
    let events: Vec<LlmEvent> = q.into_iter().map(|e| e.unwrap()).collect();
    assert_eq!(
        events,
        vec![
            // The prompt's figures at once, the output's when the message ends.
            LlmEvent::Usage(TokenUsage {
                input_tokens: 12,
                output_tokens: 0,
                cache_read_tokens: 0,
                cache_write_tokens: 0,
            }),
            LlmEvent::ThinkingDelta("hm".into()),
            LlmEvent::ThinkingSignature("SIG".into()),
            LlmEvent::TextDelta("Hi".into()),
            LlmEvent::ToolCall {
                id: "tu".into(),
                name: "read".into(),
                arguments: "{\"a\":1}".into()
            },
            LlmEvent::ToolCall {
                id: "tv".into(),
                name: "ls".into(),
                arguments: "{}".into()
            },
            LlmEvent::Finish(LlmFinishReason::ToolCalls),
            LlmEvent::Usage(TokenUsage {
                input_tokens: 12,
                output_tokens: 7,
                cache_read_tokens: 0,
                cache_write_tokens: 0,
            }),
        ]
    );
}

#[test]
fn stable_prefix_is_a_cached_block() {
    let req = LlmRequest {
        system: Some("stable part\n\ndate: today".into()),
        cache_prefix_len: "stable part".len(),
        messages: vec![
            LlmMessage {
                role: Role::System,
                blocks: vec![ContentBlock::text("extra")],
            },
            LlmMessage {
                role: Role::User,
                blocks: vec![ContentBlock::text("x")],
            },
        ],
        ..Default::default()
    };
    let body = build_body(&req, "m");
    assert_eq!(
        body["system"],
        json!([
            {"type": "text", "text": "stable part", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "\n\ndate: today\n\nextra"},
        ])
    );
    // A length past the text (or inside a character) marks nothing.
    let req = LlmRequest {
        system: Some("é".into()),
        cache_prefix_len: 1,
        ..Default::default()
    };
    assert_eq!(build_body(&req, "m")["system"], json!("é"));
}

#[test]
fn a_named_stop_sequence_is_kept() {
    let mut d = AnthropicDecoder::default();
    let mut q = VecDeque::new();
    for f in [
        r#"{"type":"message_delta","delta":{"stop_reason":"stop_sequence","stop_sequence":"END"},"usage":{}}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{}}"#,
    ] {
        d.on_event("", f, &mut q).unwrap();
    }
    let got: Vec<LlmEvent> = q.into_iter().map(|e| e.unwrap()).collect();
    assert_eq!(
        got,
        [
            LlmEvent::Finish(LlmFinishReason::StopSequence("END".into())),
            LlmEvent::Finish(LlmFinishReason::Stop),
        ]
    );
}

#[test]
fn cache_counters() {
    let frames = [
        r#"{"type":"message_start","message":{"usage":{"input_tokens":5,"cache_creation_input_tokens":100,"cache_read_input_tokens":900,"output_tokens":1}}}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}"#,
    ];
    let mut d = AnthropicDecoder::default();
    let mut q = VecDeque::new();
    for f in frames {
        d.on_event("", f, &mut q).unwrap();
    }
    let usage = q.pop_back().unwrap().unwrap();
    assert_eq!(
        usage,
        LlmEvent::Usage(TokenUsage {
            input_tokens: 1005,
            output_tokens: 3,
            cache_read_tokens: 900,
            cache_write_tokens: 100,
        })
    );
}

#[test]
fn error_event() {
    let mut d = AnthropicDecoder::default();
    let mut q = VecDeque::new();
    let err = d
        .on_event(
            "error",
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            &mut q,
        )
        .unwrap_err();
    assert!(matches!(&err, LlmError::Upstream(m) if m.contains("Overloaded")));
    assert!(err.is_retryable());
}

/// A document this kind cannot take (one kept in the history from another provider) goes as a
/// note saying so, never dropped unsaid; a PDF goes as a document block.
#[test]
fn a_document_anthropic_cannot_take_becomes_a_note() {
    let doc = |media_type: &str| ContentBlock::Document {
        media_type: media_type.into(),
        name: Some("f".into()),
        data: Some("UEsDBA==".into()),
        url: None,
    };
    let req = LlmRequest {
        messages: vec![LlmMessage {
            role: Role::User,
            blocks: vec![doc("application/zip"), doc("application/pdf")],
        }],
        ..Default::default()
    };
    let body = build_body(&req, "m");
    let content = &body["messages"][0]["content"];
    assert_eq!(
        content[0],
        json!({"type": "text",
               "text": "[attachment f (application/zip) not sent: this provider (anthropic) cannot take this file]"})
    );
    assert_eq!(content[1]["type"], "document");
    assert_eq!(content[1]["source"]["media_type"], "application/pdf");
}

/// A server tool's blocks come out whole, never as a tool call to run here; they go back to
/// Anthropic in an assistant message, unchanged, and nowhere else; `pause_turn` is Paused; the
/// request offers the server search tool when asked.
#[test]
fn server_tool_blocks_round_trip() {
    let result = json!({"type": "web_search_tool_result", "tool_use_id": "srv1",
                        "content": [{"type": "web_search_result", "url": "https://a", "title": "A",
                                     "encrypted_content": "E"}]});
    let start = json!({"type": "content_block_start", "index": 1, "content_block": result});
    let frames = [
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use","id":"srv1","name":"web_search","input":{}}}"#.to_string(),
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"query\":\"q\"}"}}"#.to_string(),
        r#"{"type":"content_block_stop","index":0}"#.to_string(),
        start.to_string(),
        r#"{"type":"content_block_stop","index":1}"#.to_string(),
        r#"{"type":"message_delta","delta":{"stop_reason":"pause_turn"},"usage":{}}"#.to_string(),
    ];
    let mut d = AnthropicDecoder::default();
    let mut q = VecDeque::new();
    for f in &frames {
        d.on_event("", f, &mut q).unwrap();
    }
    let got: Vec<LlmEvent> = q.into_iter().map(|e| e.unwrap()).collect();
    let use_block = json!({"type": "server_tool_use", "id": "srv1", "name": "web_search",
                           "input": {"query": "q"}});
    assert_eq!(
        got,
        [
            LlmEvent::ProviderBlock {
                kind: ProviderKind::Anthropic,
                block: use_block.clone()
            },
            LlmEvent::ProviderBlock {
                kind: ProviderKind::Anthropic,
                block: result
            },
            LlmEvent::Finish(LlmFinishReason::Paused),
        ]
    );
    let stored = |kind: ProviderKind, block: &serde_json::Value| ContentBlock::ProviderBlock {
        provider_kind: kind,
        block: block.clone(),
    };
    assert_eq!(
        map_block(
            &stored(ProviderKind::Anthropic, &use_block),
            Role::Assistant
        ),
        Some(use_block.clone())
    );
    assert_eq!(
        map_block(&stored(ProviderKind::Anthropic, &use_block), Role::User),
        None
    );
    assert_eq!(
        map_block(&stored(ProviderKind::Gemini, &use_block), Role::Assistant),
        None
    );
    let req = LlmRequest {
        native_search: true,
        ..Default::default()
    };
    assert_eq!(
        build_body(&req, "m")["tools"],
        json!([{"type": "web_search_20250305", "name": "web_search"}])
    );
}
