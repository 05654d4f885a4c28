//! A tool call of tinyelf's (the model's, a client's tool run, a workflow's tool step) through
//! the tool gate ([`elfgate_tools::gate`]), in its order: abort -> native-search skip -> known
//! tool -> channel role -> project -> PreToolUse hooks -> ExecutionFirewall -> Guardian ->
//! permission -> the node's lease on the session (a fleet node) -> execute with the tool timeout
//! -> PostToolUse hooks (fire-and-forget). The gates decide; this file gives them the run's
//! facts, emits the call's events, keeps the turn's record and stops at an interrupt.

use super::runner::{Agent, Runner};
use crate::streaming::RequestedToolCall;
use elfgate_core::{BlockedCall, CalledTool, ContentBlock, EventPayload, ToolCallStatus};
use elfgate_tools::gate::{self, Ended, Permission, Refusal, Stop};
use elfgate_tools::{
    Ask, CallFacts, Caller, GuardianVerdict, PermissionTier, Tool, ToolContext, truncate_result,
};
use serde_json::{Value, json};
use std::sync::Arc;
use tracing::Instrument;

/// The outcome of one call.
pub(crate) struct CallResult {
    /// The tool_result block.
    pub block: ContentBlock,
    /// The tool asked the loop to stop.
    pub yield_run: bool,
    /// How the call ended.
    pub status: ToolCallStatus,
}

async fn finish(
    runner: &Runner,
    agent: &Agent,
    call: &RequestedToolCall,
    ended: Ended,
) -> CallResult {
    let content = truncate_result(&ended.content, runner.rs.tool_result_max_chars);
    let status = ended.status;
    runner.turn_called(CalledTool {
        tool_use_id: call.id.clone(),
        name: call.name.clone(),
        status,
    });
    let block = ContentBlock::ToolResult {
        tool_use_id: call.id.clone(),
        content,
        is_error: status != ToolCallStatus::Success,
    };
    if agent.is_top() {
        runner
            .ctx
            .events
            .emit(EventPayload::ToolCallEnd {
                block: block.clone(),
                status,
            })
            .await;
    }
    CallResult {
        block,
        yield_run: ended.yield_run,
        status,
    }
}

/// A call the gate stopped before it ran: its result says why; a refusal is kept in the turn's
/// record and the session's audit with its gate.
async fn stopped(
    runner: &Runner,
    agent: &Agent,
    call: &RequestedToolCall,
    stop: Stop,
) -> CallResult {
    let (content, status) = match stop {
        Stop::Interrupted => return finish(runner, agent, call, Ended::interrupted()).await,
        Stop::Error(text) => (text, ToolCallStatus::Error),
        Stop::Refused(refusal) => {
            record_blocked(runner, call, &refusal).await;
            (
                format!("Tool call denied: {}", refusal.why),
                ToolCallStatus::Denied,
            )
        }
    };
    let ended = Ended {
        content,
        status,
        yield_run: false,
        refused: None,
    };
    finish(runner, agent, call, ended).await
}

/// Keeps a refused call in the turn's record (postTurn `denied`) and the session's audit: one
/// a gate refused before it ran, or one the firewall refused inside its tool.
async fn record_blocked(runner: &Runner, call: &RequestedToolCall, refusal: &Refusal) {
    let blocked = BlockedCall {
        tool_use_id: call.id.clone(),
        tool_name: call.name.clone(),
        gate: refusal.gate,
        reason: refusal.why.clone(),
    };
    elfgate_core::telemetry::record_refusal(refusal.gate.as_str());
    runner.turn_blocked(blocked.clone());
    let input = serde_json::from_str(&call.arguments)
        .unwrap_or_else(|_| Value::String(call.arguments.clone()));
    gate::audit_refusal(
        runner.inner.store.as_ref(),
        runner.ctx.session_id(),
        runner.ctx.run_id,
        blocked,
        input,
    )
    .await;
}

/// Runs one call through the gate, under its `execute_tool` span. `bad_args` is set when the
/// arguments did not parse.
pub(crate) async fn run_call(
    runner: &Arc<Runner>,
    agent: &Agent,
    call: &RequestedToolCall,
    input: &Value,
    bad_args: Option<&str>,
    caller: Caller,
) -> CallResult {
    let span = elfgate_core::telemetry::tool_span(&call.name, &call.id, &call.arguments);
    let result = gated_call(runner, agent, call, input, bad_args, caller)
        .instrument(span.clone())
        .await;
    if !span.is_disabled() {
        let result_text = match &result.block {
            ContentBlock::ToolResult { content, .. } => content.as_str(),
            _ => "",
        };
        elfgate_core::telemetry::record_tool(&span, result.status.as_str(), result_text);
    }
    result
}

