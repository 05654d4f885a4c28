//! The chat engines: `chat` (multi-turn, history along the parentId branch), `st-chat` (single turn,
//! no history sent) and `api` (stateless completion). They share one implementation and differ in
//! what they send upstream.

use crate::prompt::store_user_message;
use crate::providers::ProviderRegistry;
use crate::streaming::stream_turn;
use async_trait::async_trait;
use elfgate_core::{
    ActiveSessions, ContentBlock, Engine, EngineSessionContext, EngineType, ErrorInfo,
    EventPayload, FinishReason, Message, Role, RunOutcome,
};
use elfgate_llm::{LlmFinishReason, LlmMessage, LlmRequest, RetryPolicy, ThinkingLevel};
use elfgate_store::Store;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
            retry: RetryPolicy {
                max_retries: 2,
                base_delay: Duration::from_millis(1000),
                max_delay: Duration::from_secs(30),
            },
        }
    }
}

/// A chat-style engine.
pub struct ChatEngine {
    mode: ChatMode,
    store: Arc<dyn Store>,
    providers: ProviderRegistry,
    settings: ChatSettings,
    active: ActiveSessions,
}

impl ChatEngine {
    /// A chat engine of the given mode.
    pub fn new(
        mode: ChatMode,
        store: Arc<dyn Store>,
        providers: ProviderRegistry,
        settings: ChatSettings,
        active: ActiveSessions,
    ) -> Self {
        ChatEngine {
            mode,
            store,
            providers,
            settings,
            active,
        }
    }

    fn fail(&self, ctx: &EngineSessionContext, code: &str, message: String) -> RunOutcome {
        let error = ErrorInfo::new(code, message);
        ctx.events.emit(EventPayload::Error {
            error: error.clone(),
        });
        RunOutcome::failed(error)
    }

    async fn run(&self, ctx: EngineSessionContext) -> RunOutcome {
        let started = Instant::now();
        let session_id = ctx.session_id();
        let (provider_name, provider) = match self.providers.resolve(ctx.provider_id.as_deref()) {
            Ok(p) => p,
            Err(e) => return self.fail(&ctx, "unknown_provider", e.to_string()),
        };
        let model = match ctx
            .model
            .clone()
            .or_else(|| provider.default_model().map(str::to_string))
        {
            Some(m) => m,
            None => {
                return self.fail(
                    &ctx,
                    "no_model",
                    format!("no model given and provider '{provider_name}' has no default model"),
                );
            }
        };
        ctx.events.emit(EventPayload::Init {
            system_info: json!({
                "engine": self.engine_type().as_str(),
                "provider": provider_name,
                "model": model,
                "daemonVersion": env!("CARGO_PKG_VERSION"),
            }),
        });

        let (user, parent) = match store_user_message(self.store.as_ref(), &ctx).await {
            Ok(u) => u,
            Err(e) => return self.fail(&ctx, "storage", e),
        };

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
                    Err(e) => return self.fail(&ctx, "storage", e.to_string()),
                },
                None => Vec::new(),
            },
            ChatMode::SingleTurn | ChatMode::Stateless => Vec::new(),
        };
        let req = self.request(&ctx, model.clone(), &history, &user);
        let turn = stream_turn(provider.as_ref(), &req, &self.settings.retry, &ctx, started).await;
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
        if !blocks.is_empty() {
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
            match self.store.insert_message(&answer).await {
                Ok(()) => {
                    ctx.events
                        .emit(EventPayload::AssistantMessage { message: answer });
                }
                Err(e) => {
                    return self.fail(&ctx, "storage", e.to_string());
                }
            }
        }
        if matches!(turn.finish, Some(LlmFinishReason::Length)) {
            ctx.events.emit(EventPayload::Processing {
                message: "the answer was cut at the output token limit".to_string(),
            });
        }
        RunOutcome {
            finish_reason,
            input_tokens: turn.input_tokens,
            output_tokens: turn.output_tokens,
            iterations: 1,
            error: turn.error,
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
            temperature: cfg
                .get("temperature")
                .and_then(Value::as_f64)
                .map(|t| t as f32)
                .or(self.settings.temperature),
            max_tokens: cfg
                .get("maxTokens")
                .and_then(Value::as_u64)
                .map(|t| t.min(u32::MAX as u64) as u32)
                .or(self.settings.max_tokens),
            thinking: thinking_level(
                ctx.thinking_level
                    .as_deref()
                    .or_else(|| cfg.get("thinkingLevel").and_then(Value::as_str)),
            ),
            tools: Vec::new(),
        }
    }
}

/// Maps a thinking level name to the provider-neutral level; unknown names mean none.
pub fn thinking_level(name: Option<&str>) -> ThinkingLevel {
    match name {
        Some("low") => ThinkingLevel::Low,
        Some("medium") => ThinkingLevel::Medium,
        Some("high") => ThinkingLevel::High,
        _ => ThinkingLevel::None,
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
        caps
    }

    async fn start_session(&self, ctx: EngineSessionContext) -> RunOutcome {
        self.run(ctx).await
    }

    fn is_active(&self, session_id: elfgate_core::SessionId) -> bool {
        self.active
            .get(session_id)
            .is_some_and(|r| r.engine == self.engine_type())
    }
}
