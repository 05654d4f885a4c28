//! The security pipeline every tool call goes through, in this order: abort check -> known tool
//! -> channel role check -> PreToolUse hooks -> ExecutionFirewall -> Guardian -> permission ->
//! the node's lease on the session (a fleet node) -> execute with the tool timeout ->
//! PostToolUse hooks (fire-and-forget).

use super::runner::{Agent, Runner};
use crate::streaming::RequestedToolCall;
use elfgate_core::{
    AuditRecord, BlockedCall, CalledTool, ContentBlock, EventPayload, Gate, ToolCallStatus,
};
use elfgate_tools::{
    Ask, CallFacts, Caller, GuardianVerdict, HookEvent, HookVerdict, PermissionOutcome,
    PermissionTier, PolicyDecision, ToolContext, ToolError, ToolOutput, truncate_result,
};
use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// The names of providers' own search tools. No run asks a provider to search yet, so a call to
/// one (without a local tool of that name) is answered as what it is: not run, and why, rather
/// than as a search that happened.
const NATIVE_SEARCH_TOOLS: &[&str] = &["web_search", "web_search_preview", "google_search"];

/// How long a tool gets to clean up after its timeout fired.
const CLEANUP_GRACE: Duration = Duration::from_secs(5);

/// Text of the synthetic result of an interrupted call.
pub(crate) const INTERRUPTED_RESULT: &str =
    "[interrupted: the user stopped the run before this tool call finished]";

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
    content: String,
    status: ToolCallStatus,
    yield_run: bool,
) -> CallResult {
    let content = truncate_result(&content, runner.rs.tool_result_max_chars);
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
        yield_run,
        status,
    }
}

/// A call a gate blocked: its result says why, the turn's record and the session's audit keep
/// which gate it was.
async fn denied(
    runner: &Runner,
    agent: &Agent,
    call: &RequestedToolCall,
    gate: Gate,
    why: String,
) -> CallResult {
    record_blocked(runner, call, gate, &why).await;
    finish(
        runner,
        agent,
        call,
        format!("Tool call denied: {why}"),
        ToolCallStatus::Denied,
        false,
    )
    .await
}

/// Keeps a blocked call in the turn's record (postTurn `denied`) and the session's audit: one
/// a gate blocked before it ran, or one the firewall refused inside its tool (a skill's file
/// outside its folder, a path swapped after the firewall's first check).
async fn record_blocked(runner: &Runner, call: &RequestedToolCall, gate: Gate, why: &str) {
    let blocked = BlockedCall {
        tool_use_id: call.id.clone(),
        tool_name: call.name.clone(),
        gate,
        reason: why.to_string(),
    };
    let record = AuditRecord {
        session_id: runner.ctx.session_id(),
        run_id: runner.ctx.run_id,
        call: blocked.clone(),
        input: serde_json::from_str(&call.arguments)
            .unwrap_or_else(|_| Value::String(call.arguments.clone())),
        created_at: chrono::Utc::now(),
    };
    runner.turn_blocked(blocked);
    if let Err(e) = runner.inner.store.record_blocked(&record).await {
        // The call stays blocked; only its audit line is missing, and the log says so.
        tracing::warn!(error = %e, tool = %call.name, gate = gate.as_str(), "could not store the audit record of a blocked call");
    }
}

async fn interrupted(runner: &Runner, agent: &Agent, call: &RequestedToolCall) -> CallResult {
    finish(
        runner,
        agent,
        call,
        INTERRUPTED_RESULT.to_string(),
        ToolCallStatus::Interrupted,
        false,
    )
    .await
}

