//! OpenAI Responses API (`POST /v1/responses`), the format codex speaks.
//!
//! A streamed reply is a sequence of typed events (`event: <type>` plus `data:` with the same
//! `type` and a growing `sequence_number`): the response is created, then each output item
//! (reasoning, message, function call) is added, filled by deltas and closed, and the last event
//! carries the whole response object with its usage.

use elfgate_llm::wire::responses::Usage;
use serde_json::{Value, json};

use super::openai_chat::CALL_ID_PREFIX;
use super::{Builder, Content, Cut, End, Plan, Reply, event_frame, last_text_part};
use crate::behavior::fragments;

/// Response id.
const RESPONSE_ID: &str = "resp_mock";
/// Id of the reasoning output item.
const REASONING_ID: &str = "rs_mock";
/// Id of the assistant message output item.
const MESSAGE_ID: &str = "msg_mock";

/// Events of one streamed response, numbered in order.
struct Events {
    b: Builder,
    seq: u64,
}

impl Events {
    fn push(&mut self, kind: &str, mut v: Value, delayed: bool) {
        if let Value::Object(m) = &mut v {
            m.insert("type".into(), Value::String(kind.into()));
            m.insert("sequence_number".into(), self.seq.into());
        }
        self.seq += 1;
        self.b.push(event_frame(kind, &v), delayed);
    }
}

/// A finish override meaning "cut at the token limit" makes the response `incomplete`.
fn incomplete(c: &Content) -> bool {
    matches!(
        c.finish.as_deref(),
        Some("length" | "max_tokens" | "MAX_TOKENS" | "max_output_tokens" | "incomplete")
    )
}

fn usage(c: &Content, r: &Reply<'_>) -> Usage {
    let reasoning = c.thinking.len() as u64;
    Usage::of(
        r.prompt_tokens,
        r.cache.read,
        c.completion_tokens(),
        reasoning,
    )
}

fn response_object(r: &Reply<'_>, status: &str, output: Vec<Value>, usage: Option<Usage>) -> Value {
    json!({
        "id": RESPONSE_ID,
        "object": "response",
        "created_at": r.created,
        "status": status,
        "error": null,
        "incomplete_details": null,
        "model": r.model,
        "output": output,
        "parallel_tool_calls": true,
        "usage": usage,
    })
}

/// The final response object of a reply that was not cut.
fn final_response(c: &Content, r: &Reply<'_>, output: Vec<Value>) -> Value {
    let mut resp = response_object(
        r,
        if incomplete(c) {
            "incomplete"
        } else {
            "completed"
        },
        output,
        Some(usage(c, r)),
    );
    if incomplete(c) {
        resp["incomplete_details"] = json!({"reason": "max_output_tokens"});
    }
    resp
}

/// The encrypted content of a finished reasoning item, when the request asked for it.
pub const ENCRYPTED_REASONING: &str = "enc-mock";

fn reasoning_item(summary: Option<&str>, r: &Reply<'_>) -> Value {
    let done = summary.is_some();
    let summary = match summary {
        Some(text) => json!([{"type": "summary_text", "text": text}]),
        None => json!([]),
    };
    let mut item = json!({"id": REASONING_ID, "type": "reasoning", "summary": summary});
    if done && r.include_encrypted_reasoning {
        item["encrypted_content"] = Value::String(ENCRYPTED_REASONING.into());
    }
    item
}

fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": []})
}

fn message_item(text: Option<&str>) -> Value {
    let (status, content) = match text {
        Some(t) => ("completed", json!([output_text(t)])),
        None => ("in_progress", json!([])),
    };
    json!({"id": MESSAGE_ID, "type": "message", "status": status, "role": "assistant", "content": content})
}

fn function_call_item(c: &Content, i: usize, arguments: Option<&str>) -> Value {
    let name = c.tools.get(i).map(|t| t.name.as_str()).unwrap_or_default();
    json!({
        "id": format!("fc_mock_{i}"),
        "type": "function_call",
        "status": if arguments.is_some() { "completed" } else { "in_progress" },
        "arguments": arguments.unwrap_or_default(),
        "call_id": c.tool_id(CALL_ID_PREFIX, i),
        "name": name,
    })
}

