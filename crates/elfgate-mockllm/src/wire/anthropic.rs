//! Anthropic Messages (`POST /v1/messages`).

use elfgate_llm::wire::anthropic::Usage;
use serde_json::{Value, json};

use super::{Builder, Content, Cut, End, Plan, Reply, SIGNATURE, event_frame};
use crate::behavior::fragments;

/// Message id.
const ANTHROPIC_ID: &str = "msg_mock";
/// Prefix of generated tool call ids.
const TOOL_ID_PREFIX: &str = "toolu_mock_";

fn an_cut(b: &mut Builder, cut: Cut) -> End {
    match cut {
        Cut::Drop => End::Drop,
        Cut::Stall => End::Stall,
        Cut::Error => {
            b.push(
                event_frame(
                    "error",
                    &json!({"type": "error", "error": {
                        "type": "overloaded_error",
                        "message": "Overloaded (mock mid-stream error, error_after)",
                    }}),
                ),
                false,
            );
            End::Complete
        }
    }
}

fn an_block_stop(b: &mut Builder, index: usize) {
    b.push(
        event_frame(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ),
        false,
    );
}

/// The id of the mock's server tool call.
const SERVER_TOOL_ID: &str = "srvtoolu_mock_0";
/// What the mock "encrypts" a search result's page into: the real API's content is opaque, and
/// only the API itself can read it back.
const ENCRYPTED_PREFIX: &str = "mock-encrypted:";

/// The `server_tool_use` block of a search for `query`.
fn server_tool_use(query: &str) -> Value {
    json!({"type": "server_tool_use", "id": SERVER_TOOL_ID, "name": "web_search",
           "input": {"query": query}})
}

/// The `web_search_tool_result` block answering it: two results.
fn search_result(query: &str) -> Value {
    let results: Vec<Value> = (1..=2)
        .map(|i| {
            json!({"type": "web_search_result",
                   "title": format!("Result {i} for {query}"),
                   "url": format!("https://search.mock/{i}?q={}", query.replace(' ', "+")),
                   "encrypted_content": format!("{ENCRYPTED_PREFIX}{query}#{i}"),
                   "page_age": null})
        })
        .collect();
    json!({"type": "web_search_tool_result", "tool_use_id": SERVER_TOOL_ID, "content": results})
}

/// Whether the request offers Anthropic's server-side web search tool.
pub(crate) fn offers_web_search(body: &Value) -> bool {
    body["tools"].as_array().is_some_and(|tools| {
        tools.iter().any(|t| {
            t["type"]
                .as_str()
                .is_some_and(|k| k.starts_with("web_search_"))
        })
    })
}

/// The real API's checks of server tool blocks sent back in the history: a
/// `web_search_tool_result` must follow, in the same assistant message, the `server_tool_use`
/// it answers, and its results must be the ones the API encrypted. The message of the 400
/// when one fails.
pub(crate) fn server_blocks_problem(body: &Value) -> Option<String> {
    for (i, m) in body["messages"].as_array()?.iter().enumerate() {
        let Some(blocks) = m["content"].as_array() else {
            continue;
        };
        let mut uses = Vec::new();
        for b in blocks {
            match b["type"].as_str() {
                Some("server_tool_use") if m["role"] == "assistant" => {
                    uses.push(b["id"].as_str().unwrap_or_default());
                }
                Some("server_tool_use" | "web_search_tool_result") if m["role"] != "assistant" => {
                    return Some(format!(
                        "messages.{i}: server tool blocks may only be in assistant messages"
                    ));
                }
                Some("web_search_tool_result") => {
                    let id = b["tool_use_id"].as_str().unwrap_or_default();
                    if !uses.contains(&id) {
                        return Some(format!(
                            "messages.{i}: web_search_tool_result block with tool_use_id {id} \
                             must follow the server_tool_use block with that id"
                        ));
                    }
                    let opaque = b["content"].as_array().is_some_and(|r| {
                        r.iter().all(|r| {
                            r["encrypted_content"]
                                .as_str()
                                .is_some_and(|c| c.starts_with(ENCRYPTED_PREFIX))
                        })
                    });
                    if !opaque {
                        return Some(format!(
                            "messages.{i}: web_search_tool_result content was modified"
                        ));
                    }
                }
                _ => {}
            }
        }
    }
    None
}

/// The usage object: Anthropic counts cached prompt tokens apart from `input_tokens`.
fn usage(r: &Reply<'_>, output_tokens: u64) -> Usage {
    let cached = r.cache.read + r.cache.write;
    Usage {
        input_tokens: Some(r.prompt_tokens.saturating_sub(cached).max(1)),
        cache_creation_input_tokens: Some(r.cache.write),
        cache_read_input_tokens: Some(r.cache.read),
        output_tokens: Some(output_tokens),
    }
}

