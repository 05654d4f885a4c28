//! The chat engines: `chat` (multi-turn, history along the parentId branch), `st-chat` (single turn,
//! no history sent) and `api` (stateless completion). They share one implementation and differ in
//! what they send upstream.

use crate::prompt::store_user_message;
use crate::providers::ProviderRegistry;
use crate::streaming::{CallTarget, TurnOptions, TurnOutput, fail, relay_turn};
use async_trait::async_trait;
use elfgate_core::{
    ContentBlock, Engine, EngineSessionContext, EngineType, ErrorCode, EventPayload, FinishReason,
    HeadStart, Message, RetryInfo, Role, RunOutcome,
};
use elfgate_llm::{
    FirstAttempt, LlmFinishReason, LlmMessage, LlmProvider, LlmRequest, RetryPolicy,
    spawn_first_attempt,
};
use elfgate_store::SessionReads;
use serde_json::json;
use std::sync::Arc;
use std::time::Instant;

mod search_first;
mod served_search;
use search_first::searches;
pub use served_search::{SERVED_SEARCH, served_search_spec};

/// A provider a call goes to: its configured name and its client.
type Route = (String, Arc<dyn LlmProvider>);

/// What a chat engine sends upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatMode {
    /// History along the branch, then the prompt (`chat`).
    MultiTurn,
    /// Only the prompt (`st-chat`).
    SingleTurn,
    /// Only the prompt; nothing kept active beyond the run (`api`).
    Stateless,
}

/// Settings shared by the chat engines.
#[derive(Debug, Clone)]
pub struct ChatSettings {
    /// Most history messages sent (`chat`), the prompt included.
    pub max_history: u32,
    /// Default sampling temperature.
    pub temperature: Option<f32>,
    /// Default output limit.
    pub max_tokens: Option<u32>,
    /// Retries of the upstream call before the first token.
    pub retry: RetryPolicy,
}

impl Default for ChatSettings {
    fn default() -> Self {
        ChatSettings {
            max_history: 100,
            temperature: None,
            max_tokens: None,
            retry: RetryPolicy::default(),
        }
    }
}

/// A whole upstream request a front door of the gateway built from its caller's request (its
/// history, tools, stop sequences...), handed to the run through its head start. The run sends it
/// as given (with the route's model) instead of building one from the stored history, and keeps
/// the tool calls the model asks for in its answer, for the caller to run.
#[derive(Debug, Clone)]
pub struct GatewayTurn {
    /// The request; its model is replaced by the route's.
    pub request: LlmRequest,
    /// Routes (provider, model) tried in order when the call fails before its first token with
    /// an error another provider may not have (a connection error, 429 or 5xx after the
    /// retries); each switch is announced by a `retry` event naming the next route.
    pub fallbacks: Vec<(String, String)>,
    /// The caller's built-in `web_search` is served by the daemon's search backend: the request
    /// offers [`served_search_spec`], and the model's calls of it are searched here, answered
    /// and followed by another call, never relayed to the caller.
    pub served_search: bool,
}

/// The note a run emits (a `processing` event) when the answer was cut at the output token limit,
/// for a person reading the stream; programs read `result.stats.modelFinishReason`.
const LENGTH_NOTE: &str = "the answer was cut at the output token limit";

/// The start of the note a run emits (a `processing` event) when the model wrote one of the
/// request's stop sequences and the provider said which; the sequence follows, as it was given.
/// Programs read `result.stats.stopSequence`.
const STOP_SEQUENCE_NOTE: &str = "the answer ended at the stop sequence ";
/// The `processing` note of an answer the provider paused (a chat run makes one call).
const PAUSED_NOTE: &str = "the provider paused its turn (pause_turn): the answer so far is \
stored; the session's next message lets it go on";

/// Where a run's request goes.
#[derive(Clone)]
struct Target {
    provider_name: String,
    provider: Arc<dyn LlmProvider>,
    model: String,
}

/// The upstream call of a first prompt, opened before the run was admitted.
struct ChatHeadStart {
    opened: Instant,
    target: Target,
    req: Arc<LlmRequest>,
    first: FirstAttempt,
    /// Set when the request is a gateway caller's ([`GatewayTurn`]): its fallback routes.
    gateway_fallbacks: Option<Vec<(String, String)>>,
    /// Set when the gateway caller's `web_search` is served here ([`GatewayTurn::served_search`]).
    gateway_served_search: bool,
}

