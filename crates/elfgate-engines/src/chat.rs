//! The chat engines: `chat` (multi-turn, history along the parentId branch), `st-chat` (single turn,
//! no history sent) and `api` (stateless completion). They share one implementation and differ in
//! what they send upstream.

use crate::prompt::store_user_message;
use crate::providers::ProviderRegistry;
use crate::streaming::{fail, stream_turn_from};
use async_trait::async_trait;
use elfgate_core::{
    ContentBlock, Engine, EngineSessionContext, EngineType, EventPayload, FinishReason, HeadStart,
    Message, Role, RunOutcome,
};
use elfgate_llm::{
    FirstAttempt, LlmFinishReason, LlmMessage, LlmProvider, LlmRequest, RetryPolicy,
    spawn_first_attempt,
};
use elfgate_store::Store;
use serde_json::json;
use std::sync::Arc;
use std::time::Instant;

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
    store: Arc<dyn Store>,
    providers: ProviderRegistry,
    settings: ChatSettings,
    tool_loop: Option<Arc<dyn ToolLoop>>,
}

impl ChatEngine {
    /// A chat engine of the given mode.
    pub fn new(
        mode: ChatMode,
        store: Arc<dyn Store>,
        providers: ProviderRegistry,
        settings: ChatSettings,
    ) -> Self {
        ChatEngine {
            mode,
            store,
            providers,
            settings,
            tool_loop: None,
        }
    }

    /// Gives the sessions that set mcpConfig their MCP tools, through `tool_loop`.
    pub fn with_tool_loop(mut self, tool_loop: Arc<dyn ToolLoop>) -> Self {
        self.tool_loop = Some(tool_loop);
        self
    }

    /// The tool loop, when this prompt's session set mcpConfig.
    fn tool_loop_for(&self, ctx: &EngineSessionContext) -> Option<&Arc<dyn ToolLoop>> {
        self.tool_loop
            .as_ref()
            .filter(|_| ctx.engine_config.mcp_config.is_some())
    }

    /// The provider and model a run uses, or the error that ends it.
    fn target(&self, ctx: &EngineSessionContext) -> Result<Target, (&'static str, String)> {
        let (provider_name, provider) = self
            .providers
            .resolve(ctx.provider_id.as_deref())
            .map_err(|e| ("unknown_provider", e.to_string()))?;
        let model = ctx
            .model
            .clone()
            .or_else(|| provider.default_model().map(str::to_string))
            .ok_or_else(|| {
                (
                    "no_model",
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
            return tool_loop.run(ctx).await;
        }
        let session_id = ctx.session_id();
        let head = ctx.head_start.take::<ChatHeadStart>();
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
                system_info: json!({
                    "engine": self.engine_type().as_str(),
                    "provider": provider_name,
                    "model": model,
                    "daemonVersion": env!("CARGO_PKG_VERSION"),
                }),
            })
            .await;

        let (user, parent) = match store_user_message(self.store.as_ref(), &ctx).await {
            Ok(u) => u,
            Err(e) => return fail(&ctx, "storage", e).await,
        };

        let (req, first) = match head {
            // Built from the same stored prompt, with no history: a first run follows nothing.
            Some(h) => (h.req, Some(h.first)),
            None => {
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
                            Err(e) => return fail(&ctx, "storage", e.report()).await,
                        },
                        None => Vec::new(),
                    },
                    ChatMode::SingleTurn | ChatMode::Stateless => Vec::new(),
                };
                (
                    Arc::new(self.request(&ctx, model.clone(), &history, &user)),
                    None,
                )
            }
        };
        let turn = stream_turn_from(
            provider.as_ref(),
            &req,
            &self.settings.retry,
            &ctx,
            started,
            first,
        )
        .await;
        if !turn.tool_calls.is_empty() {
            tracing::debug!(
                calls = turn.tool_calls.len(),
                "chat engine ignores tool calls"
            );
        }

        let finish_reason = if turn.interrupted {
            FinishReason::Interrupted
        } else if turn.error.is_some() {
            FinishReason::Error
        } else {
            FinishReason::Stop
        };
        // Whatever was streamed is kept, also on interrupt or error.
        let mut blocks = Vec::new();
        if !turn.thinking.is_empty() {
            blocks.push(ContentBlock::Thinking {
                thinking: turn.thinking,
                signature: turn.signature,
            });
        }
        if !turn.text.is_empty() {
            blocks.push(ContentBlock::text(turn.text));
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
            answer.input_tokens = Some(turn.input_tokens);
            answer.output_tokens = Some(turn.output_tokens);
            answer
        });
        if matches!(turn.finish, Some(LlmFinishReason::Length)) {
            ctx.events
                .emit(EventPayload::Processing {
                    message: "the answer was cut at the output token limit".to_string(),
                })
                .await;
        }
        RunOutcome {
            finish_reason,
            input_tokens: turn.input_tokens,
            output_tokens: turn.output_tokens,
            iterations: 1,
            error: turn.error,
            answer,
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
            messages,
            temperature: cfg.temperature.or(self.settings.temperature),
            max_tokens: cfg.max_tokens.or(self.settings.max_tokens),
            thinking: ctx
                .thinking_level
                .or(cfg.thinking_level)
                .unwrap_or_default(),
            tools: Vec::new(),
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

    async fn start_session(&self, ctx: EngineSessionContext) -> RunOutcome {
        self.run(ctx).await
    }

    /// Opens the upstream call of a session's first prompt while the session is being committed.
    /// Only a first prompt stored with its session qualifies: it follows nothing, so the request
    /// does not depend on the store.
    fn head_start(&self, ctx: &EngineSessionContext) -> HeadStart {
        // The tool loop makes its own calls, with the tools in them.
        if self.tool_loop_for(ctx).is_some() {
            return HeadStart::default();
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
        })
    }
}
