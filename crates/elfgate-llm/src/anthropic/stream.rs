//! Stream decoding: the API's stream events as [`LlmEvent`](crate::LlmEvent)s.

use crate::ProviderKind;
use crate::TokenUsage;
use crate::http::{self, Decoder, EventQueue, Text};
use crate::text_template::TextTemplate;
use crate::wire::anthropic::Usage;
use crate::{LlmError, LlmEvent, LlmFinishReason};
use serde::Deserialize;
use serde_json::{Value, json};
use std::borrow::Cow;
use std::collections::HashMap;

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    message: Option<MessageStart>,
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    content_block: Option<BlockStart>,
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct MessageStart {
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct BlockStart {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    thinking: Option<String>,
    #[serde(default)]
    input: Option<Value>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Text<'a>>,
    // Borrowed (`http::Text`): a delta is parsed per token; its text is copied once, into the
    // queued delta.
    #[serde(default, borrow)]
    text: Option<Text<'a>>,
    #[serde(default, borrow)]
    thinking: Option<Text<'a>>,
    #[serde(default)]
    signature: Option<String>,
    #[serde(default, borrow)]
    partial_json: Option<Text<'a>>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    stop_sequence: Option<String>,
}

struct PendingToolUse {
    /// A `server_tool_use`: run by the provider, stored as its block, never run here.
    server: bool,
    id: String,
    name: String,
    json: String,
    /// Input given in full at block start (non-streaming proxies).
    initial_input: Option<Value>,
}

/// Decodes Messages API stream events.
#[derive(Default)]
pub(crate) struct AnthropicDecoder {
    input_tokens: u64,
    cache_read_tokens: u64,
    cache_write_tokens: u64,
    tools: HashMap<usize, PendingToolUse>,
    /// The last text or thinking delta written without escapes, against which the next ones are
    /// read (`true`: thinking).
    pub(super) delta_template: TextTemplate<bool>,
}

fn stop_reason(s: &str) -> LlmFinishReason {
    match s {
        "end_turn" | "stop_sequence" => LlmFinishReason::Stop,
        "max_tokens" => LlmFinishReason::Length,
        "tool_use" => LlmFinishReason::ToolCalls,
        "refusal" => LlmFinishReason::ContentFilter,
        "pause_turn" => LlmFinishReason::Paused,
        other => LlmFinishReason::Other(other.to_string()),
    }
}

impl AnthropicDecoder {
    /// Keeps a delta event whose text serde borrowed (written without escapes) as the template
    /// for the next ones; forgets the old template otherwise.
    fn learn_delta(&mut self, data: &str, text: &Text<'_>, thinking: bool) {
        match &text.0 {
            Cow::Borrowed(t) => self.delta_template.learn(data, t, thinking),
            Cow::Owned(_) => self.delta_template.forget(),
        }
    }

    /// Keeps the prompt figures of `message_start`, or of a `message_delta` that repeats them
    /// (zeros there do not erase what `message_start` said).
    fn note_usage(&mut self, u: &Usage) {
        if let Some(n) = u.total_input().filter(|n| *n > 0) {
            self.input_tokens = n;
        }
        if let Some(n) = u.cache_read_input_tokens.filter(|n| *n > 0) {
            self.cache_read_tokens = n;
        }
        if let Some(n) = u.cache_creation_input_tokens.filter(|n| *n > 0) {
            self.cache_write_tokens = n;
        }
    }
}

impl Decoder for AnthropicDecoder {
    fn on_event(
        &mut self,
        _event: &str,
        data: &str,
        out: &mut EventQueue,
    ) -> Result<bool, LlmError> {
        if let Some((thinking, text)) = self.delta_template.matching(data) {
            http::push_delta(out, thinking, Text(Cow::Borrowed(text)));
            return Ok(false);
        }
        let ev: Event<'_> = serde_json::from_str(data)
            .map_err(|e| LlmError::Protocol(format!("invalid event JSON: {e}")))?;
        match ev.kind.as_ref() {
            "message_start" => {
                if let Some(u) = ev.message.and_then(|m| m.usage) {
                    self.note_usage(&u);
                    // The prompt's figures are known now: reported at once, so that a call cut
                    // before message_delta (an interrupt, a dropped stream) still counts them.
                    // Output 0: not reported yet (message_start's is a placeholder), so that the
                    // streamed text is counted instead if the call never gets further.
                    if self.input_tokens > 0 {
                        out.push_back(Ok(LlmEvent::Usage(TokenUsage {
                            input_tokens: self.input_tokens,
                            output_tokens: 0,
                            cache_read_tokens: self.cache_read_tokens,
                            cache_write_tokens: self.cache_write_tokens,
                        })));
                    }
                }
            }
            "content_block_start" => {
                let (Some(index), Some(block)) = (ev.index, ev.content_block) else {
                    return Err(LlmError::Protocol(
                        "content_block_start without index or block".into(),
                    ));
                };
                match block.kind.as_str() {
                    kind @ ("tool_use" | "server_tool_use") => {
                        self.tools.insert(
                            index,
                            PendingToolUse {
                                server: kind == "server_tool_use",
                                id: block.id.unwrap_or_default(),
                                name: block.name.unwrap_or_default(),
                                json: String::new(),
                                initial_input: block.input,
                            },
                        );
                    }
                    "text" => {
                        if let Some(t) = block.text {
                            http::push_delta(out, false, Text(t.into()));
                        }
                    }
                    "thinking" => {
                        if let Some(t) = block.thinking {
                            http::push_delta(out, true, Text(t.into()));
                        }
                    }
                    // A server tool's result (web_search_tool_result, …) comes whole at its
                    // start: kept verbatim (its content is encrypted for the provider alone).
                    kind if kind.ends_with("_tool_result") => {
                        let whole: Value = serde_json::from_str(data)
                            .map_err(|e| LlmError::Protocol(format!("invalid event JSON: {e}")))?;
                        if let Some(b) = whole.get("content_block") {
                            out.push_back(Ok(LlmEvent::ProviderBlock {
                                kind: ProviderKind::Anthropic,
                                block: b.clone(),
                            }));
                        }
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let Some(delta) = ev.delta else {
                    return Ok(false);
                };
                match delta.kind.as_ref().map(|k| k.0.as_ref()) {
                    Some("text_delta") => {
                        if let Some(t) = delta.text {
                            self.learn_delta(data, &t, false);
                            http::push_delta(out, false, t);
                        }
                    }
                    Some("thinking_delta") => {
                        if let Some(t) = delta.thinking {
                            self.learn_delta(data, &t, true);
                            http::push_delta(out, true, t);
                        }
                    }
                    Some("signature_delta") => {
                        if let Some(s) = delta.signature {
                            out.push_back(Ok(LlmEvent::ThinkingSignature(s)));
                        }
                    }
                    Some("input_json_delta") => {
                        if let (Some(index), Some(part)) = (ev.index, delta.partial_json)
                            && let Some(tool) = self.tools.get_mut(&index)
                        {
                            tool.json.push_str(&part.0);
                        }
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                if let Some(tool) = ev.index.and_then(|i| self.tools.remove(&i)) {
                    let arguments = if !tool.json.is_empty() {
                        tool.json
                    } else {
                        match tool.initial_input {
                            Some(Value::Object(o)) if !o.is_empty() => Value::Object(o).to_string(),
                            _ => "{}".to_string(),
                        }
                    };
                    if tool.server {
                        let input = serde_json::from_str::<Value>(&arguments)
                            .unwrap_or(Value::String(arguments));
                        out.push_back(Ok(LlmEvent::ProviderBlock {
                            kind: ProviderKind::Anthropic,
                            block: json!({
                                "type": "server_tool_use",
                                "id": tool.id,
                                "name": tool.name,
                                "input": input,
                            }),
                        }));
                    } else {
                        out.push_back(Ok(LlmEvent::ToolCall {
                            id: tool.id,
                            name: tool.name,
                            arguments,
                        }));
                    }
                }
            }
            "message_delta" => {
                if let Some(d) = ev.delta
                    && let Some(reason) = d.stop_reason
                {
                    let finish = match d.stop_sequence {
                        Some(seq) if reason == "stop_sequence" => {
                            LlmFinishReason::StopSequence(seq)
                        }
                        _ => stop_reason(&reason),
                    };
                    out.push_back(Ok(LlmEvent::Finish(finish)));
                }
                if let Some(u) = ev.usage {
                    self.note_usage(&u);
                    if let Some(output) = u.output_tokens {
                        out.push_back(Ok(LlmEvent::Usage(TokenUsage {
                            input_tokens: self.input_tokens,
                            output_tokens: output,
                            cache_read_tokens: self.cache_read_tokens,
                            cache_write_tokens: self.cache_write_tokens,
                        })));
                    }
                }
            }
            "message_stop" => return Ok(true),
            "error" => {
                let message = ev
                    .error
                    .as_ref()
                    .and_then(|e| http::message_from_json(&json!({ "error": e })))
                    .unwrap_or_else(|| "unknown error".to_string());
                return Err(LlmError::Upstream(message));
            }
            _ => {} // ping and future event types
        }
        Ok(false)
    }
}