/// Runs a prompt of a chat session that set mcpConfig: model calls and MCP tool calls in a loop,
/// through the tool pipeline, bounded by max_iterations. The tinyelf engine provides it.
#[async_trait]
pub trait ToolLoop: Send + Sync {
    /// Runs the prompt.
    async fn run(&self, ctx: EngineSessionContext) -> RunOutcome;
}

/// A chat-style engine.
pub struct ChatEngine {
    mode: ChatMode,
    /// Only read: the parent of the user message and the history (the run's recorder writes).
    store: Arc<dyn SessionReads>,
    providers: ProviderRegistry,
    settings: ChatSettings,
    tool_loop: Option<Arc<dyn ToolLoop>>,
    /// The search backend of `[tools.web_search]`, for sessions with searchOrchestration.
    search: Option<Arc<elfgate_tools::search::WebSearch>>,
}

impl ChatEngine {
    /// A chat engine of the given mode.
    pub fn new(
        mode: ChatMode,
        store: Arc<dyn SessionReads>,
        providers: ProviderRegistry,
        settings: ChatSettings,
    ) -> Self {
        ChatEngine {
            mode,
            store,
            providers,
            settings,
            tool_loop: None,
            search: None,
        }
    }

    /// Gives the sessions that set mcpConfig their MCP tools, through `tool_loop`.
    pub fn with_tool_loop(mut self, tool_loop: Arc<dyn ToolLoop>) -> Self {
        self.tool_loop = Some(tool_loop);
        self
    }

    /// This engine with the search backend searchOrchestration uses.
    pub fn with_search(mut self, search: Option<Arc<elfgate_tools::search::WebSearch>>) -> Self {
        self.search = search;
        self
    }

    /// The tool loop, when this prompt's session set mcpConfig.
    fn tool_loop_for(&self, ctx: &EngineSessionContext) -> Option<&Arc<dyn ToolLoop>> {
        self.tool_loop
            .as_ref()
            .filter(|_| ctx.engine_config.mcp_config.is_some())
    }

    /// The provider and model a run uses, or the error that ends it.
    fn target(&self, ctx: &EngineSessionContext) -> Result<Target, (ErrorCode, String)> {
        let (provider_name, provider) = self
            .providers
            .resolve(ctx.provider_id.as_deref())
            .map_err(|e| (ErrorCode::UnknownProvider, e.to_string()))?;
        let model = ctx
            .model
            .clone()
            .or_else(|| provider.default_model().map(str::to_string))
            .ok_or_else(|| {
                (
                    ErrorCode::NoModel,
                    format!("no model given and provider '{provider_name}' has no default model"),
                )
            })?;
        Ok(Target {
            provider_name,
            provider,
            model,
        })
    }

