//! The user's side of a run, shared by the engines: the stored user message. The store is only
//! read here (the parent); the message is written by the run's recorder.

use elfgate_core::{ContentBlock, EngineSessionContext, EventPayload, Message, MessageId, Role};
use elfgate_store::SessionReads;

/// The prompt's content blocks: the text, then the attachments: images, text inline, other
/// files as documents (or what a gateway door gave to store instead).
pub(crate) fn user_blocks(ctx: &EngineSessionContext) -> Vec<ContentBlock> {
    if let Some(blocks) = &ctx.stored_input {
        return blocks.clone();
    }
    let mut blocks = vec![ContentBlock::text(ctx.prompt.clone())];
    for a in &ctx.attachments {
        if a.media_type.starts_with("image/") {
            blocks.push(ContentBlock::Image {
                media_type: a.media_type.clone(),
                data: a.data.clone(),
                url: a.url.clone(),
            });
        } else if let Some(text) = &a.text {
            let name = a.name.as_deref().unwrap_or("attachment");
            blocks.push(ContentBlock::text(format!(
                "<attachment name=\"{name}\">\n{text}\n</attachment>"
            )));
        } else if a.data.is_some() || a.url.is_some() {
            // Which provider kinds take which types was checked when the request came.
            blocks.push(ContentBlock::Document {
                media_type: a.media_type.clone(),
                name: a.name.clone(),
                data: a.data.clone(),
                url: a.url.clone(),
            });
        }
    }
    blocks
}

/// The run's user message, following `parent`.
pub fn new_user_message(ctx: &EngineSessionContext, parent: Option<MessageId>) -> Message {
    let mut user = Message::new(
        ctx.session_id(),
        Some(ctx.run_id),
        parent,
        Role::User,
        user_blocks(ctx),
    );
    user.id = ctx.user_message_id;
    user
}

/// Stores the run's user message through the run's recorder — before anything is sent upstream —
/// and announces it. It follows `parentId` when given, else the session's latest message (a first
/// run follows nothing).
/// Returns the message and its parent, or the storage error as a client may see it.
pub(crate) async fn store_user_message(
    store: &dyn SessionReads,
    ctx: &EngineSessionContext,
) -> Result<(Message, Option<MessageId>), String> {
    // Stored and announced together with the session.
    if let Some(user) = ctx.recorder.user_message() {
        let parent = user.parent_id;
        return Ok((user, parent));
    }
    let session_id = ctx.session_id();
    let parent = match ctx.parent_id {
        Some(p) => Some(p),
        None if !ctx.is_resume => None,
        None => store
            .latest_message(session_id)
            .await
            .map_err(|e| e.report())?
            .map(|m| m.id),
    };
    let user = new_user_message(ctx, parent);
    ctx.recorder
        .add_user_message(&user)
        .await
        .map_err(|e| e.0)?;
    ctx.events
        .emit(EventPayload::UserMessage {
            message: user.clone(),
        })
        .await;
    Ok((user, parent))
}
