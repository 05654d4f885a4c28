//! The compaction ladder's pure steps over a copy of the conversation (the stored messages are
//! never touched): the token estimate, the boundary slice, the collapse, and the notes that
//! replace what was dropped. The orchestration (when, the summary call, events) is in `fit`.

use elfgate_core::{ContentBlock, Role};
use elfgate_llm::{LlmMessage, LlmRequest};
use serde_json::Value;

/// Bytes per token of the estimate: a plain and documented approximation, corrected by the
/// provider's reported input tokens once a call has been made.
pub(crate) const BYTES_PER_TOKEN: u64 = 4;
/// Bytes counted for an image block (providers charge images by size; this is a typical one).
const IMAGE_BYTES: u64 = 6000;
/// Bytes counted for a message's framing (role, separators).
const MESSAGE_OVERHEAD: u64 = 16;
/// Tool outputs shorter than this are left alone by the boundary slice: a stub would not save
/// much.
const SLICE_MIN_CHARS: usize = 200;

/// The estimated bytes of one block.
fn block_bytes(b: &ContentBlock) -> u64 {
    match b {
        ContentBlock::Text { text } => text.len() as u64,
        ContentBlock::Thinking { thinking, .. } => thinking.len() as u64,
        ContentBlock::Image { .. } => IMAGE_BYTES,
        // A PDF is read as text and page images by the provider: its base64 size is the
        // closest cheap guess (a URL's is not known: one image's worth).
        ContentBlock::Document { data, .. } => {
            data.as_ref().map_or(IMAGE_BYTES, |d| d.len() as u64)
        }
        ContentBlock::ToolUse { id, name, input } => {
            (id.len() + name.len() + input.to_string().len()) as u64
        }
        ContentBlock::ToolResult {
            tool_use_id,
            content,
            ..
        } => (tool_use_id.len() + content.len()) as u64,
        ContentBlock::ProviderBlock { block, .. } => block.to_string().len() as u64,
    }
}

/// The estimated bytes of some messages.
pub(crate) fn messages_bytes(messages: &[LlmMessage]) -> u64 {
    messages
        .iter()
        .map(|m| MESSAGE_OVERHEAD + m.blocks.iter().map(block_bytes).sum::<u64>())
        .sum()
}

/// The estimated bytes of what a request sends besides its messages: the system prompt and the
/// tool schemas.
pub(crate) fn fixed_bytes(req: &LlmRequest) -> u64 {
    let system = req.system.as_ref().map_or(0, |s| s.len() as u64);
    let tools: u64 = req
        .tools
        .iter()
        .map(|t| (t.name.len() + t.description.len() + t.input_schema.to_string().len()) as u64)
        .sum();
    system + tools
}

/// Tokens for `bytes`, scaled by `ratio` (the provider's tokens per estimated token, 1 before
/// any call).
pub(crate) fn tokens(bytes: u64, ratio: f64) -> u64 {
    (bytes.div_ceil(BYTES_PER_TOKEN) as f64 * ratio).ceil() as u64
}

/// Step 1, the boundary slice: replaces the output of every tool call but those of the last
/// assistant turn with a short stub. Returns how many were replaced.
pub(crate) fn boundary_slice(messages: &mut [LlmMessage]) -> usize {
    let last_tools = messages
        .iter()
        .rposition(|m| m.role == Role::Tool)
        .unwrap_or(usize::MAX);
    let mut n = 0;
    for (i, m) in messages.iter_mut().enumerate() {
        if m.role != Role::Tool || i == last_tools {
            continue;
        }
        for b in &mut m.blocks {
            if let ContentBlock::ToolResult { content, .. } = b
                && content.chars().count() >= SLICE_MIN_CHARS
            {
                *content = format!(
                    "[output of {} characters left out to fit the context window; call the tool \
again if it is still needed]",
                    content.chars().count()
                );
                n += 1;
            }
        }
    }
    n
}

/// The conversation cut into units that are dropped whole: an assistant message with its tool
/// results (a tool_use is never sent without its tool_result, nor the other way), or one message.
/// Returns the units' start indices.
pub(crate) fn unit_starts(messages: &[LlmMessage]) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut i = 0;
    while i < messages.len() {
        starts.push(i);
        let calls = messages[i].role == Role::Assistant
            && messages[i]
                .blocks
                .iter()
                .any(|b| matches!(b, ContentBlock::ToolUse { .. }));
        i += 1;
        while calls && i < messages.len() && messages[i].role == Role::Tool {
            i += 1;
        }
    }
    starts
}

/// Step 2, the collapse: how many messages after the first one to drop (whole units, oldest
/// first) so that the rest is at most `target_bytes`; the first message (the first user message)
/// and the last unit are always kept. Returns the end of the dropped span (exclusive; 1 when
/// nothing is dropped).
pub(crate) fn collapse(messages: &[LlmMessage], target_bytes: u64) -> usize {
    let starts = unit_starts(messages);
    let Some(&last_unit) = starts.last() else {
        return 1.min(messages.len());
    };
    let mut total = messages_bytes(messages);
    let mut end = 1.min(messages.len());
    for w in starts.windows(2) {
        let (start, next) = (w[0], w[1]);
        if start == 0 {
            continue;
        }
        if total <= target_bytes || next > last_unit {
            break;
        }
        total -= messages_bytes(&messages[start..next]);
        end = next;
    }
    end
}