    async fn run(&self, ctx: EngineSessionContext) -> RunOutcome {
        if let Some(tool_loop) = self.tool_loop_for(&ctx) {
            if searches(&ctx) {
                ctx.events
                    .emit(EventPayload::Processing {
                        message: "searchOrchestration is not applied to a chat session that runs \
                                  tools (mcpConfig): its tool loop answers without searching first"
                            .to_string(),
                    })
                    .await;
            }
            return tool_loop.run(ctx).await;
        }
        let session_id = ctx.session_id();
        let gateway = ctx.head_start.take::<GatewayTurn>();
        let mut head = ctx.head_start.take::<ChatHeadStart>();
        let early_gateway = head.as_mut().and_then(|h| h.gateway_fallbacks.take());
        let mut served_search = head.as_ref().is_some_and(|h| h.gateway_served_search);
        // Time to first token counts from the upstream call's start, which a head start moved
        // before the run's.
        let started = head.as_ref().map_or_else(Instant::now, |h| h.opened);
        let Target {
            provider_name,
            provider,
            model,
        } = match &head {
            Some(h) => h.target.clone(),
            None => match self.target(&ctx) {
                Ok(t) => t,
                Err((code, message)) => return fail(&ctx, code, message).await,
            },
        };
        ctx.events
            .emit(EventPayload::Init {
                system_info: ctx.system_info(json!({
                    "engine": self.engine_type().as_str(),
                    "provider": provider_name,
                    "model": model,
                })),
            })
            .await;

        let (user, parent) = match store_user_message(self.store.as_ref(), &ctx).await {
            Ok(u) => u,
            Err(e) => return fail(&ctx, ErrorCode::Storage, e).await,
        };

        let keep_tool_calls = gateway.is_some() || early_gateway.is_some();
        let mut fallbacks = early_gateway.unwrap_or_default();
        let (req, first) = match (gateway, head) {
            (Some(g), _) => {
                fallbacks = g.fallbacks;
                served_search = g.served_search;
                let mut req = g.request;
                req.model = model.clone();
                (Arc::new(req), None)
            }
            // Built from the same stored prompt, with no history: a first run follows nothing.
            (None, Some(h)) => (h.req, Some(h.first)),
            (None, None) => {
                let history = match self.mode {
                    ChatMode::MultiTurn => match parent {
                        Some(leaf) => match self
                            .store
                            .branch(
                                session_id,
                                leaf,
                                self.settings.max_history.saturating_sub(1),
                            )
                            .await
                        {
                            Ok(h) => h,
                            Err(e) => return fail(&ctx, ErrorCode::Storage, e.report()).await,
                        },
                        None => Vec::new(),
                    },
                    ChatMode::SingleTurn | ChatMode::Stateless => Vec::new(),
                };
                let mut req = self.request(&ctx, model.clone(), &history, &user);
                if searches(&ctx) {
                    self.search_first(&ctx, &mut req).await;
                }
                (Arc::new(req), None)
            }
        };
        let route = (provider_name, provider);
        let (turn, model) = if served_search {
            self.turns_with_served_search(&ctx, route, req, fallbacks, started, first)
                .await
        } else {
            self.call(&ctx, route, req, fallbacks, started, first).await
        };
        if !turn.tool_calls.is_empty() && !keep_tool_calls {
            tracing::debug!(
                calls = turn.tool_calls.len(),
                "chat engine ignores tool calls"
            );
        }

        let finish_reason = if turn.interrupted {
            FinishReason::Interrupted
        } else if turn.budget_paused() {
            FinishReason::BudgetPaused
        } else if turn.error.is_some() {
            FinishReason::Error
        } else {
            FinishReason::Stop
        };
        // Whatever was streamed is kept, also on interrupt or error.
        let mut blocks = Vec::new();
        blocks.extend(turn.thinking_block());
        blocks.extend(turn.provider_blocks);
        if !turn.text.is_empty() {
            blocks.push(ContentBlock::text(turn.text));
        }
        if keep_tool_calls {
            for call in turn.tool_calls {
                // Malformed arguments are kept as the text the model wrote.
                let input = serde_json::from_str(&call.arguments)
                    .unwrap_or(serde_json::Value::String(call.arguments));
                blocks.push(ContentBlock::ToolUse {
                    id: call.id,
                    name: call.name,
                    input,
                });
            }
        }
        // Stored with the run's end (one commit) and announced after it by the dispatcher.
        let answer = (!blocks.is_empty()).then(|| {
            let mut answer = Message::new(
                session_id,
                Some(ctx.run_id),
                Some(user.id),
                Role::Assistant,
                blocks,
            );
            answer.model = Some(model);
            answer.input_tokens = Some(turn.usage.input_tokens);
            answer.output_tokens = Some(turn.usage.output_tokens);
            answer
        });
        let note = match &turn.finish {
            Some(LlmFinishReason::Length) => Some(LENGTH_NOTE.to_string()),
            Some(LlmFinishReason::StopSequence(seq)) => Some(format!("{STOP_SEQUENCE_NOTE}{seq}")),
            Some(LlmFinishReason::Paused) => Some(PAUSED_NOTE.to_string()),
            _ => None,
        };
        if let Some(message) = note {
            ctx.events.emit(EventPayload::Processing { message }).await;
        }
        let (model_finish, stop_sequence) = match turn
            .finish
            .as_ref()
            .map(elfgate_llm::LlmFinishReason::model_finish)
        {
            Some((f, s)) => (Some(f), s),
            None => (None, None),
        };
        RunOutcome {
            finish_reason,
            usage: turn.usage,
            output_tokens_estimated: turn.output_tokens_estimated,
            input_tokens_estimated: turn.input_tokens_estimated,
            model_finish,
            stop_sequence,
            iterations: 1,
            // A budget's pause is no failure: the budgetPaused event says why.
            error: turn
                .error
                .filter(|_| finish_reason != FinishReason::BudgetPaused),
            answer,
            turn: None,
            steps: Vec::new(),
            cost_usd: None,
            model_calls: Vec::new(),
        }
    }

