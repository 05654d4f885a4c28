//! Turning stored messages into the conversation sent upstream, keeping it valid for providers.

use elfgate_core::{ContentBlock, Message, Role};
use elfgate_llm::LlmMessage;
use std::collections::HashSet;

/// Content of a synthetic result for a call that has none.
pub(crate) const MISSING_RESULT: &str =
    "[no result was recorded for this tool call: it was interrupted before it finished]";

/// Stored history -> upstream messages: system messages and empty ones dropped, leading messages
/// before the first user message dropped (a cut in the middle of a tool exchange), and a synthetic
/// result added for every tool call left without one.
pub(crate) fn to_llm(history: &[Message]) -> Vec<LlmMessage> {
    let msgs: Vec<&Message> = history
        .iter()
        .filter(|m| m.role != Role::System && !m.blocks.is_empty())
        .skip_while(|m| m.role != Role::User)
        .collect();
    let mut out = Vec::with_capacity(msgs.len());
    let mut i = 0;
    while i < msgs.len() {
        let m = msgs[i];
        out.push(LlmMessage {
            role: m.role,
            blocks: m.blocks.clone(),
        });
        let calls: Vec<&str> = m
            .blocks
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolUse { id, .. } if m.role == Role::Assistant => Some(id.as_str()),
                _ => None,
            })
            .collect();
        if !calls.is_empty() {
            let next_tool = msgs.get(i + 1).filter(|n| n.role == Role::Tool);
            let mut blocks = next_tool.map(|n| n.blocks.clone()).unwrap_or_default();
            let answered: HashSet<String> = blocks
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::ToolResult { tool_use_id, .. } => Some(tool_use_id.clone()),
                    _ => None,
                })
                .collect();
            for id in calls.iter().filter(|id| !answered.contains(**id)) {
                blocks.push(ContentBlock::ToolResult {
                    tool_use_id: id.to_string(),
                    content: MISSING_RESULT.to_string(),
                    is_error: true,
                });
            }
            out.push(LlmMessage {
                role: Role::Tool,
                blocks,
            });
            if next_tool.is_some() {
                i += 1;
            }
        }
        i += 1;
    }
    out
}