/// Runs one call through the pipeline. `bad_args` is set when the arguments did not parse.
pub(crate) async fn run_call(
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
    // 1. Abort check.
    if agent.cancel.is_cancelled() {
        return interrupted(runner, agent, call).await;
    }
    let tool = agent.tools.get(&call.name);
    let native_search = runner.ctx.engine_config.native_search_enabled == Some(true);
    // 2. A provider's own search tool that no one asked the provider for: nothing searched. With
    // the provider asked to search itself (nativeSearchEnabled), a call by a search tool's name
    // is not run here either, even where the daemon has a web_search of its own: the run asked
    // for the provider's search, and the local one was not offered.
    if (tool.is_none() || native_search) && NATIVE_SEARCH_TOOLS.contains(&call.name.as_str()) {
        return finish(
            runner,
            agent,
            call,
            if native_search {
                format!(
                    "Error: {} is the provider's own search, which this run asked the provider \
                     to run itself (nativeSearchEnabled); it came back as a call instead, and \
                     nothing was searched here. Available tools: {}",
                    call.name,
                    agent
                        .tools
                        .names()
                        .into_iter()
                        .filter(|n| !NATIVE_SEARCH_TOOLS.contains(&n.as_str()))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            } else {
                format!(
                    "Error: {} is a model provider's own search tool, and this run did not ask \
                     the provider to search: nothing was searched. Available tools: {}",
                    call.name,
                    agent.tools.names().join(", ")
                )
            },
            ToolCallStatus::Error,
            false,
        )
        .await;
    }
    let Some(tool) = tool else {
        return finish(
            runner,
            agent,
            call,
            format!(
                "Error: unknown tool '{}'. Available tools: {}",
                call.name,
                agent.tools.names().join(", ")
            ),
            ToolCallStatus::Error,
            false,
        )
        .await;
    };
    if let Some(why) = bad_args {
        return finish(
            runner,
            agent,
            call,
            format!(
                "Error: could not run {}: {why}. Call it again with a JSON object matching its schema: {}",
                call.name,
                tool.schema()
            ),
            ToolCallStatus::Error,
            false,
        ).await;
    }
    // 3. Channel role check.
    let channel = runner.ctx.engine_config.channel_permissions;
    if channel.is_some_and(|c| !c.can_use_tool) {
        return denied(
            runner,
            agent,
            call,
            Gate::Channel,
            "this channel user may not use tools (canUseTool is false)".to_string(),
        )
        .await;
    }
    // 3b. A session without a project runs no file or shell tool: there is no folder the
    // firewall could confine it to.
    if !runner.has_project && tool.works_in_project() {
        return denied(
            runner,
            agent,
            call,
            Gate::Project,
            format!(
                "this session has no projectPath, so {} cannot run: the file and shell tools work \
                 only in a project (set projectPath when starting the session, or the \
                 x-elfgate-project-path header on the gateway)",
                call.name
            ),
        )
        .await;
    }
    let session_id = runner.ctx.session_id();
    let project = runner.project.display().to_string();
    let hooks = runner.inner.hooks.clone();
    // 4. PreToolUse hooks.
    if hooks.has(HookEvent::PreToolUse) {
        let mut payload = json!({
            "event": "PreToolUse",
            "sessionId": session_id,
            "runId": runner.ctx.run_id,
            "toolName": call.name,
            "toolUseId": call.id,
            "input": input,
            "projectPath": project,
        });
        runner.ctx.channel.add_to(&mut payload);
        let verdict = tokio::select! {
            biased;
            _ = agent.cancel.cancelled() => return interrupted(runner, agent, call).await,
            v = hooks.run(HookEvent::PreToolUse, Some(&call.name), &payload, &runner.project) => v,
        };
        if let HookVerdict::Deny(reason) = verdict {
            return denied(
                runner,
                agent,
                call,
                Gate::Hook,
                format!("a PreToolUse hook refused it: {reason}"),
            )
            .await;
        }
    }
    // 5. ExecutionFirewall.
    let targets = tool.firewall_targets(input);
    for p in &targets.paths {
        if let Err(e) = runner.inner.firewall.resolve_path(&runner.project, p) {
            return denied(
                runner,
                agent,
                call,
                Gate::Firewall,
                format!("blocked by the firewall: {e}"),
            )
            .await;
        }
    }
    if let Some(cmd) = &targets.command
        && let Err(e) = runner.inner.firewall.check_command(cmd)
    {
        return denied(
            runner,
            agent,
            call,
            Gate::Firewall,
            format!("blocked by the firewall: {e}"),
        )
        .await;
    }
    let tier = agent.tools.tier_of(tool.as_ref());
    // 6. Guardian.
    if let Some(g) = &runner.guardian
        && (tier != PermissionTier::ReadOnly || runner.inner.config.guardian.review_read_only)
    {
        match g
            .review(
                &call.name,
                input,
                &project,
                &runner.ctx.channel,
                &agent.cancel,
            )
            .await
        {
            GuardianVerdict::Allow => {}
            GuardianVerdict::Block(_) if agent.cancel.is_cancelled() => {
                return interrupted(runner, agent, call).await;
            }
            GuardianVerdict::Block(reason) => {
                return denied(runner, agent, call, Gate::Guardian, reason).await;
            }
        }
    }
    // 7. Permission.
    let mode = runner.ctx.permission_mode.unwrap_or_default();
    // Concurrent calls of one confirm_once tool ask one after the other, so the first answer
    // covers the rest.
    let ask_lock = (tier == PermissionTier::ConfirmOnce)
        .then(|| runner.inner.broker.ask_lock(session_id, &call.name));
    let ask_guard = match &ask_lock {
        Some(l) => tokio::select! {
            biased;
            _ = agent.cancel.cancelled() => return interrupted(runner, agent, call).await,
            g = l.lock() => Some(g),
        },
        None => None,
    };
    let remembered = runner.inner.broker.remembered(session_id, &call.name);
    let require = channel.is_some_and(|c| c.require_confirmation);
    let facts = CallFacts {
        tier,
        kind: tool.kind(),
        mode,
        require_confirmation: require,
        remembered,
        caller,
    };
    match runner.inner.policy.decide(&facts) {
        PolicyDecision::Allow => {}
        PolicyDecision::Deny(reason) => {
            return denied(runner, agent, call, Gate::Policy, reason).await;
        }
        PolicyDecision::Ask => {
            let permission_wait = runner
                .ctx
                .permission_answers
                .wait(runner.rs.permission_timeout);
            let outcome = runner
                .inner
                .broker
                .request(
                    &runner.ctx.events,
                    session_id,
                    Ask {
                        tool_name: &call.name,
                        input,
                        tier,
                        timeout: permission_wait,
                        answers: runner.ctx.permission_answers,
                    },
                    &agent.cancel,
                )
                .await;
            if outcome == PermissionOutcome::Interrupted {
                return interrupted(runner, agent, call).await;
            }
            if let Some(why) = outcome.denial(permission_wait) {
                return denied(runner, agent, call, Gate::Permission, why).await;
            }
        }
    }
    drop(ask_guard);
    // 8. Only while this node holds the session's lease (a fleet node paused or cut off past it
    // may have lost the session to another node, which ended this run).
    if !runner.ctx.events.bus().lease().confirm(&agent.cancel).await {
        return interrupted(runner, agent, call).await;
    }
    // 9. Execute with the tool timeout.
    let tool_cancel = agent.cancel.child_token();
    let tctx = ToolContext {
        project_path: runner.project.clone(),
        session_id,
        cancel: tool_cancel.clone(),
        firewall: runner.inner.firewall.clone(),
        store: Some(runner.inner.store.clone()),
        child: runner.rs.child.clone(),
    };
    let exec: BoxFuture<'_, Result<ToolOutput, ToolError>> =
        Box::pin(tool.execute(input.clone(), &tctx));
    let timeout = runner.rs.tool_timeout;
    let (result, timed_out) = {
        tokio::pin!(exec);
        tokio::select! {
            r = &mut exec => (Some(r), false),
            _ = tokio::time::sleep(timeout) => {
                tool_cancel.cancel();
                (tokio::time::timeout(CLEANUP_GRACE, &mut exec).await.ok(), true)
            }
        }
    };
    let (content, status, yield_run) = if agent.cancel.is_cancelled() {
        (
            INTERRUPTED_RESULT.to_string(),
            ToolCallStatus::Interrupted,
            false,
        )
    } else if timed_out {
        (
            format!(
                "Error: {} timed out after {:.1}s and was stopped",
                call.name,
                timeout.as_secs_f64()
            ),
            ToolCallStatus::Timeout,
            false,
        )
    } else {
        match result {
            Some(Ok(out)) => (
                out.content,
                if out.is_error {
                    ToolCallStatus::Error
                } else {
                    ToolCallStatus::Success
                },
                out.yield_run,
            ),
            Some(Err(ToolError::Firewall(e))) => {
                let why = format!("blocked by the firewall: {e}");
                record_blocked(runner, call, Gate::Firewall, &why).await;
                (
                    format!("Tool call denied: {why}"),
                    ToolCallStatus::Denied,
                    false,
                )
            }
            Some(Err(ToolError::InvalidInput(e))) => (
                format!(
                    "Error: invalid input for {}: {e}. Expected: {}",
                    call.name,
                    tool.schema()
                ),
                ToolCallStatus::Error,
                false,
            ),
            Some(Err(ToolError::Interrupted)) => (
                INTERRUPTED_RESULT.to_string(),
                ToolCallStatus::Interrupted,
                false,
            ),
            Some(Err(e)) => (format!("Error: {e}"), ToolCallStatus::Error, false),
            None => (
                "Error: the tool did not stop".to_string(),
                ToolCallStatus::Error,
                false,
            ),
        }
    };
    // 10. PostToolUse hooks, fire-and-forget.
    if hooks.has(HookEvent::PostToolUse) {
        let mut payload = json!({
            "event": "PostToolUse",
            "sessionId": session_id,
            "runId": runner.ctx.run_id,
            "toolName": call.name,
            "toolUseId": call.id,
            "input": input,
            "status": status,
            "result": truncate_result(&content, runner.rs.tool_result_max_chars),
            "projectPath": project,
        });
        runner.ctx.channel.add_to(&mut payload);
        let name = call.name.clone();
        let cwd = runner.project.clone();
        tokio::spawn(
            async move {
                let _ = hooks
                    .run(HookEvent::PostToolUse, Some(&name), &payload, &cwd)
                    .await;
            }
            .in_current_span(),
        );
    }
    finish(runner, agent, call, content, status, yield_run).await
}