    /// One model call: on the provider alone, or along the fallback routes.
    async fn call(
        &self,
        ctx: &EngineSessionContext,
        route: Route,
        req: Arc<LlmRequest>,
        fallbacks: Vec<(String, String)>,
        started: Instant,
        first: Option<FirstAttempt>,
    ) -> (TurnOutput, String) {
        if fallbacks.is_empty() {
            let turn = relay_turn(
                self.call_target(&route, &req),
                &req,
                &self.settings.retry,
                ctx,
                started,
                TurnOptions::default(),
                first,
            )
            .await;
            (turn, req.model.clone())
        } else {
            self.turn_with_fallbacks(ctx, route, req, fallbacks, started, first)
                .await
        }
    }

    /// One call on the first route, then on each fallback route while the previous one failed
    /// before its first token; the output of the last call made, and its model.
    async fn turn_with_fallbacks(
        &self,
        ctx: &EngineSessionContext,
        mut route: Route,
        mut req: Arc<LlmRequest>,
        fallbacks: Vec<(String, String)>,
        started: Instant,
        mut first: Option<FirstAttempt>,
    ) -> (TurnOutput, String) {
        let max_attempts = u32::try_from(fallbacks.len()).unwrap_or(u32::MAX);
        let mut rest = fallbacks.into_iter();
        let mut attempt = 0;
        loop {
            let opts = TurnOptions {
                report_errors: false,
                ..Default::default()
            };
            // The first route's first attempt may already be under way (the head start).
            let turn = relay_turn(
                self.call_target(&route, &req),
                &req,
                &self.settings.retry,
                ctx,
                started,
                opts,
                first.take(),
            )
            .await;
            let streamed =
                !turn.text.is_empty() || !turn.thinking.is_empty() || !turn.tool_calls.is_empty();
            if let Some(error) = &turn.error
                && !streamed
                && !turn.interrupted
                && !turn.permanent
                && let Some((name, model)) = rest.next()
            {
                match self.providers.resolve(Some(&name)) {
                    Ok(next) => {
                        attempt += 1;
                        ctx.events
                            .emit(EventPayload::Retry {
                                retry: RetryInfo {
                                    attempt,
                                    max_attempts,
                                    delay_ms: 0,
                                    reason: format!(
                                        "falling back to route {name}/{model}: {}",
                                        error.message
                                    ),
                                },
                            })
                            .await;
                        route = next;
                        let mut r = (*req).clone();
                        r.model = model;
                        req = Arc::new(r);
                        continue;
                    }
                    Err(e) => tracing::warn!(error = %e, "fallback route skipped"),
                }
            }
            if let Some(refusal) = &turn.refused {
                crate::metering::announce(ctx, refusal).await;
            } else if let Some(error) = &turn.error {
                ctx.events
                    .emit(EventPayload::Error {
                        error: error.clone(),
                    })
                    .await;
            }
            return (turn, req.model.clone());
        }
    }

