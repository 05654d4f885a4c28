//! OpenAI Chat Completions (`POST /v1/chat/completions`).

use bytes::Bytes;
use elfgate_llm::wire::openai::{PromptTokensDetails, Usage};
use serde_json::{Value, json};

use super::{Builder, Content, Cut, End, Plan, Reply, data_frame};
use crate::behavior::fragments;

/// Completion id.
const OPENAI_ID: &str = "chatcmpl-mock";
/// Prefix of generated tool call ids (shared with the Responses API).
pub(super) const CALL_ID_PREFIX: &str = "call_mock_";

fn oa_chunk(model: &str, created: u64, delta: Value, finish: Value) -> Bytes {
    data_frame(&json!({
        "id": OPENAI_ID,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }))
}

fn oa_cut(b: &mut Builder, cut: Cut) -> End {
    match cut {
        Cut::Drop => End::Drop,
        Cut::Stall => End::Stall,
        Cut::Error => {
            b.push(
                data_frame(&json!({"error": {
                    "message": "mock mid-stream error (error_after)",
                    "type": "server_error",
                    "code": null,
                }})),
                false,
            );
            End::Complete
        }
    }
}

/// Build the OpenAI streaming body.
pub(super) fn stream(c: &Content, r: &Reply<'_>) -> Plan {
    let (model, created) = (r.model, r.created);
    let mut b = Builder {
        frames: Vec::with_capacity(c.thinking.len() + c.text.len() + 6),
    };
    b.push(
        oa_chunk(
            model,
            created,
            json!({"role": "assistant", "content": ""}),
            Value::Null,
        ),
        false,
    );
    for t in &c.thinking {
        b.push(
            oa_chunk(model, created, json!({"reasoning_content": t}), Value::Null),
            true,
        );
    }
    for (i, t) in c.text.iter().enumerate() {
        if let Some((k, cut)) = c.cut
            && k == i
        {
            let end = oa_cut(&mut b, cut);
            return Plan {
                frames: b.frames,
                end,
            };
        }
        b.push(
            oa_chunk(model, created, json!({"content": t}), Value::Null),
            true,
        );
    }
    if let Some((k, cut)) = c.cut
        && k >= c.text.len()
    {
        let end = oa_cut(&mut b, cut);
        return Plan {
            frames: b.frames,
            end,
        };
    }
    for (i, tc) in c.tools.iter().enumerate() {
        b.push(
            oa_chunk(
                model,
                created,
                json!({"tool_calls": [{
                    "index": i,
                    "id": c.tool_id(CALL_ID_PREFIX, i),
                    "type": "function",
                    "function": {"name": tc.name, "arguments": ""},
                }]}),
                Value::Null,
            ),
            false,
        );
        for frag in fragments(&tc.arguments) {
            b.push(
                oa_chunk(
                    model,
                    created,
                    json!({"tool_calls": [{"index": i, "function": {"arguments": frag}}]}),
                    Value::Null,
                ),
                false,
            );
        }
    }
    b.push(
        oa_chunk(model, created, json!({}), Value::String(c.openai_finish())),
        false,
    );
    if r.include_usage {
        b.push(
            data_frame(&json!({
                "id": OPENAI_ID,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [],
                "usage": usage(c, r),
            })),
            false,
        );
    }
    b.push(Bytes::from_static(b"data: [DONE]\n\n"), false);
    Plan {
        frames: b.frames,
        end: End::Complete,
    }
}

/// Build the OpenAI non-streaming response object.
pub(super) fn message(c: &Content, r: &Reply<'_>) -> Value {
    let (model, created) = (r.model, r.created);
    let text = c.text.concat();
    let mut message = json!({
        "role": "assistant",
        "content": if text.is_empty() && !c.tools.is_empty() { Value::Null } else { Value::String(text) },
    });
    if !c.thinking.is_empty() {
        message["reasoning_content"] = Value::String(c.thinking.concat());
    }
    if !c.tools.is_empty() {
        message["tool_calls"] = c
            .tools
            .iter()
            .enumerate()
            .map(|(i, tc)| {
                json!({
                    "id": c.tool_id(CALL_ID_PREFIX, i),
                    "type": "function",
                    "function": {"name": tc.name, "arguments": tc.arguments},
                })
            })
            .collect();
    }
    json!({
        "id": OPENAI_ID,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": c.openai_finish(),
        }],
        "usage": usage(c, r),
    })
}

/// The usage object, with the prompt's cached tokens.
fn usage(c: &Content, r: &Reply<'_>) -> Usage {
    Usage {
        prompt_tokens_details: Some(PromptTokensDetails {
            cached_tokens: Some(r.cache.read),
        }),
        ..Usage::of(r.prompt_tokens, c.completion_tokens())
    }
}

/// OpenAI-shaped error body.
pub(super) fn error(status: u16, message: &str) -> Value {
    let kind = match status {
        429 => "rate_limit_error",
        401 => "authentication_error",
        400..=499 => "invalid_request_error",
        _ => "server_error",
    };
    json!({"error": {"message": message, "type": kind, "code": null}})
}
