//! One streamed LLM call, relayed to the session's events: retries before the first token become
//! `retry` events, text and thinking become `streamDelta` events, an interrupt drops the upstream
//! stream at once.

use elfgate_core::{Delta, DeltaKind, EngineSessionContext, ErrorInfo, EventPayload, RetryInfo};
use elfgate_llm::{
    LlmError, LlmEvent, LlmFinishReason, LlmProvider, LlmRequest, RetryNotice, RetryPolicy,
    stream_with_retry,
};
use futures_util::StreamExt;
use std::time::Instant;

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestedToolCall {
    /// Provider call id.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Raw JSON arguments.
    pub arguments: String,
}

/// What one streamed call produced, complete or not.
#[derive(Debug, Default)]
pub struct TurnOutput {
    /// Answer text.
    pub text: String,
    /// Reasoning text.
    pub thinking: String,
    /// Reasoning signature (Anthropic).
    pub signature: Option<String>,
    /// Tool calls, in order.
    pub tool_calls: Vec<RequestedToolCall>,
    /// Input tokens reported.
    pub input_tokens: u64,
    /// Output tokens reported.
    pub output_tokens: u64,
    /// The provider's finish reason.
    pub finish: Option<LlmFinishReason>,
    /// Set when an interrupt stopped it.
    pub interrupted: bool,
    /// Set when it failed (already reported as an `error` event).
    pub error: Option<ErrorInfo>,
}

fn error_info(e: &LlmError) -> ErrorInfo {
    ErrorInfo::new(e.code(), e.to_string())
}

/// Streams one call and relays it. `started` is the run's start, for time-to-first-token.
pub async fn stream_turn(
    provider: &dyn LlmProvider,
    req: &LlmRequest,
    policy: &RetryPolicy,
    ctx: &EngineSessionContext,
    started: Instant,
) -> TurnOutput {
    let mut out = TurnOutput::default();
    let events = &ctx.events;
    let metrics = &ctx.metrics;
    let mut on_retry = |n: RetryNotice| {
        metrics.retry();
        events.emit(EventPayload::Retry {
            retry: RetryInfo {
                attempt: n.attempt,
                max_attempts: n.max_attempts,
                delay_ms: n.delay.as_millis() as u64,
                reason: n.reason,
            },
        });
    };
    let connect = tokio::select! {
        biased;
        _ = ctx.cancel.cancelled() => Err(LlmError::Cancelled),
        r = stream_with_retry(provider, req, policy, &ctx.cancel, &mut on_retry) => r,
    };
    let mut stream = match connect {
        Ok(s) => s,
        Err(LlmError::Cancelled) => {
            out.interrupted = true;
            return out;
        }
        Err(e) => {
            let info = error_info(&e);
            events.emit(EventPayload::Error {
                error: info.clone(),
            });
            out.error = Some(info);
            return out;
        }
    };
    let mut first_token = true;
    loop {
        let next = tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => {
                out.interrupted = true;
                // Dropping the stream closes the upstream connection now.
                drop(stream);
                return out;
            }
            n = stream.next() => n,
        };
        let Some(item) = next else { break };
        match item {
            Ok(LlmEvent::TextDelta(t)) => {
                if first_token {
                    first_token = false;
                    metrics.observe_ttft(started.elapsed());
                }
                out.text.push_str(&t);
                events.emit(EventPayload::StreamDelta {
                    delta: Delta {
                        kind: DeltaKind::Text,
                        text: t,
                    },
                });
            }
            Ok(LlmEvent::ThinkingDelta(t)) => {
                if first_token {
                    first_token = false;
                    metrics.observe_ttft(started.elapsed());
                }
                out.thinking.push_str(&t);
                events.emit(EventPayload::StreamDelta {
                    delta: Delta {
                        kind: DeltaKind::Thinking,
                        text: t,
                    },
                });
            }
            Ok(LlmEvent::ThinkingSignature(s)) => out.signature = Some(s),
            Ok(LlmEvent::ToolCall {
                id,
                name,
                arguments,
            }) => out.tool_calls.push(RequestedToolCall {
                id,
                name,
                arguments,
            }),
            Ok(LlmEvent::Usage {
                input_tokens,
                output_tokens,
            }) => {
                out.input_tokens = input_tokens;
                out.output_tokens = output_tokens;
            }
            Ok(LlmEvent::Finish(reason)) => out.finish = Some(reason),
            Err(LlmError::Cancelled) => {
                out.interrupted = true;
                return out;
            }
            Err(e) => {
                let info = error_info(&e);
                events.emit(EventPayload::Error {
                    error: info.clone(),
                });
                out.error = Some(info);
                return out;
            }
        }
    }
    out
}