/// `base` with the fields of `extra` added: the events about one item share their locator.
fn merged(base: &Value, extra: Value) -> Value {
    let mut v = base.clone();
    if let (Value::Object(m), Value::Object(x)) = (&mut v, extra) {
        m.extend(x);
    }
    v
}

fn cut_stream(mut e: Events, cut: Cut, r: &Reply<'_>) -> Plan {
    let end = match cut {
        Cut::Drop => End::Drop,
        Cut::Stall => End::Stall,
        Cut::Error => {
            let mut resp = response_object(r, "failed", Vec::new(), None);
            resp["error"] = json!({
                "code": "server_error",
                "message": "mock mid-stream error (error_after)",
            });
            e.push("response.failed", json!({"response": resp}), false);
            End::Complete
        }
    };
    Plan {
        frames: e.b.frames,
        end,
    }
}

fn stream_reasoning(e: &mut Events, c: &Content, r: &Reply<'_>, output: &mut Vec<Value>) {
    let index = output.len();
    e.push(
        "response.output_item.added",
        json!({"output_index": index, "item": reasoning_item(None, r)}),
        false,
    );
    let at = json!({"item_id": REASONING_ID, "output_index": index, "summary_index": 0});
    let with = |extra| merged(&at, extra);
    e.push(
        "response.reasoning_summary_part.added",
        with(json!({"part": {"type": "summary_text", "text": ""}})),
        false,
    );
    for t in &c.thinking {
        e.push(
            "response.reasoning_summary_text.delta",
            with(json!({"delta": t})),
            true,
        );
    }
    let text = c.thinking.concat();
    e.push(
        "response.reasoning_summary_text.done",
        with(json!({"text": text})),
        false,
    );
    e.push(
        "response.reasoning_summary_part.done",
        with(json!({"part": {"type": "summary_text", "text": text}})),
        false,
    );
    let item = reasoning_item(Some(&text), r);
    e.push(
        "response.output_item.done",
        json!({"output_index": index, "item": item}),
        false,
    );
    output.push(item);
}

fn stream_tool(e: &mut Events, c: &Content, i: usize, output: &mut Vec<Value>) {
    let Some(tc) = c.tools.get(i) else {
        return;
    };
    let index = output.len();
    let item_id = format!("fc_mock_{i}");
    e.push(
        "response.output_item.added",
        json!({"output_index": index, "item": function_call_item(c, i, None)}),
        false,
    );
    for frag in fragments(&tc.arguments) {
        e.push(
            "response.function_call_arguments.delta",
            json!({"item_id": item_id, "output_index": index, "delta": frag}),
            false,
        );
    }
    e.push(
        "response.function_call_arguments.done",
        json!({"item_id": item_id, "output_index": index, "arguments": tc.arguments}),
        false,
    );
    let item = function_call_item(c, i, Some(&tc.arguments));
    e.push(
        "response.output_item.done",
        json!({"output_index": index, "item": item}),
        false,
    );
    output.push(item);
}