async fn gated_call(
    runner: &Arc<Runner>,
    agent: &Agent,
    call: &RequestedToolCall,
    input: &Value,
    bad_args: Option<&str>,
    caller: Caller,
) -> CallResult {
    if agent.is_top() {
        runner
            .ctx
            .events
            .emit(EventPayload::ToolCallStart {
                block: ContentBlock::ToolUse {
                    id: call.id.clone(),
                    name: call.name.clone(),
                    input: input.clone(),
                },
            })
            .await;
    }
    let tool = match decide(runner, agent, call, input, bad_args, caller).await {
        Ok(tool) => tool,
        Err(stop) => return stopped(runner, agent, call, stop).await,
    };
    let ended = execute(runner, agent, call, input, tool.as_ref()).await;
    if let Some(refusal) = &ended.refused {
        record_blocked(runner, call, refusal).await;
    }
    gate::post_tool_use(
        &runner.inner.hooks,
        &call.name,
        runner.project.clone(),
        || {
            let mut payload = json!({
                "event": "PostToolUse",
                "sessionId": runner.ctx.session_id(),
                "runId": runner.ctx.run_id,
                "toolName": call.name,
                "toolUseId": call.id,
                "input": input,
                "status": ended.status,
                "result": truncate_result(&ended.content, runner.rs.tool_result_max_chars),
                "projectPath": runner.project.display().to_string(),
            });
            runner.ctx.channel.add_to(&mut payload);
            payload
        },
    );
    finish(runner, agent, call, ended).await
}

/// The gates before the call runs, in order; Ok: the tool, permitted to run.
async fn decide(
    runner: &Runner,
    agent: &Agent,
    call: &RequestedToolCall,
    input: &Value,
    bad_args: Option<&str>,
    caller: Caller,
) -> Result<Arc<dyn Tool>, Stop> {
    if agent.cancel.is_cancelled() {
        return Err(Stop::Interrupted);
    }
    let tool = agent.tools.get(&call.name);
    let native_search = runner.ctx.engine_config.native_search_enabled == Some(true);
    gate::native_search(
        &call.name,
        tool.is_some(),
        native_search,
        &agent.tools.names(),
    )
    .map_err(Stop::Error)?;
    let Some(tool) = tool else {
        return Err(Stop::Error(format!(
            "Error: unknown tool '{}'. Available tools: {}",
            call.name,
            agent.tools.names().join(", ")
        )));
    };
    if let Some(why) = bad_args {
        return Err(Stop::Error(format!(
            "Error: could not run {}: {why}. Call it again with a JSON object matching its \
             schema: {}",
            call.name,
            tool.schema()
        )));
    }
    gate::channel_role(runner.ctx.engine_config.channel_permissions)?;
    gate::project(runner.has_project, tool.works_in_project(), &call.name)?;
    pre_tool_use(runner, agent, call, input).await?;
    gate::firewall(
        &runner.inner.firewall,
        &runner.project,
        &tool.firewall_targets(input),
    )?;
    let tier = agent.tools.tier_of(tool.as_ref());
    guardian(runner, agent, call, input, tier).await?;
    permission(runner, agent, call, input, tool.as_ref(), caller).await?;
    // Only while this node holds the session's lease (a fleet node paused or cut off past it
    // may have lost the session to another node, which ended this run).
    if !runner.ctx.events.bus().lease().confirm(&agent.cancel).await {
        return Err(Stop::Interrupted);
    }
    Ok(tool)
}

/// The PreToolUse hooks, cut short by an interrupt.
async fn pre_tool_use(
    runner: &Runner,
    agent: &Agent,
    call: &RequestedToolCall,
    input: &Value,
) -> Result<(), Stop> {
    let hooks = &runner.inner.hooks;
    if !hooks.has(elfgate_tools::HookEvent::PreToolUse) {
        return Ok(());
    }
    let mut payload = json!({
        "event": "PreToolUse",
        "sessionId": runner.ctx.session_id(),
        "runId": runner.ctx.run_id,
        "toolName": call.name,
        "toolUseId": call.id,
        "input": input,
        "projectPath": runner.project.display().to_string(),
    });
    runner.ctx.channel.add_to(&mut payload);
    tokio::select! {
        biased;
        _ = agent.cancel.cancelled() => Err(Stop::Interrupted),
        v = gate::pre_tool_use(hooks, &call.name, &payload, &runner.project) => Ok(v?),
    }
}