/// Build the Anthropic streaming body.
pub(super) fn stream(c: &Content, r: &Reply<'_>) -> Plan {
    let model = r.model;
    let mut b = Builder {
        frames: Vec::with_capacity(c.thinking.len() + c.text.len() + 12),
    };
    b.push(
        event_frame(
            "message_start",
            &json!({"type": "message_start", "message": {
                "id": ANTHROPIC_ID,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": null,
                "stop_sequence": null,
                "usage": usage(r, 1),
            }}),
        ),
        false,
    );
    b.push(event_frame("ping", &json!({"type": "ping"})), false);
    let mut index = 0usize;
    if !c.thinking.is_empty() {
        b.push(
            event_frame(
                "content_block_start",
                &json!({"type": "content_block_start", "index": index,
                        "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
            ),
            false,
        );
        for t in &c.thinking {
            b.push(
                event_frame(
                    "content_block_delta",
                    &json!({"type": "content_block_delta", "index": index,
                            "delta": {"type": "thinking_delta", "thinking": t}}),
                ),
                true,
            );
        }
        b.push(
            event_frame(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "signature_delta", "signature": SIGNATURE}}),
            ),
            false,
        );
        an_block_stop(&mut b, index);
        index += 1;
    }
    if let Some(query) = &c.server_search {
        b.push(
            event_frame(
                "content_block_start",
                &json!({"type": "content_block_start", "index": index,
                        "content_block": {"type": "server_tool_use", "id": SERVER_TOOL_ID,
                                          "name": "web_search", "input": {}}}),
            ),
            false,
        );
        b.push(
            event_frame(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta",
                                  "partial_json": json!({"query": query}).to_string()}}),
            ),
            false,
        );
        an_block_stop(&mut b, index);
        index += 1;
        b.push(
            event_frame(
                "content_block_start",
                &json!({"type": "content_block_start", "index": index,
                        "content_block": search_result(query)}),
            ),
            false,
        );
        an_block_stop(&mut b, index);
        index += 1;
    }
    if !c.text.is_empty() {
        for (i, t) in c.text.iter().enumerate() {
            if let Some((k, cut)) = c.cut
                && k == i
            {
                let end = an_cut(&mut b, cut);
                return Plan {
                    frames: b.frames,
                    end,
                };
            }
            if i == 0 {
                b.push(
                    event_frame(
                        "content_block_start",
                        &json!({"type": "content_block_start", "index": index,
                                "content_block": {"type": "text", "text": ""}}),
                    ),
                    false,
                );
            }
            b.push(
                event_frame(
                    "content_block_delta",
                    &json!({"type": "content_block_delta", "index": index,
                            "delta": {"type": "text_delta", "text": t}}),
                ),
                true,
            );
        }
        if let Some((k, cut)) = c.cut
            && k >= c.text.len()
        {
            let end = an_cut(&mut b, cut);
            return Plan {
                frames: b.frames,
                end,
            };
        }
        an_block_stop(&mut b, index);
        index += 1;
    } else if let Some((_, cut)) = c.cut {
        let end = an_cut(&mut b, cut);
        return Plan {
            frames: b.frames,
            end,
        };
    }
    for (i, tc) in c.tools.iter().enumerate() {
        b.push(
            event_frame(
                "content_block_start",
                &json!({"type": "content_block_start", "index": index,
                        "content_block": {"type": "tool_use", "id": c.tool_id(TOOL_ID_PREFIX, i),
                                          "name": tc.name, "input": {}}}),
            ),
            false,
        );
        for frag in fragments(&tc.arguments) {
            b.push(
                event_frame(
                    "content_block_delta",
                    &json!({"type": "content_block_delta", "index": index,
                            "delta": {"type": "input_json_delta", "partial_json": frag}}),
                ),
                false,
            );
        }
        an_block_stop(&mut b, index);
        index += 1;
    }
    b.push(
        event_frame(
            "message_delta",
            &json!({"type": "message_delta",
                    "delta": {"stop_reason": c.anthropic_stop(), "stop_sequence": c.stop_sequence},
                    "usage": {"output_tokens": c.completion_tokens(),
                              "server_tool_use": {"web_search_requests": u64::from(c.server_search.is_some())}}}),
        ),
        false,
    );
    b.push(
        event_frame("message_stop", &json!({"type": "message_stop"})),
        false,
    );
    Plan {
        frames: b.frames,
        end: End::Complete,
    }
}

/// Build the Anthropic non-streaming message object.
pub(super) fn message(c: &Content, r: &Reply<'_>) -> Value {
    let model = r.model;
    let mut content = Vec::new();
    if !c.thinking.is_empty() {
        content.push(
            json!({"type": "thinking", "thinking": c.thinking.concat(), "signature": SIGNATURE}),
        );
    }
    if let Some(query) = &c.server_search {
        content.push(server_tool_use(query));
        content.push(search_result(query));
    }
    if !c.text.is_empty() {
        content.push(json!({"type": "text", "text": c.text.concat()}));
    }
    for (i, tc) in c.tools.iter().enumerate() {
        // Malformed arguments are passed through as a raw string so clients notice.
        let input = serde_json::from_str::<Value>(&tc.arguments)
            .unwrap_or_else(|_| Value::String(tc.arguments.clone()));
        content.push(
            json!({"type": "tool_use", "id": c.tool_id(TOOL_ID_PREFIX, i),
                            "name": tc.name, "input": input}),
        );
    }
    json!({
        "id": ANTHROPIC_ID,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": c.anthropic_stop(),
        "stop_sequence": c.stop_sequence,
        "usage": usage(r, c.completion_tokens()),
    })
}

/// Anthropic-shaped error body.
pub(super) fn error(status: u16, message: &str) -> Value {
    let kind = match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        400..=499 => "invalid_request_error",
        _ => "api_error",
    };
    json!({"type": "error", "error": {"type": kind, "message": message}})
}
