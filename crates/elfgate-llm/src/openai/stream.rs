//! Stream decoding: the API's stream events as [`LlmEvent`](crate::LlmEvent)s.

use crate::TokenUsage;
use crate::http::{self, Decoder, EventQueue, Text};
use crate::openai_fast;
use crate::wire::openai::Usage;
use crate::{LlmError, LlmEvent, LlmFinishReason};
use serde::Deserialize;
use serde_json::Value;
use std::borrow::Cow;
use std::collections::BTreeMap;

// Text borrowed where it can be (`http::Text`): a chunk is parsed per token, and its text is
// copied once, into the queued delta. (A SmallVec for `choices` would save an allocation per
// chunk, but it deserializes more slowly; see docs/benchmarks.md.)
#[derive(Deserialize)]
pub(super) struct Chunk<'a> {
    #[serde(default, borrow)]
    pub(super) choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
pub(super) struct Choice<'a> {
    #[serde(default, borrow)]
    pub(super) delta: Option<Delta<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
pub(super) struct Delta<'a> {
    #[serde(default, borrow)]
    pub(super) content: Option<Text<'a>>,
    #[serde(default, borrow)]
    reasoning_content: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub(super) reasoning: Option<Text<'a>>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Deserialize)]
struct ToolCallDelta {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Default)]
struct PendingCall {
    id: String,
    name: String,
    arguments: String,
}

/// Decodes Chat Completions chunks.
#[derive(Default)]
pub(crate) struct OpenAiDecoder {
    calls: BTreeMap<usize, PendingCall>,
    /// The stream's last plain text chunk, against which the next ones are read.
    pub(super) fast: openai_fast::Template,
}

impl OpenAiDecoder {
    fn flush_calls(&mut self, out: &mut EventQueue) {
        for (_, c) in std::mem::take(&mut self.calls) {
            out.push_back(Ok(LlmEvent::ToolCall {
                id: c.id,
                name: c.name,
                arguments: c.arguments,
            }));
        }
    }

    fn merge_call(&mut self, tc: ToolCallDelta) {
        let index = match tc.index {
            Some(i) => i,
            // No index: a new id starts a new call, otherwise continue the last one.
            None => match self.calls.last_key_value() {
                Some((&k, last)) if tc.id.as_deref().is_none_or(|id| id == last.id) => k,
                Some((&k, _)) => k + 1,
                None => 0,
            },
        };
        let entry = self.calls.entry(index).or_default();
        if let Some(id) = tc.id.filter(|s| !s.is_empty()) {
            entry.id = id;
        }
        if let Some(f) = tc.function {
            if let Some(name) = f.name.filter(|s| !s.is_empty()) {
                if entry.name.is_empty() {
                    entry.name = name;
                } else if entry.name != name {
                    entry.name.push_str(&name);
                }
            }
            if let Some(args) = f.arguments {
                entry.arguments.push_str(&args);
            }
        }
    }
}

fn finish_reason(s: &str) -> LlmFinishReason {
    match s {
        "stop" | "end_turn" => LlmFinishReason::Stop,
        "length" | "max_tokens" => LlmFinishReason::Length,
        "tool_calls" | "function_call" => LlmFinishReason::ToolCalls,
        "content_filter" => LlmFinishReason::ContentFilter,
        other => LlmFinishReason::Other(other.to_string()),
    }
}

impl Decoder for OpenAiDecoder {
    fn on_event(
        &mut self,
        _event: &str,
        data: &str,
        out: &mut EventQueue,
    ) -> Result<bool, LlmError> {
        let data = data.trim();
        if data == "[DONE]" {
            self.flush_calls(out);
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        match self.fast.read(data) {
            Some(chunk) => {
                self.on_fast_chunk(chunk, out);
                Ok(false)
            }
            None => self.on_chunk(data, out),
        }
    }
}

impl OpenAiDecoder {
    /// A chunk of the common shape (see [`openai_fast`]): what [`OpenAiDecoder::on_chunk`] does with
    /// the same chunk.
    fn on_fast_chunk(&mut self, chunk: openai_fast::FastChunk<'_>, out: &mut EventQueue) {
        let Some(choice) = chunk.choice else { return };
        if let Some(r) = choice.reasoning_content.or(choice.reasoning) {
            http::push_delta(out, true, Text(Cow::Borrowed(r)));
        }
        if let Some(c) = choice.content {
            http::push_delta(out, false, Text(Cow::Borrowed(c)));
        }
        if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
            self.flush_calls(out);
            out.push_back(Ok(LlmEvent::Finish(finish_reason(reason))));
        }
    }

    /// Any chunk, parsed with serde.
    pub(super) fn on_chunk(&mut self, data: &str, out: &mut EventQueue) -> Result<bool, LlmError> {
        let chunk: Chunk<'_> = serde_json::from_str(data)
            .map_err(|e| LlmError::Protocol(format!("invalid chunk JSON: {e}")))?;
        if let Some(err) = chunk.error.filter(|e| !e.is_null()) {
            let message = http::message_from_json(&serde_json::json!({ "error": err }))
                .unwrap_or_else(|| "unknown error".to_string());
            return Err(LlmError::Upstream(message));
        }
        for choice in chunk.choices.into_iter().flatten() {
            if let Some(delta) = choice.delta {
                if let Some(r) = delta.reasoning_content.or(delta.reasoning) {
                    http::push_delta(out, true, r);
                }
                if let Some(c) = delta.content {
                    http::push_delta(out, false, c);
                }
                for tc in delta.tool_calls.into_iter().flatten() {
                    self.merge_call(tc);
                }
            }
            if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
                self.flush_calls(out);
                out.push_back(Ok(LlmEvent::Finish(finish_reason(&reason))));
            }
        }
        if let Some(u) = chunk.usage {
            out.push_back(Ok(LlmEvent::Usage(TokenUsage {
                input_tokens: u.prompt_tokens.unwrap_or(0),
                output_tokens: u.completion_tokens.unwrap_or(0),
                cache_read_tokens: u.cached_tokens(),
                // OpenAI caches prefixes by itself and reports no writes.
                cache_write_tokens: 0,
            })));
        }
        Ok(false)
    }
}
