//! Shared pieces of the wire-format tests: one conversation every format maps, and a body
//! decoded the way a live stream is.

use crate::http::{Decoder, decode_body};
use crate::{
    ContentBlock, LlmError, LlmEvent, LlmMessage, LlmRequest, ProviderKind, Role, ThinkingLevel,
    ToolSpec,
};
use serde_json::json;

/// System prompt, text, images, thinking (signed by a provider of `signed_by`), tool calls (one
/// with malformed arguments), their results (one an error) and a last user turn.
pub(crate) fn conversation(signed_by: ProviderKind) -> LlmRequest {
    LlmRequest {
        model: "gpt-test".into(),
        system: Some("You are terse.".into()),
        cache_prefix_len: 0,
        messages: vec![
            LlmMessage {
                role: Role::User,
                blocks: vec![
                    ContentBlock::text("What is in a.txt?"),
                    ContentBlock::Image {
                        media_type: "image/png".into(),
                        data: Some("iVBORw0KGgo=".into()),
                        url: None,
                    },
                    ContentBlock::Image {
                        media_type: "image/jpeg".into(),
                        data: None,
                        url: Some("https://example.com/b.jpg".into()),
                    },
                ],
            },
            LlmMessage {
                role: Role::Assistant,
                blocks: vec![
                    ContentBlock::Thinking {
                        thinking: "Read it first.".into(),
                        signature: Some(crate::signature::tag(signed_by, "c2lnLTE=")),
                    },
                    ContentBlock::text("Reading it."),
                    ContentBlock::ToolUse {
                        id: "call_1".into(),
                        name: "read_file".into(),
                        input: json!({"path": "a.txt"}),
                    },
                    ContentBlock::ToolUse {
                        id: "call_2".into(),
                        name: "read_file".into(),
                        input: json!("{\"path\":"),
                    },
                ],
            },
            LlmMessage {
                role: Role::Tool,
                blocks: vec![
                    ContentBlock::ToolResult {
                        tool_use_id: "call_1".into(),
                        content: "hello".into(),
                        is_error: false,
                    },
                    ContentBlock::ToolResult {
                        tool_use_id: "call_2".into(),
                        content: "invalid arguments".into(),
                        is_error: true,
                    },
                ],
            },
            LlmMessage {
                role: Role::User,
                blocks: vec![ContentBlock::text("Thanks.")],
            },
        ],
        temperature: Some(0.25),
        max_tokens: Some(1000),
        thinking: ThinkingLevel::Medium,
        tools: vec![ToolSpec {
            name: "read_file".into(),
            description: "Reads a file.".into(),
            input_schema: json!({
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            }),
        }],
        ..Default::default()
    }
}

/// The events of `body`, decoded as a live stream is, cut into small reads.
pub(crate) fn decode(decoder: impl Decoder, body: &[u8]) -> Vec<Result<LlmEvent, LlmError>> {
    decode_body(decoder, body.chunks(7))
}

/// Parses a fixture's JSON.
pub(crate) fn fixture_json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("fixture JSON: {e}"))
}