/// The guardian's review, when one is configured and reviews a call of `tier`.
async fn guardian(
    runner: &Runner,
    agent: &Agent,
    call: &RequestedToolCall,
    input: &Value,
    tier: PermissionTier,
) -> Result<(), Stop> {
    let Some(g) = &runner.guardian else {
        return Ok(());
    };
    if !gate::guardian_reviews(tier, runner.inner.config.guardian.review_read_only) {
        return Ok(());
    }
    let project = runner.project.display().to_string();
    let verdict = g
        .review(
            &call.name,
            input,
            &project,
            &runner.ctx.channel,
            &agent.cancel,
        )
        .await;
    // A review cut short by the interrupt blocks (fail closed): the call was interrupted.
    if matches!(verdict, GuardianVerdict::Block(_)) && agent.cancel.is_cancelled() {
        return Err(Stop::Interrupted);
    }
    Ok(gate::guardian_verdict(verdict)?)
}

/// The tier and permission gate: the policy, then the client's answer where it asks.
async fn permission(
    runner: &Runner,
    agent: &Agent,
    call: &RequestedToolCall,
    input: &Value,
    tool: &dyn Tool,
    caller: Caller,
) -> Result<(), Stop> {
    let broker = &runner.inner.broker;
    let session_id = runner.ctx.session_id();
    let tier = agent.tools.tier_of(tool);
    // Concurrent calls of one confirm_once tool ask one after the other, so the first answer
    // covers the rest.
    let ask_lock =
        (tier == PermissionTier::ConfirmOnce).then(|| broker.ask_lock(session_id, &call.name));
    let _ask_guard = match &ask_lock {
        Some(l) => tokio::select! {
            biased;
            _ = agent.cancel.cancelled() => return Err(Stop::Interrupted),
            g = l.lock() => Some(g),
        },
        None => None,
    };
    let facts = CallFacts {
        tier,
        kind: tool.kind(),
        mode: runner.ctx.permission_mode.unwrap_or_default(),
        require_confirmation: runner
            .ctx
            .engine_config
            .channel_permissions
            .is_some_and(|c| c.require_confirmation),
        remembered: broker.remembered(session_id, &call.name),
        caller,
    };
    if gate::policy(&runner.inner.policy, &facts)? == Permission::Granted {
        return Ok(());
    }
    // How long a question waits for its answer: the run's permissionTimeout, or none when the
    // run's answer policy says nobody will answer.
    let timeout = runner
        .ctx
        .permission_answers
        .wait(runner.rs.permission_timeout);
    let ask = Ask {
        tool_name: &call.name,
        input,
        tier,
        timeout,
        answers: runner.ctx.permission_answers,
    };
    let wait = elfgate_core::telemetry::permission_span(&call.name);
    let outcome = broker
        .request(&runner.ctx.events, session_id, ask, &agent.cancel)
        .instrument(wait.clone())
        .await;
    let answer = gate::permission_answer(&outcome, timeout);
    elfgate_core::telemetry::record_permission(
        &wait,
        if answer.is_ok() { "granted" } else { "refused" },
    );
    answer
}

/// Executes a permitted call with the tool's timeout, cut short by an interrupt.
async fn execute(
    runner: &Runner,
    agent: &Agent,
    call: &RequestedToolCall,
    input: &Value,
    tool: &dyn Tool,
) -> Ended {
    let tctx = ToolContext {
        project_path: runner.project.clone(),
        session_id: runner.ctx.session_id(),
        cancel: agent.cancel.child_token(),
        firewall: runner.inner.firewall.clone(),
        store: Some(runner.inner.store.clone()),
        child: runner.rs.child.clone(),
    };
    let timeout = runner.rs.tool_timeout;
    let executed = gate::execute(tool, input.clone(), &tctx, timeout).await;
    Ended::of(
        executed,
        agent.cancel.is_cancelled(),
        &call.name,
        timeout,
        || tool.schema(),
    )
}
