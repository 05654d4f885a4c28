//! What ending an unfinished run writes, whichever backend holds it: the partial answer kept
//! from its logged deltas, synthetic results for its dangling tool calls, and its `result` and
//! `complete` events. Each backend reads the rows and writes these in one transaction of its own.

use crate::StoredEvent;
use chrono::{DateTime, Utc};
use elfgate_core::{
    ContentBlock, EventPayload, EventRecord, EventType, FinishReason, Message, MessageId, Role,
    Run, RunError, RunStats,
};
use std::collections::HashSet;

/// Why an unfinished run is ended, as its stored run and its messages say it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ending {
    /// The run's finish reason.
    pub finish_reason: FinishReason,
    /// The message of the run's stored error (its code is the finish reason's name).
    pub run_error: &'static str,
    /// The content of a synthetic tool result.
    pub tool_result: &'static str,
}

/// A run the daemon's own restart found unfinished.
pub(crate) const DAEMON_RESTART: Ending = Ending {
    finish_reason: FinishReason::DaemonRestart,
    run_error: "the daemon stopped while the run was going",
    tool_result: "interrupted: the daemon restarted before this tool call finished",
};

/// A run whose fleet node went away, ended by the node that adopted its session.
pub(crate) const NODE_LOST: Ending = Ending {
    finish_reason: FinishReason::NodeLost,
    run_error: "the node running it went away; another node ended it",
    tool_result: "interrupted: the node running this tool call went away before it finished",
};

/// The workflow step a run was in when it stopped (its `stepStart` and `stepEnd` events, in
/// order): the last one started and not ended.
pub(crate) fn step_in_progress(step_events: &[StoredEvent]) -> Option<String> {
    let mut open = None;
    for e in step_events {
        let v: serde_json::Value = serde_json::from_str(&e.json).unwrap_or_default();
        match e.event_type {
            EventType::StepStart => open = v["stepId"].as_str().map(str::to_string),
            EventType::StepEnd => open = None,
            _ => {}
        }
    }
    open
}

/// The stored error of a run ended by `ending`, naming the workflow step it was in.
pub(crate) fn run_error(ending: &Ending, step: Option<&str>) -> RunError {
    let message = match step {
        Some(step) => format!("{} (in workflow step '{step}')", ending.run_error),
        None => ending.run_error.to_string(),
    };
    RunError::new(ending.finish_reason.as_str(), message)
}

/// The answer a run had streamed when it stopped: its logged deltas since its last stored
/// assistant message, unless `last` (the session's latest message) already is that answer.
/// Returns the message to store (if any text was streamed) and the characters of its text.
pub(crate) fn partial_answer(
    run: &Run,
    deltas: &[StoredEvent],
    last: Option<&Message>,
) -> (Option<Message>, usize) {
    let (mut text, mut thinking) = (String::new(), String::new());
    for d in deltas {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&d.json) {
            let piece = v["delta"]["text"].as_str().unwrap_or_default();
            match v["delta"]["kind"].as_str() {
                Some("thinking") => thinking.push_str(piece),
                _ => text.push_str(piece),
            }
        }
    }
    // The answer may be stored already while its assistantMessage event had not reached the
    // log: then the deltas are that answer, not a lost partial one. (The logged deltas may also
    // be only a prefix of it, when the message's commit overtook the tail of the log.)
    let already_stored = last.is_some_and(|m| {
        m.run_id == Some(run.id) && m.role == Role::Assistant && m.text().starts_with(&text)
    });
    if already_stored || (text.is_empty() && thinking.is_empty()) {
        return (None, 0);
    }
    let chars = text.chars().count();
    let mut blocks = Vec::new();
    if !thinking.is_empty() {
        blocks.push(ContentBlock::Thinking {
            thinking,
            signature: None,
        });
    }
    if !text.is_empty() {
        blocks.push(ContentBlock::Text { text });
    }
    let parent = last.map(|m| m.id);
    (
        Some(Message::new(
            run.session_id,
            Some(run.id),
            parent,
            Role::Assistant,
            blocks,
        )),
        chars,
    )
}