/// Build the streamed Responses body.
pub(super) fn stream(c: &Content, r: &Reply<'_>) -> Plan {
    let mut e = Events {
        b: Builder {
            frames: Vec::with_capacity(c.thinking.len() + c.text.len() + 16),
        },
        seq: 0,
    };
    let created = response_object(r, "in_progress", Vec::new(), None);
    e.push("response.created", json!({"response": created}), false);
    e.push("response.in_progress", json!({"response": created}), false);
    let mut output = Vec::new();
    if !c.thinking.is_empty() {
        stream_reasoning(&mut e, c, r, &mut output);
    }
    let (text, cut) = c.text_before_cut();
    if !c.text.is_empty() {
        let index = output.len();
        let at = json!({"item_id": MESSAGE_ID, "output_index": index, "content_index": 0});
        let with = |extra| merged(&at, extra);
        e.push(
            "response.output_item.added",
            json!({"output_index": index, "item": message_item(None)}),
            false,
        );
        e.push(
            "response.content_part.added",
            with(json!({"part": output_text("")})),
            false,
        );
        for t in text {
            e.push(
                "response.output_text.delta",
                with(json!({"delta": t, "logprobs": []})),
                true,
            );
        }
        if cut.is_none() {
            let full = c.text.concat();
            e.push(
                "response.output_text.done",
                with(json!({"text": full, "logprobs": []})),
                false,
            );
            e.push(
                "response.content_part.done",
                with(json!({"part": output_text(&full)})),
                false,
            );
            let item = message_item(Some(&full));
            e.push(
                "response.output_item.done",
                json!({"output_index": index, "item": item}),
                false,
            );
            output.push(item);
        }
    }
    if let Some(cut) = cut {
        return cut_stream(e, cut, r);
    }
    for i in 0..c.tools.len() {
        stream_tool(&mut e, c, i, &mut output);
    }
    let kind = if incomplete(c) {
        "response.incomplete"
    } else {
        "response.completed"
    };
    e.push(
        kind,
        json!({"response": final_response(c, r, output)}),
        false,
    );
    Plan {
        frames: e.b.frames,
        end: End::Complete,
    }
}

/// Build the non-streamed response object.
pub(super) fn message(c: &Content, r: &Reply<'_>) -> Value {
    let mut output = Vec::new();
    if !c.thinking.is_empty() {
        output.push(reasoning_item(Some(&c.thinking.concat()), r));
    }
    if !c.text.is_empty() {
        output.push(message_item(Some(&c.text.concat())));
    }
    for (i, tc) in c.tools.iter().enumerate() {
        output.push(function_call_item(c, i, Some(&tc.arguments)));
    }
    final_response(c, r, output)
}

// ---------------------------------------------------------------- request inspection

fn words(s: &str) -> u64 {
    s.split_whitespace().count() as u64
}

/// The texts of a message's `content` (a string, or parts with `text`).
fn texts(content: &Value) -> Vec<&str> {
    match content {
        Value::String(s) => vec![s.as_str()],
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => Vec::new(),
    }
}

fn is_message(item: &Value) -> bool {
    item.get("type")
        .and_then(Value::as_str)
        .unwrap_or("message")
        == "message"
}

/// Words in `instructions`, in the input messages and in the function call outputs.
pub(super) fn prompt_words(body: &Value) -> u64 {
    let mut n = body
        .get("instructions")
        .and_then(Value::as_str)
        .map_or(0, words);
    match body.get("input") {
        Some(Value::String(s)) => n += words(s),
        Some(Value::Array(items)) => {
            for item in items {
                let content = if is_message(item) {
                    item.get("content")
                } else if item.get("type").and_then(Value::as_str) == Some("function_call_output") {
                    item.get("output")
                } else {
                    None
                };
                n += content.map_or(0, |c| texts(c).into_iter().map(words).sum());
            }
        }
        _ => {}
    }
    n
}

/// The input itself when it is a string, else the user's text of the input messages.
pub(super) fn last_user_text(body: &Value) -> String {
    match body.get("input") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(items)) => last_text_part(
            items
                .iter()
                .rev()
                .filter(|i| is_message(i) && i.get("role").and_then(Value::as_str) == Some("user"))
                .map(|i| i.get("content").map(texts).unwrap_or_default()),
        ),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inspection() {
        let body = json!({
            "instructions": "be terse",
            "input": [
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello mock world"}]},
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "not counted"}]},
                {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "a b"},
                {"role": "user", "content": [{"type": "input_text", "text": "again"}]},
            ],
        });
        assert_eq!(prompt_words(&body), 2 + 3 + 2 + 1);
        assert_eq!(last_user_text(&body), "again");
        assert_eq!(last_user_text(&json!({"input": "hi there"})), "hi there");
        assert_eq!(prompt_words(&json!({})), 0);
    }
}
