//! The `workflow` engine: a workflow's run is a session of its own, and its steps run in order
//! inside the session's run. A tool step calls a registry tool through the tool gate (hooks,
//! firewall, guardian, permission tiers; recorded in the history like a tool run), without a
//! model; a model step makes one model call; an `if` step ends the run or skips
//! the next step. Each step is announced by `stepStart` and closed by `stepEnd` with its output,
//! which later steps' templates read as `steps.ID.output`. See docs/workflows.md.

use crate::providers::ProviderRegistry;
use crate::streaming::{CallTarget, TurnOptions, fail, relay_turn};
use crate::workflow_templates::{
    Renderer, answer_within, bounded_output, strings_of, with_strings,
};
use async_trait::async_trait;
use elfgate_core::{
    ContentBlock, Engine, EngineSessionContext, EngineType, ErrorCode, EventPayload, FinishReason,
    Message, RetryInfo, Role, RunOutcome, StepStatus, StepUsage, TokenUsage, ToolCallStatus,
    ToolRun, WorkflowRef,
};
use elfgate_llm::{LlmMessage, LlmRequest, RetryPolicy};
use elfgate_store::Store;
use elfgate_tools::gate::ToolRuns;
use elfgate_workflow::template::{Limits, RenderError};
use elfgate_workflow::{AgentStep, ModelStep, Otherwise, StepKind, WorkflowDefinition};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument;

/// The workflow engine.
pub struct WorkflowEngine {
    store: Arc<dyn Store>,
    /// Where a tool step is decided and run: the tool gate's tool runs.
    tools: Arc<dyn ToolRuns>,
    /// The engine an agent step's run is (the agent loop).
    agents: Arc<dyn Engine>,
    providers: ProviderRegistry,
    retry: RetryPolicy,
    templates: Renderer,
}

impl WorkflowEngine {
    /// The engine, its tool steps run through `tools` (the tool gate), its agent steps by
    /// `agents` and its model steps on `providers` with `retry` for each call, its templates
    /// rendered within `limits` (which bound each step's output too).
    pub fn new(
        store: Arc<dyn Store>,
        tools: Arc<dyn ToolRuns>,
        agents: Arc<dyn Engine>,
        providers: ProviderRegistry,
        retry: RetryPolicy,
        limits: Limits,
    ) -> Self {
        WorkflowEngine {
            store,
            tools,
            agents,
            providers,
            retry,
            templates: Renderer::new(limits),
        }
    }
}

#[async_trait]
impl Engine for WorkflowEngine {
    fn engine_type(&self) -> EngineType {
        EngineType::Workflow
    }

    fn description(&self) -> &'static str {
        "A workflow's steps in order: registry tools without a model, model calls where a step asks"
    }

    fn capabilities(&self) -> Vec<&'static str> {
        vec!["tool-steps", "model-steps", "conditions", "retries"]
    }

    async fn run_prompt(&self, ctx: EngineSessionContext) -> RunOutcome {
        let Some(wref) = ctx.engine_config.workflow.clone() else {
            let why = "a workflow session is started by POST /v1/workflows/{name}/runs";
            return fail(&ctx, ErrorCode::Unprocessable, why.to_string()).await;
        };
        // A resume's prompt is stored here; a first run's was stored with its session.
        if let Err(e) = crate::prompt::store_user_message(self.store.as_ref(), &ctx).await {
            return fail(&ctx, ErrorCode::Storage, e).await;
        }
        let def = match self
            .store
            .get_workflow(&wref.name, Some(wref.version))
            .await
        {
            Ok(Some(stored)) => {
                match serde_json::from_value::<WorkflowDefinition>(stored.definition) {
                    Ok(d) => d,
                    Err(e) => {
                        let why = format!("workflow '{}' v{}: {e}", wref.name, wref.version);
                        return fail(&ctx, ErrorCode::Storage, why).await;
                    }
                }
            }
            Ok(None) => {
                let why = format!("workflow '{}' has no version {}", wref.name, wref.version);
                return fail(&ctx, ErrorCode::NotFound, why).await;
            }
            Err(e) => return fail(&ctx, ErrorCode::Storage, e.report()).await,
        };
        ctx.events
            .emit(EventPayload::Init {
                system_info: ctx.system_info(json!({
                    "engine": EngineType::Workflow.as_str(),
                    "workflow": wref.name,
                    "version": wref.version,
                    "steps": def.steps.len(),
                    "resumes": wref.resume.as_ref().map(|r| r.run_id),
                    "fromStep": wref.resume.as_ref()
                        .and_then(|r| def.steps.get(r.from_step as usize))
                        .map(|s| s.id.clone()),
                    "projectPath": ctx.project_path,
                    "permissionMode": ctx.permission_mode.unwrap_or_default(),
                })),
            })
            .await;
        Run {
            engine: self,
            ctx: &ctx,
            outputs: wref
                .resume
                .as_ref()
                .map(|r| r.outputs.clone())
                .unwrap_or_default(),
            usage: TokenUsage::default(),
            spent: Vec::new(),
            step_cost: None,
        }
        .steps(&def, &wref)
        .await
    }
}

