//! The loop itself, shared by the top-level agent and sub-agents (the run state is in
//! runner.rs).

use super::pipeline::{self, CallResult};
use super::runner::{Agent, BackgroundResult, LoopEnd, Runner};
use crate::streaming::{RequestedToolCall, TurnOutput};
use elfgate_core::{
    ContentBlock, EngineSessionContext, ErrorInfo, EventPayload, FinishReason, Message, MessageId,
    Role,
};
use elfgate_llm::{LlmFinishReason, LlmMessage, LlmRequest};
use serde_json::Value;
use std::sync::Arc;

/// The tool_use input for a call's raw arguments: the parsed object, or the raw text when it is not
/// a JSON object (so that the transcript holds exactly what the model sent).
pub(crate) fn parse_arguments(raw: &str) -> Result<Value, (Value, String)> {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    match serde_json::from_str::<Value>(trimmed) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(other) => Err((
            Value::String(raw.to_string()),
            format!("the arguments must be a JSON object, got {other}"),
        )),
        Err(e) => Err((
            Value::String(raw.to_string()),
            format!("the arguments are not valid JSON ({e})"),
        )),
    }
}

fn assistant_blocks(turn: &TurnOutput, calls: &[(RequestedToolCall, Value)]) -> Vec<ContentBlock> {
    let mut blocks: Vec<ContentBlock> = turn.thinking_block().into_iter().collect();
    blocks.extend(turn.provider_blocks.iter().cloned());
    if !turn.text.is_empty() {
        blocks.push(ContentBlock::text(turn.text.clone()));
    }
    for (c, input) in calls {
        blocks.push(ContentBlock::ToolUse {
            id: c.id.clone(),
            name: c.name.clone(),
            input: input.clone(),
        });
    }
    blocks
}

/// The pending permission requests of the run's session, as the dynamic tail's note (None when
/// there are none).
fn pending_confirmations(runner: &Runner) -> Option<String> {
    let pending = runner.inner.broker.pending_for(runner.ctx.session_id());
    if pending.is_empty() {
        return None;
    }
    let mut out = String::from(
        "Pending confirmations: these tool calls wait for the user's answer; do not request them \
again:",
    );
    for p in pending {
        if let EventPayload::PermissionRequest {
            tool_name, input, ..
        } = &p.record.payload
        {
            let args: String = input.to_string().chars().take(200).collect();
            out.push_str(&format!("\n- {tool_name} {args}"));
        }
    }
    Some(out)
}

