//! Turning stored messages into the conversation sent upstream, keeping it valid for providers.

use elfgate_core::{ContentBlock, Message, Role};
use elfgate_llm::LlmMessage;
use std::collections::HashSet;

/// Content of a synthetic result for a call that has none.
pub(crate) const MISSING_RESULT: &str =
    "[no result was recorded for this tool call: it was interrupted before it finished]";

/// Stands in for the start of a conversation cut by the history limit, so that the conversation
/// sent upstream still starts with a user message.
pub(crate) const OMITTED_START: &str =
    "[Earlier messages of this conversation were omitted: only the most recent ones are loaded.]";

/// Stored history -> upstream messages: system messages and empty ones dropped; tool results that
/// answer no call of the assistant message right before them dropped (the history limit can cut a
/// tool exchange in two, leaving its results without their calls); a synthetic error result added
/// for every tool call left without one; and, when the history does not start with a user message
/// (the limit cut the conversation's start off), a user note saying so put first.
pub(crate) fn to_llm(history: &[Message]) -> Vec<LlmMessage> {
    let msgs: Vec<&Message> = history
        .iter()
        .filter(|m| m.role != Role::System && !m.blocks.is_empty())
        .collect();
    let mut out = Vec::with_capacity(msgs.len() + 1);
    let mut i = 0;
    while i < msgs.len() {
        let m = msgs[i];
        i += 1;
        if m.role == Role::Tool {
            // Results not consumed by a call before them: their calls are not in the history.
            continue;
        }
        if out.is_empty() && m.role != Role::User {
            out.push(LlmMessage {
                role: Role::User,
                blocks: vec![ContentBlock::text(OMITTED_START)],
            });
        }
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
        if calls.is_empty() {
            continue;
        }
        // The tool messages right after the calls hold their results (a recovered run may have
        // added a second one); keep the results of these calls, once each, in stored order.
        let mut stored: Vec<&ContentBlock> = Vec::new();
        while let Some(n) = msgs.get(i).filter(|n| n.role == Role::Tool) {
            stored.extend(&n.blocks);
            i += 1;
        }
        let mut answered: HashSet<&str> = HashSet::new();
        let mut blocks: Vec<ContentBlock> = stored
            .into_iter()
            .filter(|b| match b {
                ContentBlock::ToolResult { tool_use_id, .. } => {
                    calls.contains(&tool_use_id.as_str()) && answered.insert(tool_use_id.as_str())
                }
                _ => false,
            })
            .cloned()
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
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use elfgate_core::SessionId;
    use serde_json::json;

    fn msg(role: Role, blocks: Vec<ContentBlock>) -> Message {
        Message::new(SessionId::new(), None, None, role, blocks)
    }

    fn call(id: &str) -> ContentBlock {
        ContentBlock::ToolUse {
            id: id.into(),
            name: "list_dir".into(),
            input: json!({}),
        }
    }

    fn result(id: &str) -> ContentBlock {
        ContentBlock::ToolResult {
            tool_use_id: id.into(),
            content: "ok".into(),
            is_error: false,
        }
    }

    fn shape(out: &[LlmMessage]) -> Vec<(Role, usize)> {
        out.iter().map(|m| (m.role, m.blocks.len())).collect()
    }

    #[test]
    fn a_cut_tool_exchange_loses_its_orphan_results_and_gets_a_note() {
        let h = vec![
            msg(Role::Tool, vec![result("a")]),
            msg(Role::Assistant, vec![call("b")]),
            msg(Role::Tool, vec![result("b")]),
            msg(Role::Assistant, vec![ContentBlock::text("done")]),
        ];
        let out = to_llm(&h);
        assert_eq!(
            shape(&out),
            [
                (Role::User, 1),
                (Role::Assistant, 1),
                (Role::Tool, 1),
                (Role::Assistant, 1)
            ]
        );
        assert!(matches!(&out[0].blocks[0], ContentBlock::Text { text } if text == OMITTED_START));
    }

    #[test]
    fn a_history_starting_with_the_user_gets_no_note() {
        let h = vec![
            msg(Role::User, vec![ContentBlock::text("hi")]),
            msg(Role::Assistant, vec![ContentBlock::text("hello")]),
        ];
        assert_eq!(shape(&to_llm(&h)), [(Role::User, 1), (Role::Assistant, 1)]);
    }

    #[test]
    fn dangling_calls_get_a_synthetic_result_and_stray_results_are_dropped_or_merged() {
        let h = vec![
            msg(Role::User, vec![ContentBlock::text("go")]),
            msg(Role::Assistant, vec![call("x"), call("y")]),
            msg(Role::Tool, vec![result("zz"), result("y"), result("y")]),
            msg(Role::Tool, vec![result("x")]),
            msg(Role::Assistant, vec![call("w")]),
        ];
        let out = to_llm(&h);
        assert_eq!(
            shape(&out),
            [
                (Role::User, 1),
                (Role::Assistant, 2),
                (Role::Tool, 2),
                (Role::Assistant, 1),
                (Role::Tool, 1)
            ]
        );
        let ids: Vec<(&str, bool)> = out[2]
            .blocks
            .iter()
            .chain(&out[4].blocks)
            .filter_map(|b| match b {
                ContentBlock::ToolResult {
                    tool_use_id,
                    is_error,
                    ..
                } => Some((tool_use_id.as_str(), *is_error)),
                _ => None,
            })
            .collect();
        assert_eq!(ids, [("y", false), ("x", false), ("w", true)]);
    }
}
