//! Stream decoding: the API's stream events as [`LlmEvent`](crate::LlmEvent)s.

use crate::TokenUsage;
use crate::http::{self, Decoder, EventQueue, Text};
use crate::signature;
use crate::wire::gemini::UsageMetadata;
use crate::{LlmError, LlmEvent, LlmFinishReason, ProviderKind};
use serde::Deserialize;
use serde_json::{Value, json};

// Text borrowed where it can be (`http::Text`): a chunk is parsed per token, and its text is
// copied once, into the queued delta.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Chunk<'a> {
    #[serde(default, borrow)]
    candidates: Option<Vec<Candidate<'a>>>,
    #[serde(default)]
    usage_metadata: Option<UsageMetadata>,
    #[serde(default)]
    prompt_feedback: Option<PromptFeedback>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate<'a> {
    #[serde(default, borrow)]
    content: Option<Content<'a>>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Content<'a> {
    #[serde(default, borrow)]
    parts: Option<Vec<Part<'a>>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Part<'a> {
    #[serde(default, borrow)]
    text: Option<Text<'a>>,
    #[serde(default)]
    thought: Option<bool>,
    #[serde(default)]
    thought_signature: Option<String>,
    #[serde(default)]
    function_call: Option<FunctionCall>,
}

#[derive(Deserialize)]
struct FunctionCall {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    args: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PromptFeedback {
    #[serde(default)]
    block_reason: Option<String>,
}

/// Decodes `streamGenerateContent` chunks. Gemini has no end marker: the stream is complete
/// when the body ends after a chunk with a finish reason.
pub(crate) struct GeminiDecoder {
    finished: bool,
    calls: usize,
    /// Starts the ids made up for calls that come without one: random, so that ids stay unique
    /// over a session's turns (the engines pair results with calls by id).
    pub(super) id_prefix: String,
    /// The latest usage (each chunk carries the running totals).
    usage: Option<UsageMetadata>,
}

impl GeminiDecoder {
    pub(crate) fn new() -> Self {
        GeminiDecoder {
            finished: false,
            calls: 0,
            id_prefix: format!("call_{:012x}", fastrand::u64(..) >> 16),
            usage: None,
        }
    }
}

fn finish_reason(s: &str, saw_tool_call: bool) -> LlmFinishReason {
    match s {
        "STOP" if saw_tool_call => LlmFinishReason::ToolCalls,
        "STOP" => LlmFinishReason::Stop,
        "MAX_TOKENS" => LlmFinishReason::Length,
        "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII" | "IMAGE_SAFETY" => {
            LlmFinishReason::ContentFilter
        }
        other => LlmFinishReason::Other(other.to_string()),
    }
}

impl Decoder for GeminiDecoder {
    fn on_event(
        &mut self,
        _event: &str,
        data: &str,
        out: &mut EventQueue,
    ) -> Result<bool, LlmError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(false);
        }
        let chunk: Chunk<'_> = serde_json::from_str(data)
            .map_err(|e| LlmError::Protocol(format!("invalid chunk JSON: {e}")))?;
        if let Some(err) = chunk.error.filter(|e| !e.is_null()) {
            let message = http::message_from_json(&json!({ "error": err }))
                .unwrap_or_else(|| "unknown error".to_string());
            return Err(LlmError::Upstream(message));
        }
        if let Some(u) = chunk.usage_metadata {
            self.usage = Some(u);
        }
        for cand in chunk.candidates.into_iter().flatten().take(1) {
            for part in cand.content.and_then(|c| c.parts).into_iter().flatten() {
                let thought = part.thought.unwrap_or(false);
                if let Some(t) = part.text {
                    http::push_delta(out, thought, t);
                }
                if let Some(sig) = part.thought_signature.filter(|s| !s.is_empty()) {
                    out.push_back(Ok(LlmEvent::ThinkingSignature(signature::tag(
                        ProviderKind::Gemini,
                        &sig,
                    ))));
                }
                if let Some(call) = part.function_call {
                    self.calls += 1;
                    let arguments = match call.args {
                        // Malformed arguments arrive as a string: pass them on as they are.
                        Some(Value::String(s)) => s,
                        Some(v @ Value::Object(_)) => v.to_string(),
                        _ => "{}".to_string(),
                    };
                    out.push_back(Ok(LlmEvent::ToolCall {
                        // The Gemini API names no id; the engines need one per call.
                        id: call
                            .id
                            .filter(|s| !s.is_empty())
                            .unwrap_or_else(|| format!("{}_{}", self.id_prefix, self.calls)),
                        name: call.name,
                        arguments,
                    }));
                }
            }
            if let Some(reason) = cand.finish_reason.filter(|r| !r.is_empty())
                && !self.finished
            {
                self.finished = true;
                out.push_back(Ok(LlmEvent::Finish(finish_reason(&reason, self.calls > 0))));
            }
        }
        if let Some(reason) = chunk.prompt_feedback.and_then(|f| f.block_reason)
            && !self.finished
        {
            tracing::debug!(%reason, "gemini blocked the prompt");
            self.finished = true;
            out.push_back(Ok(LlmEvent::Finish(LlmFinishReason::ContentFilter)));
        }
        Ok(false)
    }

    fn on_end(&mut self, out: &mut EventQueue) -> bool {
        if !self.finished {
            return false;
        }
        if let Some(u) = self.usage {
            out.push_back(Ok(LlmEvent::Usage(TokenUsage {
                input_tokens: u.prompt_token_count.unwrap_or(0),
                // Thoughts are generated tokens too, counted apart from the candidates'.
                output_tokens: u.candidates_token_count.unwrap_or(0)
                    + u.thoughts_token_count.unwrap_or(0),
                cache_read_tokens: u.cached_content_token_count.unwrap_or(0),
                cache_write_tokens: 0,
            })));
        }
        true
    }
}