/// Runs the loop. The top-level agent (depth 0) persists every iteration and relays events; a
/// sub-agent keeps its conversation in memory and reports through `processing` events.
pub(crate) async fn run_loop(
    runner: Arc<Runner>,
    mut agent: Agent,
    mut messages: Vec<LlmMessage>,
    mut last_id: Option<MessageId>,
) -> LoopEnd {
    let ctx = &runner.ctx;
    let top = agent.is_top();
    let session_id = ctx.session_id();
    let mut iterations = 0u32;
    let mut free_iterations = 0u32;
    let mut drains_in_row = 0u32;
    let mut last_text = String::new();
    // The agent's own tools; MCP tools are added to them anew each iteration.
    let base_tools = agent.tools.clone();
    let end = |finish, text: String, iterations, error| LoopEnd {
        finish,
        text,
        iterations,
        error,
    };
    loop {
        if agent.cancel.is_cancelled() {
            return end(FinishReason::Interrupted, last_text, iterations, None);
        }
        if iterations.saturating_sub(free_iterations) >= agent.max_iterations {
            if top {
                ctx.events
                    .emit(EventPayload::Processing {
                        message: format!(
                            "stopped after {} iterations (max_iterations)",
                            agent.max_iterations
                        ),
                    })
                    .await;
            }
            return end(FinishReason::MaxIterations, last_text, iterations, None);
        }
        if let Some(mcp) = &agent.mcp {
            match mcp.tools(&base_tools, &agent.cancel).await {
                Some(tools) => {
                    agent.tools = match &agent.tool_filter {
                        Some(allowed) => tools.retain(|name| allowed.contains(name)),
                        None => tools,
                    }
                }
                None => return end(FinishReason::Interrupted, last_text, iterations, None),
            }
        }
        let native_search = runner.ctx.engine_config.native_search_enabled == Some(true);
        // The dynamic tail's last line, for the top-level agent: permission requests still
        // waiting for the client (a background sub-agent's), so the model does not ask twice.
        let mut system = agent.system.text.clone();
        if top && let Some(note) = pending_confirmations(&runner) {
            system.push_str("\n\n");
            system.push_str(&note);
        }
        let mut req = LlmRequest {
            model: agent.model.clone(),
            system: Some(system).filter(|s| !s.is_empty()),
            cache_prefix_len: agent.system.prefix_len,
            messages: messages.clone(),
            temperature: Some(runner.rs.temperature),
            max_tokens: Some(runner.rs.max_tokens),
            thinking: runner.rs.thinking,
            // With the provider searching itself, the daemon's own web_search tool is not offered
            // beside it (one search, one name).
            tools: if native_search {
                agent
                    .tools
                    .specs()
                    .into_iter()
                    .filter(|t| t.name != "web_search")
                    .collect()
            } else {
                agent.tools.specs()
            },
            extended_context: runner.rs.extended_context,
            native_search,
            ..Default::default()
        };
        // The token budget: a call whose request alone would use up what is left is not made;
        // otherwise its answer may take at most what the request leaves.
        if let Some(budget) = runner.budget_left() {
            let input = runner
                .predicted_input(&req)
                .min(runner.rs.context_limit.unwrap_or(u64::MAX));
            if input >= budget.left {
                if top {
                    ctx.events
                        .emit(EventPayload::Processing {
                            message: format!(
                                "token budget exhausted ({} = {}): {} tokens left, and the next \
                                 model call would send about {input}; the run stops here",
                                budget.key, budget.max, budget.left
                            ),
                        })
                        .await;
                }
                return end(FinishReason::BudgetExhausted, last_text, iterations, None);
            }
            let answer_room = u32::try_from(budget.left - input).unwrap_or(u32::MAX);
            if answer_room < runner.rs.max_tokens {
                req.max_tokens = Some(answer_room);
                // A provider's reasoning budget comes on top of max_tokens (Anthropic raises it
                // to fit): near the end of a budget the call asks for no reasoning.
                req.thinking = Default::default();
            }
        }
        let turn = runner.call_fitted(&agent, &req).await;
        iterations += 1;
        let calls: Vec<(RequestedToolCall, Value, Option<String>)> = turn
            .tool_calls
            .iter()
            .map(|c| match parse_arguments(&c.arguments) {
                Ok(v) => (c.clone(), v, None),
                Err((v, why)) => (c.clone(), v, Some(why)),
            })
            .collect();
        if turn.interrupted || turn.error.is_some() || calls.is_empty() {
            // No tools to run: a final (or partial) answer.
            let finish = if turn.interrupted {
                FinishReason::Interrupted
            } else if turn.budget_paused() {
                // Paused, not failed: what the run did so far stays, and a resume goes on.
                return end(FinishReason::BudgetPaused, last_text, iterations, None);
            } else if turn.error.is_some() {
                FinishReason::Error
            } else {
                FinishReason::Stop
            };
            let blocks = assistant_blocks(&turn, &[]);
            let can_drain = finish == FinishReason::Stop
                && top
                && drains_in_row < runner.rs.max_background_drain_rounds
                && runner.background_pending();
            if !blocks.is_empty() {
                if top {
                    let mut msg = Message::new(
                        session_id,
                        Some(ctx.run_id),
                        last_id,
                        Role::Assistant,
                        blocks.clone(),
                    );
                    msg.model = Some(agent.model.clone());
                    let usage = if can_drain {
                        turn.usage
                    } else {
                        runner.usage()
                    };
                    msg.input_tokens = Some(usage.input_tokens);
                    msg.output_tokens = Some(usage.output_tokens);
                    if let Err(e) = runner.persist(&msg).await {
                        return end(FinishReason::Error, last_text, iterations, Some(e));
                    }
                    last_id = Some(msg.id);
                    ctx.events
                        .emit(EventPayload::AssistantMessage { message: msg })
                        .await;
                }
                messages.push(LlmMessage {
                    role: Role::Assistant,
                    blocks,
                });
            }
            if !turn.text.is_empty() {
                last_text = turn.text.clone();
            }
            // The provider paused a long turn of its own tools: the answer so far goes back to
            // it as the conversation's last message, and it goes on (another iteration).
            if finish == FinishReason::Stop && turn.finish == Some(LlmFinishReason::Paused) {
                if top {
                    ctx.events
                        .emit(EventPayload::Processing {
                            message:
                                "the provider paused its turn (pause_turn); asking it to go on"
                                    .into(),
                        })
                        .await;
                }
                continue;
            }
            if can_drain {
                let waited = tokio::time::timeout(
                    runner.rs.background_wait,
                    runner.take_background(&agent.cancel),
                )
                .await;
                let results = match waited {
                    Ok(Some(results)) => results,
                    Ok(None) => return end(FinishReason::Interrupted, last_text, iterations, None),
                    Err(_) => {
                        // The answer stands; what is still running is said, and stops with the run.
                        ctx.events
                            .emit(EventPayload::Processing {
                                message: format!(
                                    "background agents still running after {:.0?}, the answer stands: {}",
                                    runner.rs.background_wait,
                                    runner.background_running().join(", ")
                                ),
                            })
                            .await;
                        return end(finish, last_text, iterations, turn.error);
                    }
                };
                match drain_into(&runner, ctx, &mut messages, &mut last_id, &results).await {
                    Ok(()) => {}
                    Err(e) => return end(FinishReason::Error, last_text, iterations, Some(e)),
                }
                drains_in_row += 1;
                free_iterations += 1;
                continue;
            }
            return end(finish, last_text, iterations, turn.error);
        }

        // Tool calls: every call of the response runs concurrently; results keep the calls' order.
        drains_in_row = 0;
        if !turn.text.is_empty() {
            last_text = turn.text.clone();
        }
        let with_inputs: Vec<(RequestedToolCall, Value)> = calls
            .iter()
            .map(|(c, v, _)| (c.clone(), v.clone()))
            .collect();
        let blocks = assistant_blocks(&turn, &with_inputs);
        let results: Vec<CallResult> =
            futures_util::future::join_all(calls.iter().map(|(c, v, bad)| {
                pipeline::run_call(
                    &runner,
                    &agent,
                    c,
                    v,
                    bad.as_deref(),
                    elfgate_tools::Caller::Model,
                )
            }))
            .await;
        let yielded = results.iter().any(|r| r.yield_run);
        let result_blocks: Vec<ContentBlock> = results.into_iter().map(|r| r.block).collect();
        if top {
            let mut msg = Message::new(
                session_id,
                Some(ctx.run_id),
                last_id,
                Role::Assistant,
                blocks.clone(),
            );
            msg.model = Some(agent.model.clone());
            msg.input_tokens = Some(turn.usage.input_tokens);
            msg.output_tokens = Some(turn.usage.output_tokens);
            let tool_msg = Message::new(
                session_id,
                Some(ctx.run_id),
                Some(msg.id),
                Role::Tool,
                result_blocks.clone(),
            );
            if let Err(e) = runner.persist(&msg).await {
                return end(FinishReason::Error, last_text, iterations, Some(e));
            }
            if let Err(e) = runner.persist(&tool_msg).await {
                return end(FinishReason::Error, last_text, iterations, Some(e));
            }
            last_id = Some(tool_msg.id);
            ctx.events
                .emit(EventPayload::AssistantMessage { message: msg })
                .await;
        } else {
            let names: Vec<&str> = calls.iter().map(|(c, _, _)| c.name.as_str()).collect();
            ctx.events
                .emit(EventPayload::Processing {
                    message: format!(
                        "[agent \"{}\"] ran {}",
                        agent.label.as_deref().unwrap_or("sub-agent"),
                        names.join(", ")
                    ),
                })
                .await;
        }
        messages.push(LlmMessage {
            role: Role::Assistant,
            blocks,
        });
        messages.push(LlmMessage {
            role: Role::Tool,
            blocks: result_blocks,
        });
        if agent.cancel.is_cancelled() {
            return end(FinishReason::Interrupted, last_text, iterations, None);
        }
        // Background results that came in meanwhile join the conversation after the tool
        // results, rather than wait for an answer without tools.
        if top {
            let ready = runner.take_ready_background();
            if !ready.is_empty()
                && let Err(e) = drain_into(&runner, ctx, &mut messages, &mut last_id, &ready).await
            {
                return end(FinishReason::Error, last_text, iterations, Some(e));
            }
        }
        if yielded {
            return end(FinishReason::Stop, last_text, iterations, None);
        }
    }
}

