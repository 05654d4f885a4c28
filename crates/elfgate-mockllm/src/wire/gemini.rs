//! Gemini API (`POST /v1beta/models/{model}:streamGenerateContent?alt=sse` and
//! `:generateContent`), the format gemini-cli speaks.
//!
//! A streamed reply is one `data:` line per chunk, each a whole `GenerateContentResponse` with
//! one candidate holding that chunk's parts (thoughts are text parts marked `"thought": true`,
//! a tool call is one `functionCall` part) and the usage so far. The last chunk carries the
//! `finishReason`.

use elfgate_llm::wire::gemini::UsageMetadata;
use serde_json::{Value, json};

use super::{Builder, Content, Cut, End, Plan, Reply, data_frame, last_text_part};

/// Response id.
const RESPONSE_ID: &str = "mock-response";

/// The thought signature on a reply's first function call: `sig-mock`, base64-encoded as
/// Gemini's are.
pub const THOUGHT_SIGNATURE: &str = "c2lnLW1vY2s=";

/// Google's canonical status name for an HTTP status.
fn status_name(status: u16) -> &'static str {
    match status {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        501 => "NOT_IMPLEMENTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        s if (400..500).contains(&s) => "FAILED_PRECONDITION",
        _ => "INTERNAL",
    }
}

/// Google-shaped error body.
pub(super) fn error(status: u16, message: &str) -> Value {
    json!({"error": {"code": status, "message": message, "status": status_name(status)}})
}

/// Gemini reports a tool call as a normal `STOP`; the other vocabularies map onto it.
fn finish_reason(c: &Content) -> String {
    match c.finish.as_deref() {
        None | Some("stop" | "end_turn" | "tool_calls" | "tool_use") => "STOP".into(),
        Some("length" | "max_tokens") => "MAX_TOKENS".into(),
        Some(other) => other.to_ascii_uppercase(),
    }
}

/// Usage after `thoughts` thinking chunks and `candidates` text chunks and tool calls.
fn usage(r: &Reply<'_>, thoughts: u64, candidates: u64) -> UsageMetadata {
    UsageMetadata {
        prompt_token_count: Some(r.prompt_tokens),
        candidates_token_count: Some(candidates),
        thoughts_token_count: (thoughts > 0).then_some(thoughts),
        total_token_count: Some(r.prompt_tokens + candidates + thoughts),
        cached_content_token_count: None,
    }
}

fn response(
    r: &Reply<'_>,
    parts: Vec<Value>,
    finish: Option<String>,
    usage: UsageMetadata,
) -> Value {
    let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
    if let Some(f) = finish {
        candidate["finishReason"] = Value::String(f);
    }
    json!({
        "candidates": [candidate],
        "usageMetadata": usage,
        "modelVersion": r.model,
        "responseId": RESPONSE_ID,
    })
}

fn function_call_part(c: &Content, i: usize) -> Value {
    let Some(tc) = c.tools.get(i) else {
        return Value::Null;
    };
    // Malformed arguments are passed through as a raw string so clients notice.
    let args = serde_json::from_str::<Value>(&tc.arguments)
        .unwrap_or_else(|_| Value::String(tc.arguments.clone()));
    let mut call = json!({"name": tc.name, "args": args});
    // Gemini leaves ids out; a scripted id is passed on for clients that match on it.
    if let Some(id) = &tc.id {
        call["id"] = Value::String(id.clone());
    }
    let mut part = json!({"functionCall": call});
    // Gemini 3 signs a turn's first function call, thoughts asked for or not, and wants the
    // signature back on that call.
    if i == 0 {
        part["thoughtSignature"] = Value::String(THOUGHT_SIGNATURE.into());
    }
    part
}