/// The file paths the conversation's tool calls used, most recent first, without repeats.
pub(crate) fn recent_paths(messages: &[LlmMessage], max: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for m in messages.iter().rev() {
        for b in m.blocks.iter().rev() {
            if let ContentBlock::ToolUse { input, .. } = b
                && let Some(p) = input.get("path").and_then(Value::as_str)
                && !p.is_empty()
                && !out.iter().any(|x| x == p)
            {
                out.push(p.to_string());
                if out.len() >= max {
                    return out;
                }
            }
        }
    }
    out
}

/// The results of the `tool` calls among `messages` (e.g. the skills loaded), by call order.
pub(crate) fn results_of(messages: &[LlmMessage], tool: &str) -> Vec<String> {
    let ids: Vec<&str> = messages
        .iter()
        .flat_map(|m| &m.blocks)
        .filter_map(|b| match b {
            ContentBlock::ToolUse { id, name, .. } if name == tool => Some(id.as_str()),
            _ => None,
        })
        .collect();
    messages
        .iter()
        .flat_map(|m| &m.blocks)
        .filter_map(|b| match b {
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error: false,
            } if ids.contains(&tool_use_id.as_str()) => Some(content.clone()),
            _ => None,
        })
        .collect()
}

/// The dropped messages as plain text for the summary call, each text cut at `per_message`
/// characters.
pub(crate) fn transcript(messages: &[LlmMessage], per_message: usize) -> String {
    let mut out = String::new();
    for m in messages {
        let who = match m.role {
            Role::User => "User",
            Role::Assistant => "Assistant",
            Role::Tool => "Tool results",
            Role::System => "System",
        };
        let mut text = String::new();
        for b in &m.blocks {
            match b {
                ContentBlock::Text { text: t } => text.push_str(t),
                ContentBlock::ToolUse { name, input, .. } => {
                    text.push_str(&format!("[call {name} {input}]"));
                }
                ContentBlock::ToolResult { content, .. } => {
                    text.push_str(&format!("[result] {content}"));
                }
                ContentBlock::Document {
                    name, media_type, ..
                } => {
                    text.push_str(&format!(
                        "[document {} {media_type}]",
                        name.as_deref().unwrap_or("")
                    ));
                }
                ContentBlock::ProviderBlock { block, .. } => {
                    text.push_str(&format!("[{}]", elfgate_core::provider_block_label(block)));
                }
                ContentBlock::Thinking { .. } | ContentBlock::Image { .. } => continue,
            }
            text.push('\n');
        }
        let cut: String = text.chars().take(per_message).collect();
        out.push_str(&format!("{who}: {}\n\n", cut.trim_end()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn user(t: &str) -> LlmMessage {
        LlmMessage {
            role: Role::User,
            blocks: vec![ContentBlock::text(t)],
        }
    }
    fn call(id: &str, path: &str) -> LlmMessage {
        LlmMessage {
            role: Role::Assistant,
            blocks: vec![ContentBlock::ToolUse {
                id: id.into(),
                name: "read_file".into(),
                input: json!({"path": path}),
            }],
        }
    }
    fn result(id: &str, len: usize) -> LlmMessage {
        LlmMessage {
            role: Role::Tool,
            blocks: vec![ContentBlock::ToolResult {
                tool_use_id: id.into(),
                content: "x".repeat(len),
                is_error: false,
            }],
        }
    }

    fn conversation() -> Vec<LlmMessage> {
        vec![
            user("first"),
            call("a", "a.txt"),
            result("a", 1000),
            call("b", "b.txt"),
            result("b", 1000),
            user("next"),
            call("c", "a.txt"),
            result("c", 1000),
        ]
    }

    #[test]
    fn slice_keeps_the_last_turn() {
        let mut m = conversation();
        assert_eq!(boundary_slice(&mut m), 2);
        let ContentBlock::ToolResult { content, .. } = &m[2].blocks[0] else {
            panic!()
        };
        assert!(content.starts_with("[output of 1000 characters left out"));
        let ContentBlock::ToolResult { content, .. } = &m[7].blocks[0] else {
            panic!()
        };
        assert_eq!(content.len(), 1000);
    }

    #[test]
    fn collapse_drops_whole_units_and_keeps_first_and_last() {
        let m = conversation();
        assert_eq!(unit_starts(&m), [0, 1, 3, 5, 6]);
        // Enough room: nothing dropped.
        assert_eq!(collapse(&m, u64::MAX), 1);
        // Room for a little: the first pair goes, then the second, never half of one.
        let all = messages_bytes(&m);
        assert_eq!(collapse(&m, all - 10), 3);
        assert_eq!(collapse(&m, all - 1100), 5);
        // No room at all: everything but the first message and the last unit.
        assert_eq!(collapse(&m, 0), 6);
    }

    #[test]
    fn recent_paths_and_transcript() {
        let m = conversation();
        assert_eq!(recent_paths(&m, 10), ["a.txt", "b.txt"]);
        assert_eq!(recent_paths(&m, 1), ["a.txt"]);
        let t = transcript(&m[..3], 30);
        assert!(
            t.starts_with("User: first\n\nAssistant: [call read_file"),
            "{t}"
        );
        assert_eq!(tokens(400, 1.0), 100);
        assert_eq!(tokens(400, 0.5), 50);
    }
}
