//! A CLI run's messages, stored as the tinyelf engine stores its own: an assistant message with
//! the text, thinking and tool_use blocks of one step, then a tool message with their results,
//! stored as soon as every call of the step has its result (a crash mid-run leaves valid history).
//! What is left at the end is the run's closing message, which the dispatcher stores.

use elfgate_core::{
    ContentBlock, DeltaKind, EngineSessionContext, ErrorCode, ErrorInfo, EventPayload, Message,
    MessageId, Role, TokenUsage, ToolCallStatus,
};
use serde_json::Value;

/// The messages of one run so far.
pub(crate) struct Transcript {
    /// The message the next one follows.
    parent: MessageId,
    model: Option<String>,
    /// The step being written: text, thinking and tool_use blocks.
    blocks: Vec<ContentBlock>,
    /// Results of the step's calls.
    results: Vec<ContentBlock>,
    /// Calls of the step still without a result.
    open: Vec<String>,
    /// The `execute_tool` spans of the CLI's calls still open (runs are traced).
    spans: Vec<(String, tracing::Span)>,
}

impl Transcript {
    /// A transcript that follows the run's user message.
    pub(crate) fn new(user: MessageId, model: Option<String>) -> Transcript {
        Transcript {
            parent: user,
            model,
            blocks: Vec::new(),
            results: Vec::new(),
            open: Vec::new(),
            spans: Vec::new(),
        }
    }

    /// Announces and keeps a piece of text or reasoning.
    pub(crate) async fn delta(
        &mut self,
        ctx: &EngineSessionContext,
        kind: DeltaKind,
        text: String,
    ) {
        if text.is_empty() {
            return;
        }
        ctx.events
            .emit(EventPayload::StreamDelta {
                delta: elfgate_core::Delta {
                    kind,
                    text: text.clone(),
                    signature: None,
                },
            })
            .await;
        match (self.blocks.last_mut(), kind) {
            (Some(ContentBlock::Text { text: t }), DeltaKind::Text) => t.push_str(&text),
            (Some(ContentBlock::Thinking { thinking, .. }), DeltaKind::Thinking) => {
                thinking.push_str(&text);
            }
            (_, DeltaKind::Text) => self.blocks.push(ContentBlock::text(text)),
            (_, DeltaKind::Thinking) => self.blocks.push(ContentBlock::Thinking {
                thinking: text,
                signature: None,
            }),
        }
    }

    /// A tool call starts.
    pub(crate) async fn tool_start(
        &mut self,
        ctx: &EngineSessionContext,
        id: String,
        name: String,
        input: Value,
    ) {
        if elfgate_core::telemetry::enabled() {
            let span = elfgate_core::telemetry::tool_span(&name, &id, &input.to_string());
            elfgate_core::telemetry::mark_reported(&span);
            self.spans.push((id.clone(), span));
        }
        let block = ContentBlock::ToolUse {
            id: id.clone(),
            name,
            input,
        };
        ctx.events
            .emit(EventPayload::ToolCallStart {
                block: block.clone(),
            })
            .await;
        self.blocks.push(block);
        self.open.push(id);
    }

    /// A tool call ended; the step is stored once all its calls have.
    pub(crate) async fn tool_end(
        &mut self,
        ctx: &EngineSessionContext,
        id: String,
        content: String,
        status: ToolCallStatus,
    ) -> Result<(), ErrorInfo> {
        if let Some(at) = self.spans.iter().position(|(open, _)| *open == id) {
            let (_, span) = self.spans.swap_remove(at);
            elfgate_core::telemetry::record_tool(&span, status.as_str(), &content);
        }
        let block = ContentBlock::ToolResult {
            tool_use_id: id.clone(),
            content,
            is_error: status != ToolCallStatus::Success,
        };
        ctx.events
            .emit(EventPayload::ToolCallEnd {
                block: block.clone(),
                status,
            })
            .await;
        self.results.push(block);
        self.open.retain(|o| *o != id);
        if self.open.is_empty() {
            self.store_step(ctx).await?;
        }
        Ok(())
    }

    /// Stores the step: its assistant message, announced, then its tool message.
    async fn store_step(&mut self, ctx: &EngineSessionContext) -> Result<(), ErrorInfo> {
        if !self.blocks.is_empty() {
            let blocks = std::mem::take(&mut self.blocks);
            let msg = self.message(ctx, Role::Assistant, blocks);
            store(ctx, &msg).await?;
            self.parent = msg.id;
            ctx.events
                .emit(EventPayload::AssistantMessage { message: msg })
                .await;
        }
        if !self.results.is_empty() {
            let results = std::mem::take(&mut self.results);
            let msg = self.message(ctx, Role::Tool, results);
            store(ctx, &msg).await?;
            self.parent = msg.id;
        }
        Ok(())
    }

    fn message(
        &self,
        ctx: &EngineSessionContext,
        role: Role,
        blocks: Vec<ContentBlock>,
    ) -> Message {
        let mut m = Message::new(
            ctx.session_id(),
            Some(ctx.run_id),
            Some(self.parent),
            role,
            blocks,
        );
        if role == Role::Assistant {
            m.model = self.model.clone();
        }
        m
    }

    /// Ends the transcript: calls left open get a result saying why (`status`), and the step
    /// is stored; otherwise what was written last is returned as the run's closing message.
    pub(crate) async fn finish(
        mut self,
        ctx: &EngineSessionContext,
        status: ToolCallStatus,
        tokens: TokenUsage,
    ) -> Result<Option<Message>, ErrorInfo> {
        if !self.open.is_empty() {
            let why = match status {
                ToolCallStatus::Interrupted => "interrupted before the tool call ended",
                _ => "the CLI ended before the tool call did",
            };
            for id in self.open.clone() {
                self.tool_end(ctx, id, why.to_string(), status).await?;
            }
            return Ok(None);
        }
        if self.blocks.is_empty() {
            return Ok(None);
        }
        let blocks = std::mem::take(&mut self.blocks);
        let mut answer = self.message(ctx, Role::Assistant, blocks);
        answer.input_tokens = Some(tokens.input_tokens);
        answer.output_tokens = Some(tokens.output_tokens);
        Ok(Some(answer))
    }
}

async fn store(ctx: &EngineSessionContext, msg: &Message) -> Result<(), ErrorInfo> {
    ctx.recorder
        .add_message(msg)
        .await
        .map_err(|e| ErrorInfo::new(ErrorCode::Storage, e.0))
}