    /// Where a call of `req` on `route` goes, with the model's prices.
    fn call_target<'a>(&self, route: &'a Route, req: &LlmRequest) -> CallTarget<'a> {
        CallTarget {
            provider: route.1.as_ref(),
            name: &route.0,
            prices: self.providers.prices(&route.0, &req.model),
        }
    }

    fn request(
        &self,
        ctx: &EngineSessionContext,
        model: String,
        history: &[Message],
        user: &Message,
    ) -> LlmRequest {
        let mut messages: Vec<LlmMessage> = history
            .iter()
            .filter(|m| m.role != Role::System && !m.blocks.is_empty())
            .map(|m| LlmMessage {
                role: m.role,
                blocks: m.blocks.clone(),
            })
            .collect();
        messages.push(LlmMessage {
            role: Role::User,
            blocks: user.blocks.clone(),
        });
        let cfg = &ctx.engine_config;
        LlmRequest {
            model,
            system: ctx.system_prompt.clone().filter(|s| !s.is_empty()),
            cache_prefix_len: 0,
            messages,
            temperature: cfg.temperature.or(self.settings.temperature),
            max_tokens: cfg.max_tokens.or(self.settings.max_tokens),
            thinking: ctx
                .thinking_level
                .or(cfg.thinking_level)
                .unwrap_or_default(),
            extended_context: cfg.use_extended_context.unwrap_or(false),
            native_search: cfg.native_search_enabled == Some(true),
            ..Default::default()
        }
    }
}

#[async_trait]
impl Engine for ChatEngine {
    fn engine_type(&self) -> EngineType {
        match self.mode {
            ChatMode::MultiTurn => EngineType::Chat,
            ChatMode::SingleTurn => EngineType::StChat,
            ChatMode::Stateless => EngineType::Api,
        }
    }

    fn description(&self) -> &'static str {
        match self.mode {
            ChatMode::MultiTurn => "Multi-turn chat: history along the branch, streamed answer",
            ChatMode::SingleTurn => "Single-turn chat: one prompt, one streamed answer, no history",
            ChatMode::Stateless => "Stateless completion through the provider, streamed back",
        }
    }

    fn capabilities(&self) -> Vec<&'static str> {
        let mut caps = vec!["streaming", "interrupt", "thinking", "attachments"];
        if self.mode == ChatMode::MultiTurn {
            caps.push("history");
            caps.push("branching");
        }
        if self.tool_loop.is_some() {
            caps.push("mcp");
        }
        caps
    }

    async fn run_prompt(&self, ctx: EngineSessionContext) -> RunOutcome {
        self.run(ctx).await
    }

    /// Opens the upstream call of a session's first prompt while the session is being committed.
    /// Only a first prompt stored with its session qualifies: it follows nothing, so the request
    /// does not depend on the store.
    fn head_start(&self, ctx: &EngineSessionContext) -> HeadStart {
        // The tool loop makes its own calls, with the tools in them; a search comes before the
        // call.
        if self.tool_loop_for(ctx).is_some() || searches(ctx) {
            return HeadStart::default();
        }
        // A call a meter (a budget, a rate limit) may refuse for this payer opens only once the
        // meter said yes, in the run: no head start then (a gateway caller's request stays in
        // the run's head start as it came). Without such a meter nothing changes.
        if ctx.meters.may_refuse(&ctx.payer) {
            return HeadStart::default();
        }
        // A gateway caller's request is whole before anything is stored: its call opens now
        // too, for a first prompt as for a later one (it does not depend on the store).
        if let Some(turn) = ctx.head_start.take::<GatewayTurn>() {
            let Ok(target) = self.target(ctx) else {
                // The run reports the error itself, from the request as it came.
                return HeadStart::new(turn);
            };
            let mut req = turn.request;
            req.model = target.model.clone();
            let req = Arc::new(req);
            let first = spawn_first_attempt(target.provider.clone(), req.clone());
            return HeadStart::new(ChatHeadStart {
                opened: Instant::now(),
                target,
                req,
                first,
                gateway_fallbacks: Some(turn.fallbacks),
                gateway_served_search: turn.served_search,
            });
        }
        let Some(user) = ctx.recorder.user_message() else {
            return HeadStart::default();
        };
        let Ok(target) = self.target(ctx) else {
            // The run reports the error itself.
            return HeadStart::default();
        };
        let req = Arc::new(self.request(ctx, target.model.clone(), &[], &user));
        let first = spawn_first_attempt(target.provider.clone(), req.clone());
        HeadStart::new(ChatHeadStart {
            opened: Instant::now(),
            target,
            req,
            first,
            gateway_fallbacks: None,
            gateway_served_search: false,
        })
    }
}
