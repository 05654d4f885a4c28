//! A gateway caller's built-in `web_search` tool served by the daemon's own search backend
//! (`[tools.web_search]`), for a provider that cannot search itself: the model is offered a
//! function tool of that name, each call it makes is searched here and answered with the results,
//! and the model is called again with them, until it answers or calls one of the caller's own
//! tools. The caller sees the text of every call and none of the searches (they are not its
//! tools to run); the session's followers see a `processing` note per search.

use super::ChatEngine;
use crate::streaming::{RequestedToolCall, TurnOutput};
use elfgate_core::{ContentBlock, EngineSessionContext, EventPayload, Role};
use elfgate_llm::{FirstAttempt, LlmMessage, LlmRequest, ToolChoice, ToolSpec};
use std::sync::Arc;
use std::time::Instant;

/// The name the model calls the served search by: the built-in tool's own.
pub const SERVED_SEARCH: &str = "web_search";

/// Rounds of searches one gateway call may make; the call after the last is sent without the
/// search tool, so that the model answers with what it found.
const MAX_SEARCH_ROUNDS: usize = 4;

/// The function tool offered to the model in place of the caller's built-in `web_search`.
pub fn served_search_spec() -> ToolSpec {
    ToolSpec {
        name: SERVED_SEARCH.to_string(),
        description: "Search the web; returns results as title, URL and snippet.".to_string(),
        input_schema: serde_json::json!({
            "type": "object",
            "properties": {"query": {"type": "string", "description": "What to search the web for."}},
            "required": ["query"],
        }),
    }
}

impl ChatEngine {
    /// The gateway call's model calls with its searches served in between; the output of all of
    /// them as one (text, reasoning and tokens summed, the last call's end and tool calls), and
    /// the model of the last.
    pub(super) async fn turns_with_served_search(
        &self,
        ctx: &EngineSessionContext,
        route: super::Route,
        mut req: Arc<LlmRequest>,
        fallbacks: Vec<(String, String)>,
        started: Instant,
        mut first: Option<FirstAttempt>,
    ) -> (TurnOutput, String) {
        let mut total = TurnOutput::default();
        let mut round = 0;
        loop {
            let (mut turn, model) = self
                .call(
                    ctx,
                    route.clone(),
                    req.clone(),
                    fallbacks.clone(),
                    started,
                    first.take(),
                )
                .await;
            let (searches, others): (Vec<RequestedToolCall>, Vec<RequestedToolCall>) = turn
                .tool_calls
                .drain(..)
                .partition(|c| c.name == SERVED_SEARCH);
            let go_on = !searches.is_empty()
                && others.is_empty()
                && turn.error.is_none()
                && !turn.interrupted
                && round < MAX_SEARCH_ROUNDS;
            if !go_on {
                if !searches.is_empty() {
                    // Beside the caller's own calls (which the caller answers) a search cannot
                    // be answered in the same turn: the caller's calls go out alone.
                    tracing::info!(
                        session = %ctx.session_id(),
                        "a web_search call beside the caller's own tool calls was left out"
                    );
                }
                turn.tool_calls = others;
                merge(&mut total, turn);
                return (total, model);
            }
            round += 1;
            let mut next = (*req).clone();
            let mut asked: Vec<ContentBlock> = turn.thinking_block().into_iter().collect();
            asked.extend(turn.provider_blocks.iter().cloned());
            if !turn.text.is_empty() {
                asked.push(ContentBlock::text(turn.text.clone()));
            }
            let mut answers = Vec::new();
            for call in &searches {
                let input = serde_json::from_str(&call.arguments)
                    .unwrap_or(serde_json::Value::String(call.arguments.clone()));
                let (content, is_error) = self.serve_search(ctx, &input).await;
                asked.push(ContentBlock::ToolUse {
                    id: call.id.clone(),
                    name: call.name.clone(),
                    input,
                });
                answers.push(ContentBlock::ToolResult {
                    tool_use_id: call.id.clone(),
                    content,
                    is_error,
                });
            }
            if ctx.cancel.is_cancelled() {
                turn.interrupted = true;
                merge(&mut total, turn);
                return (total, model);
            }
            next.messages.push(LlmMessage {
                role: Role::Assistant,
                blocks: asked,
            });
            next.messages.push(LlmMessage {
                role: Role::Tool,
                blocks: answers,
            });
            // A choice that named the search was met; the last round goes without the tool.
            if matches!(&next.tool_choice, Some(ToolChoice::Tool(n)) if n == SERVED_SEARCH) {
                next.tool_choice = Some(ToolChoice::Auto);
            }
            if round == MAX_SEARCH_ROUNDS {
                next.tools.retain(|t| t.name != SERVED_SEARCH);
                if next.tools.is_empty() && next.tool_choice == Some(ToolChoice::Required) {
                    next.tool_choice = None;
                }
            }
            merge(&mut total, turn);
            req = Arc::new(next);
        }
    }

    /// One served search: the results as the model reads them, or why there are none (an
    /// error result, which the model sees as such).
    async fn serve_search(
        &self,
        ctx: &EngineSessionContext,
        input: &serde_json::Value,
    ) -> (String, bool) {
        let note = |message: String| ctx.events.emit(EventPayload::Processing { message });
        let query = input["query"]
            .as_str()
            .unwrap_or_default()
            .trim()
            .to_string();
        if query.is_empty() {
            return (
                "Error: web_search needs a non-empty 'query'".to_string(),
                true,
            );
        }
        let Some(search) = &self.search else {
            return (
                "Error: no search backend is configured on this daemon".to_string(),
                true,
            );
        };
        let found = tokio::select! {
            _ = ctx.cancel.cancelled() => return ("Error: interrupted".to_string(), true),
            r = search.search_rendered(&query) => r,
        };
        match found {
            Ok((n, results)) => {
                note(format!(
                    "web_search served by the daemon's search backend: \"{query}\", {n} results"
                ))
                .await;
                (results, false)
            }
            Err(why) => {
                note(format!(
                    "web_search served by the daemon's search backend: \"{query}\" failed: {why}"
                ))
                .await;
                (format!("Error: {why}"), true)
            }
        }
    }
}

/// Adds one call's output to the calls' so far: text and reasoning follow on (each was streamed
/// as it came), tokens add up, the rest is the last call's.
fn merge(total: &mut TurnOutput, turn: TurnOutput) {
    total.text.push_str(&turn.text);
    total.thinking.push_str(&turn.thinking);
    if turn.signature.is_some() {
        total.signature = turn.signature;
    }
    total.provider_blocks.extend(turn.provider_blocks);
    total.tool_calls = turn.tool_calls;
    total.usage += turn.usage;
    total.output_tokens_estimated |= turn.output_tokens_estimated;
    total.input_tokens_estimated |= turn.input_tokens_estimated;
    total.finish = turn.finish;
    total.interrupted = turn.interrupted;
    total.error = turn.error;
    total.no_retry = turn.no_retry;
    total.retries += turn.retries;
    total.retry_after = turn.retry_after;
    total.permanent = turn.permanent;
    total.context_overflow = turn.context_overflow;
    total.refused = turn.refused;
    total.cost_usd = match (total.cost_usd, turn.cost_usd) {
        (Some(a), Some(b)) => Some(a + b),
        (a, b) => a.or(b),
    };
}