/// Adds background sub-agents' results to the conversation as one user message (stored and
/// announced): `[Background agent "label" (runId) outcome]` and the agent's answer, each.
async fn drain_into(
    runner: &Runner,
    ctx: &EngineSessionContext,
    messages: &mut Vec<LlmMessage>,
    last_id: &mut Option<MessageId>,
    results: &[BackgroundResult],
) -> Result<(), ErrorInfo> {
    let text: String = results
        .iter()
        .map(|r| {
            format!(
                "[Background agent \"{}\" ({}) {}]\n{}",
                r.label,
                r.run_id,
                r.finish.as_str(),
                r.text
            )
        })
        .collect::<Vec<_>>()
        .join("\n\n");
    let note = Message::new(
        ctx.session_id(),
        Some(ctx.run_id),
        *last_id,
        Role::User,
        vec![ContentBlock::text(text)],
    );
    runner.persist(&note).await?;
    *last_id = Some(note.id);
    messages.push(LlmMessage {
        role: Role::User,
        blocks: note.blocks.clone(),
    });
    ctx.events
        .emit(EventPayload::UserMessage { message: note })
        .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_arguments_are_kept_raw() {
        assert_eq!(parse_arguments("").unwrap(), serde_json::json!({}));
        assert_eq!(
            parse_arguments(r#"{"a":1}"#).unwrap(),
            serde_json::json!({"a": 1})
        );
        let (v, why) = parse_arguments(r#"{"path": "x"#).unwrap_err();
        assert_eq!(v, Value::String(r#"{"path": "x"#.into()));
        assert!(why.contains("not valid JSON"));
        let (_, why) = parse_arguments("[1]").unwrap_err();
        assert!(why.contains("JSON object"));
    }
}