/// A tool message answering the tool calls of `run_messages` (the run's messages, in order) that
/// have no result, so that the transcript stays valid for the provider; None when every call has
/// one.
pub(crate) fn dangling_tool_results(
    run: &Run,
    run_messages: &[Message],
    parent: Option<MessageId>,
    ending: Ending,
) -> Option<Message> {
    let mut calls = Vec::new();
    let mut answered = HashSet::new();
    for m in run_messages {
        for b in &m.blocks {
            match b {
                ContentBlock::ToolUse { id, .. } => calls.push(id.clone()),
                ContentBlock::ToolResult { tool_use_id, .. } => {
                    answered.insert(tool_use_id.clone());
                }
                _ => {}
            }
        }
    }
    let dangling: Vec<ContentBlock> = calls
        .into_iter()
        .filter(|id| !answered.contains(id))
        .map(|id| ContentBlock::ToolResult {
            tool_use_id: id,
            content: ending.tool_result.to_string(),
            is_error: true,
        })
        .collect();
    (!dangling.is_empty())
        .then(|| Message::new(run.session_id, Some(run.id), parent, Role::Tool, dangling))
}

/// A run's closing events above seq `after`: `result` (when `with_result`; it carries the run's
/// stored tokens and iterations) and `complete`.
pub(crate) fn run_end_events(
    run: &Run,
    after: u64,
    duration_ms: u64,
    finish_reason: FinishReason,
    with_result: bool,
) -> Vec<EventRecord> {
    let mut seq = after;
    let mut events = Vec::with_capacity(2);
    if with_result {
        seq += 1;
        let stats = RunStats {
            cost_usd: None,
            usage: run.usage,
            output_tokens_estimated: false,
            input_tokens_estimated: false,
            iterations: run.iterations,
            duration_ms,
            finish_reason,
            model_finish_reason: None,
            stop_sequence: None,
            steps: Vec::new(),
        };
        events.push(EventRecord::build(
            run.session_id,
            seq,
            Some(run.id),
            EventPayload::Result { stats },
        ));
    }
    events.push(EventRecord::build(
        run.session_id,
        seq + 1,
        Some(run.id),
        EventPayload::Complete { finish_reason },
    ));
    events
}

/// How long an ended run lasted, by its stored times (0 when it has no end).
pub(crate) fn stored_duration_ms(run: &Run) -> u64 {
    run.ended_at
        .map(|end| millis_between(run.started_at, end))
        .unwrap_or(0)
}

/// Milliseconds from `start` to `end`, 0 when `end` is earlier.
pub(crate) fn millis_between(start: DateTime<Utc>, end: DateTime<Utc>) -> u64 {
    (end - start).num_milliseconds().max(0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(seq: u64, event_type: &str, step: &str) -> StoredEvent {
        StoredEvent {
            seq,
            event_type: EventType::from_name(event_type).unwrap(),
            json: format!(r#"{{"type":"{event_type}","stepId":"{step}"}}"#),
        }
    }

    #[test]
    fn the_step_in_progress_is_the_last_one_started_and_not_ended() {
        let done = [ev(1, "stepStart", "a"), ev(2, "stepEnd", "a")];
        assert_eq!(step_in_progress(&done), None);
        let cut = [
            ev(1, "stepStart", "a"),
            ev(2, "stepEnd", "a"),
            ev(3, "stepStart", "b"),
        ];
        assert_eq!(step_in_progress(&cut).as_deref(), Some("b"));
        assert_eq!(
            run_error(&DAEMON_RESTART, Some("b")).to_string(),
            "daemon_restart: the daemon stopped while the run was going (in workflow step 'b')"
        );
        assert_eq!(
            run_error(&NODE_LOST, None).to_string(),
            "node_lost: the node running it went away; another node ended it"
        );
    }
}