/// How a step went.
enum Done {
    /// Its output.
    Output(Value),
    /// An `if`'s value.
    Condition(bool),
}

/// Why a step did not.
enum Failure {
    /// What went wrong (it may be tried again).
    Failed(String),
    /// The run was interrupted.
    Interrupted,
    /// The run cannot go on (its error already reported): its outcome.
    Fatal(Box<RunOutcome>),
}

/// One run of a workflow.
struct Run<'a> {
    engine: &'a WorkflowEngine,
    ctx: &'a EngineSessionContext,
    /// `steps` of the templates: each ended step's `{output}`.
    outputs: Map<String, Value>,
    usage: TokenUsage,
    /// What each ended step spent, for `result`.
    spent: Vec<StepUsage>,
    /// The cost of the step under way, where its model's prices are known.
    step_cost: Option<f64>,
}

impl Run<'_> {
    async fn steps(mut self, def: &WorkflowDefinition, wref: &WorkflowRef) -> RunOutcome {
        let ctx = self.ctx;
        let mut skip_next = false;
        let from = wref.resume.as_ref().map_or(0, |r| r.from_step as usize);
        for (index, step) in def.steps.iter().enumerate().skip(from) {
            if ctx.cancel.is_cancelled() {
                return self.outcome(FinishReason::Interrupted);
            }
            let index = u32::try_from(index).unwrap_or(u32::MAX);
            if std::mem::take(&mut skip_next) {
                self.end(&step.id, StepStatus::Skipped, Value::Null, None)
                    .await;
                continue;
            }
            let Ok(kind) = step.kind() else {
                let why = format!("step '{}' says no single thing to do", step.id);
                return self.fatal(ErrorCode::Unprocessable, why).await;
            };
            let before = self.usage;
            self.step_cost = None;
            let tries = 1 + step.retries.map_or(0, |r| r.max);
            let mut attempt = 1;
            let done = loop {
                ctx.events
                    .emit(EventPayload::StepStart {
                        step_id: step.id.clone(),
                        index,
                        kind: kind_name(&kind),
                        attempt,
                    })
                    .await;
                let span = elfgate_core::telemetry::step_span(&step.id, kind_name(&kind).as_str());
                let tried = self.step(&kind, wref).instrument(span.clone()).await;
                elfgate_core::telemetry::record_step(
                    &span,
                    if tried.is_ok() { "success" } else { "failed" },
                    Some(&since(before, self.usage)),
                );
                match tried {
                    Ok(done) => break Ok(done),
                    Err(Failure::Interrupted) => {
                        self.end(&step.id, StepStatus::Interrupted, Value::Null, None)
                            .await;
                        return self.outcome(FinishReason::Interrupted);
                    }
                    Err(Failure::Fatal(outcome)) => return *outcome,
                    Err(Failure::Failed(why)) if attempt < tries => {
                        self.end(&step.id, StepStatus::Error, Value::Null, Some(why.clone()))
                            .await;
                        let backoff = step.retries.map_or(0, |r| r.backoff_ms);
                        let delay = backoff.saturating_mul(1u64 << (attempt - 1).min(20));
                        ctx.events
                            .emit(EventPayload::Retry {
                                retry: RetryInfo {
                                    attempt,
                                    max_attempts: tries - 1,
                                    delay_ms: delay,
                                    reason: format!("step '{}': {why}", step.id),
                                },
                            })
                            .await;
                        tokio::select! {
                            () = ctx.cancel.cancelled() => {
                                return self.outcome(FinishReason::Interrupted);
                            }
                            () = tokio::time::sleep(Duration::from_millis(delay)) => {}
                        }
                        attempt += 1;
                    }
                    Err(Failure::Failed(why)) => break Err(why),
                }
            };
            self.spent.push(StepUsage {
                step_id: step.id.clone(),
                usage: since(before, self.usage),
                cost_usd: self.step_cost.take(),
            });
            let limit = self.engine.templates.limits().output_bytes;
            let done = match done {
                Ok(Done::Output(output)) => bounded_output(output, limit).map(Done::Output),
                other => other,
            };
            match done {
                Ok(Done::Output(output)) => {
                    self.end(&step.id, StepStatus::Success, output, None).await;
                }
                Ok(Done::Condition(holds)) => {
                    self.end(&step.id, StepStatus::Success, Value::Bool(holds), None)
                        .await;
                    match (holds, step.otherwise.unwrap_or_default()) {
                        (true, _) => {}
                        (false, Otherwise::End) => return self.finish(FinishReason::Stop).await,
                        (false, Otherwise::SkipNext) => skip_next = true,
                    }
                }
                Err(why) if step.continue_on_error => {
                    self.end(
                        &step.id,
                        StepStatus::Error,
                        Value::String(why.clone()),
                        Some(why),
                    )
                    .await;
                }
                Err(why) => {
                    self.end(&step.id, StepStatus::Error, Value::Null, Some(why.clone()))
                        .await;
                    let why = format!("step '{}' failed: {why}", step.id);
                    return self.fatal(ErrorCode::WorkflowStep, why).await;
                }
            }
        }
        self.finish(FinishReason::Stop).await
    }

    /// Runs one try of a step.
    async fn step(&mut self, kind: &StepKind<'_>, wref: &WorkflowRef) -> Result<Done, Failure> {
        let scope = Arc::new(json!({"inputs": wref.inputs, "steps": self.outputs}));
        match *kind {
            StepKind::Tool(name, arguments) => {
                let arguments = match arguments {
                    Some(a) => self.render_value(a, &scope, "arguments").await?,
                    None => Value::Object(Map::new()),
                };
                self.tool(name, arguments).await
            }
            StepKind::Model(m) => self.model(m, &scope).await,
            StepKind::If(condition, _) => {
                let text = self.render(condition, &scope, "if").await?;
                match text.trim() {
                    "true" | "True" => Ok(Done::Condition(true)),
                    "false" | "False" | "" | "none" | "None" => Ok(Done::Condition(false)),
                    other => Err(Failure::Failed(format!(
                        "if: renders to '{other}', not true or false"
                    ))),
                }
            }
            StepKind::Agent(a) => self.agent(a, &scope).await,
        }
    }

    async fn tool(&mut self, name: &str, arguments: Value) -> Result<Done, Failure> {
        let call = ToolRun {
            name: name.to_string(),
            arguments,
        };
        match self.engine.tools.run_step_tool(self.ctx, call).await {
            Ok(a) if a.status == ToolCallStatus::Interrupted => Err(Failure::Interrupted),
            Ok(a) if a.is_error || a.status != ToolCallStatus::Success => {
                Err(Failure::Failed(format!("{name}: {}", a.content)))
            }
            Ok(a) => Ok(Done::Output(Value::String(a.content))),
            Err(outcome) if outcome.finish_reason == FinishReason::Interrupted => {
                Err(Failure::Interrupted)
            }
            Err(outcome) => Err(Failure::Fatal(Box::new(outcome))),
        }
    }

    async fn model(&mut self, m: &ModelStep, scope: &Arc<Value>) -> Result<Done, Failure> {
        let prompt = self.render(&m.prompt, scope, "model.prompt").await?;
        let system = match &m.system_prompt {
            Some(s) => Some(self.render(s, scope, "model.systemPrompt").await?),
            None => None,
        };
        let (provider_name, provider) = self
            .engine
            .providers
            .resolve(m.provider_id.as_deref())
            .map_err(|e| Failure::Failed(e.to_string()))?;
        let model = m
            .model
            .clone()
            .or_else(|| provider.default_model().map(str::to_string))
            .ok_or_else(|| {
                Failure::Failed(format!(
                    "no model given and provider '{provider_name}' has no default model"
                ))
            })?;
        let req = LlmRequest {
            model,
            system,
            messages: vec![LlmMessage {
                role: Role::User,
                blocks: vec![ContentBlock::Text { text: prompt }],
            }],
            max_tokens: m.max_tokens,
            response_format: m.output_schema.as_ref().map(|schema| {
                json!({"type": "json_schema",
                       "json_schema": {"name": "output", "schema": schema}})
            }),
            ..LlmRequest::default()
        };
        let opts = TurnOptions {
            report_errors: false,
            ..TurnOptions::default()
        };
        let limits = self.engine.providers.limits(&provider_name, &req.model);
        let target = CallTarget {
            provider: provider.as_ref(),
            name: &provider_name,
            prices: limits.prices(),
        };
        let out = relay_turn(
            target,
            &req,
            &self.engine.retry,
            self.ctx,
            Instant::now(),
            opts,
            None,
        )
        .await;
        self.usage += out.usage;
        if let Some(cost) = out.cost_usd {
            *self.step_cost.get_or_insert(0.0) += cost;
        }
        if out.interrupted {
            return Err(Failure::Interrupted);
        }
        if let Some(refusal) = out.refused.as_ref().filter(|_| out.budget_paused()) {
            // A spent budget pauses the run (no retry can change it): resumed from this step
            // once the budget has room.
            crate::metering::announce(self.ctx, refusal).await;
            return Err(Failure::Fatal(Box::new(RunOutcome::new(
                FinishReason::BudgetPaused,
            ))));
        }
        if let Some(e) = out.error {
            return Err(Failure::Failed(format!("{provider_name}: {}", e.message)));
        }
        match &m.output_schema {
            Some(_) => serde_json::from_str(out.text.trim())
                .map(Done::Output)
                .map_err(|e| Failure::Failed(format!("the answer is not the JSON asked for: {e}"))),
            None => Ok(Done::Output(Value::String(out.text))),
        }
    }

    /// A run of the agent loop inside the step: its own prompt (stored and announced as a user
    /// message of the session), tools, model and permission mode, over the session's history;
    /// its answer is stored and is the step's output.
    async fn agent(&mut self, a: &AgentStep, scope: &Arc<Value>) -> Result<Done, Failure> {
        let ctx = self.ctx;
        let prompt = self.render(&a.prompt, scope, "agent.prompt").await?;
        let system = match &a.system_prompt {
            Some(s) => Some(self.render(s, scope, "agent.systemPrompt").await?),
            None => ctx.system_prompt.clone(),
        };
        let ledger: Arc<dyn elfgate_core::RunLedger> = self.engine.store.clone();
        let recorder = elfgate_core::RunRecorder::new(ledger, ctx.session_id(), ctx.run_id);
        let mut sub = ctx.clone();
        sub.prompt = prompt;
        sub.is_resume = true;
        sub.parent_id = None;
        sub.user_message_id = elfgate_core::MessageId::new();
        sub.recorder = recorder.clone();
        sub.system_prompt = system;
        sub.provider_id = a.provider_id.clone().or_else(|| ctx.provider_id.clone());
        sub.model = a.model.clone().or_else(|| ctx.model.clone());
        sub.permission_mode = a.permission_mode.or(ctx.permission_mode);
        if a.enabled_tools.is_some() {
            sub.engine_config.enabled_tools = a.enabled_tools.clone();
        }
        sub.tool_run = None;
        sub.head_start = elfgate_core::HeadStart::default();
        let outcome = self.engine.agents.run_prompt(sub).await;
        // The step's model calls are the workflow run's, for its ledger rows and cost.
        for call in recorder.take_model_calls() {
            ctx.recorder.note_model_call(call);
        }
        self.usage += outcome.usage;
        if let Some(cost) = outcome.turn.as_ref().and_then(|t| t.cost_usd) {
            *self.step_cost.get_or_insert(0.0) += cost;
        }
        // Its closing message: handed back to be stored (as a run's is), or stored by the loop.
        let text = match &outcome.answer {
            Some(answer) => answer.text(),
            None => match self.engine.store.latest_message(ctx.session_id()).await {
                Ok(Some(m)) if m.role == Role::Assistant && m.run_id == Some(ctx.run_id) => {
                    m.text()
                }
                Ok(_) => String::new(),
                Err(e) => {
                    let out = fail(ctx, ErrorCode::Storage, e.report()).await;
                    return Err(Failure::Fatal(Box::new(out)));
                }
            },
        };
        if let Some(answer) = outcome.answer {
            if let Err(e) = recorder.add_message(&answer).await {
                let out = fail(ctx, ErrorCode::Storage, e.0).await;
                return Err(Failure::Fatal(Box::new(out)));
            }
            ctx.events
                .emit(EventPayload::AssistantMessage { message: answer })
                .await;
        }
        match outcome.finish_reason {
            FinishReason::Stop => Ok(Done::Output(Value::String(text))),
            FinishReason::Interrupted => Err(Failure::Interrupted),
            other => Err(Failure::Failed(match outcome.error {
                Some(e) => format!("the agent ended with {}: {}", other.as_str(), e.message),
                None => format!("the agent ended with {}", other.as_str()),
            })),
        }
    }

    /// Renders `src` over `scope` within the limits, off the async workers; a failure names
    /// `field`, a cancelled run is interrupted.
    async fn render(&self, src: &str, scope: &Arc<Value>, field: &str) -> Result<String, Failure> {
        match self
            .engine
            .templates
            .render(src, scope, &self.ctx.cancel)
            .await
        {
            Ok(text) => Ok(text),
            Err(RenderError::Cancelled) => Err(Failure::Interrupted),
            Err(e) => Err(Failure::Failed(format!("{field}: {e}"))),
        }
    }

    /// `v` with every string in it rendered.
    async fn render_value(
        &self,
        v: &Value,
        scope: &Arc<Value>,
        field: &str,
    ) -> Result<Value, Failure> {
        let mut sources = Vec::new();
        strings_of(v, field, &mut sources);
        let mut rendered = Vec::with_capacity(sources.len());
        for (path, src) in sources {
            rendered.push(self.render(src, scope, &path).await?);
        }
        Ok(with_strings(v, &mut rendered.into_iter()))
    }

    /// Closes a step: its `stepEnd`, and its output for the steps after it.
    async fn end(&mut self, id: &str, status: StepStatus, output: Value, error: Option<String>) {
        self.outputs
            .insert(id.to_string(), json!({"output": output, "status": status}));
        self.ctx
            .events
            .emit(EventPayload::StepEnd {
                step_id: id.to_string(),
                status,
                output,
                error,
            })
            .await;
    }

    /// The run's end, with the step outputs as its answer (an assistant message of JSON).
    async fn finish(self, reason: FinishReason) -> RunOutcome {
        let ctx = self.ctx;
        let parent = match self.engine.store.latest_message(ctx.session_id()).await {
            Ok(m) => m.map(|m| m.id),
            Err(e) => return fail(ctx, ErrorCode::Storage, e.report()).await,
        };
        let text = answer_within(&self.outputs, self.engine.templates.limits().output_bytes);
        let mut outcome = self.outcome(reason);
        outcome.answer = Some(Message::new(
            ctx.session_id(),
            Some(ctx.run_id),
            parent,
            Role::Assistant,
            vec![ContentBlock::Text { text }],
        ));
        outcome
    }

    fn outcome(&self, reason: FinishReason) -> RunOutcome {
        let mut outcome = RunOutcome::new(reason);
        outcome.usage = self.usage;
        outcome.steps = self.spent.clone();
        outcome
    }

    /// Ends the run with an error, its tokens kept.
    async fn fatal(&self, code: ErrorCode, why: String) -> RunOutcome {
        let mut outcome = fail(self.ctx, code, why).await;
        outcome.usage = self.usage;
        outcome.steps = self.spent.clone();
        outcome
    }
}

/// The tokens spent between `before` and `now`.
fn since(before: TokenUsage, now: TokenUsage) -> TokenUsage {
    TokenUsage {
        input_tokens: now.input_tokens.saturating_sub(before.input_tokens),
        output_tokens: now.output_tokens.saturating_sub(before.output_tokens),
        cache_read_tokens: now
            .cache_read_tokens
            .saturating_sub(before.cache_read_tokens),
        cache_write_tokens: now
            .cache_write_tokens
            .saturating_sub(before.cache_write_tokens),
    }
}

fn kind_name(kind: &StepKind<'_>) -> elfgate_core::event::StepKind {
    use elfgate_core::event::StepKind as Named;
    match kind {
        StepKind::Tool(..) => Named::Tool,
        StepKind::Model(_) => Named::Model,
        StepKind::Agent(_) => Named::Agent,
        StepKind::If(..) => Named::If,
    }
}