/// Build the streamed (`alt=sse`) body.
pub(super) fn stream(c: &Content, r: &Reply<'_>) -> Plan {
    let (text, cut) = c.text_before_cut();
    // (part, is a thought, delayed)
    let mut parts: Vec<(Value, bool, bool)> = Vec::with_capacity(c.thinking.len() + text.len());
    for t in &c.thinking {
        parts.push((json!({"text": t, "thought": true}), true, true));
    }
    for t in text {
        parts.push((json!({"text": t}), false, true));
    }
    if cut.is_none() {
        for i in 0..c.tools.len() {
            parts.push((function_call_part(c, i), false, false));
        }
    }
    let mut b = Builder {
        frames: Vec::with_capacity(parts.len() + 2),
    };
    if parts.is_empty() && cut.is_none() {
        b.push(
            data_frame(&response(
                r,
                Vec::new(),
                Some(finish_reason(c)),
                usage(r, 0, 0),
            )),
            false,
        );
    }
    let last = parts.len().saturating_sub(1);
    let (mut thoughts, mut candidates) = (0, 0);
    for (i, (part, thought, delayed)) in parts.into_iter().enumerate() {
        if thought {
            thoughts += 1;
        } else {
            candidates += 1;
        }
        let finish = (i == last && cut.is_none()).then(|| finish_reason(c));
        b.push(
            data_frame(&response(
                r,
                vec![part],
                finish,
                usage(r, thoughts, candidates),
            )),
            delayed,
        );
    }
    let end = match cut {
        None => End::Complete,
        Some(Cut::Drop) => End::Drop,
        Some(Cut::Stall) => End::Stall,
        Some(Cut::Error) => {
            b.push(
                data_frame(&error(
                    503,
                    "The model is overloaded (mock mid-stream error, error_after).",
                )),
                false,
            );
            End::Complete
        }
    };
    Plan {
        frames: b.frames,
        end,
    }
}

/// Build the non-streamed `GenerateContentResponse`.
pub(super) fn message(c: &Content, r: &Reply<'_>) -> Value {
    let mut parts = Vec::new();
    if !c.thinking.is_empty() {
        parts.push(json!({"text": c.thinking.concat(), "thought": true}));
    }
    if !c.text.is_empty() {
        parts.push(json!({"text": c.text.concat()}));
    }
    for i in 0..c.tools.len() {
        parts.push(function_call_part(c, i));
    }
    let candidates = (c.text.len() + c.tools.len()) as u64;
    let thoughts = c.thinking.len() as u64;
    response(
        r,
        parts,
        Some(finish_reason(c)),
        usage(r, thoughts, candidates),
    )
}

// ---------------------------------------------------------------- request inspection

fn words(s: &str) -> u64 {
    s.split_whitespace().count() as u64
}

/// Words in every string inside `v` (a function response is free-form JSON).
fn words_in_strings(v: &Value) -> u64 {
    match v {
        Value::String(s) => words(s),
        Value::Array(items) => items.iter().map(words_in_strings).sum(),
        Value::Object(map) => map.values().map(words_in_strings).sum(),
        _ => 0,
    }
}

fn parts(content: &Value) -> &[Value] {
    content
        .get("parts")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Non-thought text parts of a content.
fn texts(content: &Value) -> Vec<&str> {
    parts(content)
        .iter()
        .filter(|p| p.get("thought").and_then(Value::as_bool) != Some(true))
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect()
}

/// Words in `systemInstruction`, in the text parts of `contents` and in function responses.
pub(super) fn prompt_words(body: &Value) -> u64 {
    let mut n = match body.get("systemInstruction") {
        Some(Value::String(s)) => words(s),
        Some(si) => texts(si).into_iter().map(words).sum(),
        None => 0,
    };
    for content in body
        .get("contents")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
    {
        n += texts(content).into_iter().map(words).sum::<u64>();
        n += parts(content)
            .iter()
            .filter_map(|p| p.pointer("/functionResponse/response"))
            .map(words_in_strings)
            .sum::<u64>();
    }
    n
}

/// The user's text of `contents` (function responses have none).
pub(super) fn last_user_text(body: &Value) -> String {
    let contents = body
        .get("contents")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    last_text_part(
        contents
            .iter()
            .rev()
            .filter(|c| c.get("role").and_then(Value::as_str) == Some("user"))
            .map(texts),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inspection() {
        let body = json!({
            "systemInstruction": {"parts": [{"text": "be terse"}]},
            "contents": [
                {"role": "user", "parts": [{"text": "hello mock world"}]},
                {"role": "model", "parts": [{"text": "hidden", "thought": true}, {"functionCall": {"name": "ls", "args": {}}}]},
                {"role": "user", "parts": [{"functionResponse": {"name": "ls", "response": {"output": "a b"}}}]},
            ],
        });
        assert_eq!(prompt_words(&body), 2 + 3 + 2);
        assert_eq!(last_user_text(&body), "hello mock world");
        assert_eq!(status_name(429), "RESOURCE_EXHAUSTED");
        assert_eq!(status_name(502), "INTERNAL");
    }
}
