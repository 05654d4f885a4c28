//! The compaction ladder, run before each model call of the top-level agent when the request
//! would exceed the model's budget, and the overflow recovery when the provider still says the
//! prompt is too long. Each step it takes is announced by a `processing` event; it works on the
//! request's copy of the conversation, never on the stored messages. See docs/context.md.

use super::compaction::{
    BYTES_PER_TOKEN, boundary_slice, collapse, fixed_bytes, messages_bytes, recent_paths,
    results_of, tokens, transcript,
};
use super::skill_tools::LOAD_SKILL;
use crate::streaming::{TurnOptions, TurnOutput, relay_turn};
use crate::tinyelf::runner::{Agent, Runner};
use elfgate_core::{ContentBlock, ErrorCode, ErrorInfo, EventPayload, Role, SessionId};
use elfgate_llm::{LlmMessage, LlmRequest};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::time::Instant;
use tracing::Instrument;

/// Output tokens of the summary call, and the room kept for the summary in the request.
const SUMMARY_MAX_TOKENS: u32 = 1024;
/// Characters of one dropped message given to the summary call.
const SUMMARY_PER_MESSAGE_CHARS: usize = 2000;
/// File paths re-injected after a collapse.
const REINJECT_PATHS: usize = 10;
/// Characters of one re-injected skill note.
const SKILL_NOTE_CHARS: usize = 2000;

const SUMMARY_SYSTEM: &str = "You summarize the earlier part of a conversation between a user \
and a software agent so that the agent can go on without it. Keep the user's goals and \
constraints, decisions made, files read or changed and what was learned from them, commands run \
and their outcome, and open questions. Be factual and brief; answer with the summary only.";

/// The ladder's rungs, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Rung {
    /// Nothing was needed.
    None,
    /// Old tool outputs were replaced with stubs.
    Slice,
    /// The oldest turns were dropped, summarized and pointed at.
    Collapse,
}

/// The latest summary of a session's dropped span, for the next calls and runs.
#[derive(Debug, Clone)]
pub(crate) struct CachedSummary {
    /// Messages it covers, from the conversation's second one.
    covered: usize,
    /// Hash of those messages.
    hash: u64,
    text: String,
}

/// Summaries by session (one each, replaced as the span grows).
pub(crate) type Summaries = std::sync::Mutex<HashMap<SessionId, CachedSummary>>;

fn span_hash(messages: &[LlmMessage]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    transcript(messages, usize::MAX).hash(&mut h);
    h.finish()
}

/// A forced step after an overflow: a lower budget and the rung to reach at least.
#[derive(Debug, Clone, Copy)]
struct Force {
    limit: u64,
    at_least: Rung,
}

impl Runner {
    /// The run's current tokens-per-estimated-token ratio.
    fn ratio(&self) -> f64 {
        self.token_ratio.lock().ok().and_then(|r| *r).unwrap_or(1.0)
    }

    /// The tokens the next call's request will take, for the token budget: the estimate once a
    /// call of this run has taught the ratio of the provider's count to ours; before that, the
    /// session's last reported request (a lower bound: the conversation only grew since), else
    /// nothing (the spent tokens alone are checked).
    pub(crate) fn predicted_input(&self, req: &LlmRequest) -> u64 {
        let learned = self.token_ratio.lock().ok().and_then(|r| *r).is_some();
        if learned {
            self.estimate(req)
        } else {
            self.rs.last_input_tokens.unwrap_or(0)
        }
    }

    /// The request's estimated tokens.
    fn estimate(&self, req: &LlmRequest) -> u64 {
        tokens(
            fixed_bytes(req) + messages_bytes(&req.messages),
            self.ratio(),
        )
    }

    /// Learns the ratio from a call's reported input tokens.
    fn learn(&self, req: &LlmRequest, turn: &TurnOutput) {
        let raw = tokens(fixed_bytes(req) + messages_bytes(&req.messages), 1.0);
        if turn.usage.input_tokens == 0 || raw == 0 {
            return;
        }
        let ratio = (turn.usage.input_tokens as f64 / raw as f64).clamp(0.1, 10.0);
        if let Ok(mut r) = self.token_ratio.lock() {
            *r = Some(ratio);
        }
    }

    async fn note(&self, message: String) {
        self.ctx
            .events
            .emit(EventPayload::Processing { message })
            .await;
    }

    /// One model call of `agent` with the context ladder before it and the overflow recovery
    /// after it (top-level agent only; sub-agents keep their short conversations as they are).
    pub(crate) async fn call_fitted(&self, agent: &Agent, req: &LlmRequest) -> TurnOutput {
        if !agent.is_top() {
            return self.call_llm(agent, req).await;
        }
        let mut req = req.clone();
        let rung = self.fit(agent, &mut req, None).await;
        let turn = self.call_llm(agent, &req).await;
        self.learn(&req, &turn);
        if !turn.context_overflow {
            return turn;
        }
        let sent = self.estimate(&req);
        self.note(format!(
            "context: the provider says the request (~{sent} tokens) is too long for the model's \
context window; compacting one more step and trying once more"
        ))
        .await;
        let force = Force {
            limit: (sent * 3 / 4).max(1),
            at_least: match rung {
                Rung::None => Rung::Slice,
                Rung::Slice | Rung::Collapse => Rung::Collapse,
            },
        };
        self.fit(agent, &mut req, Some(force)).await;
        let mut turn = self.call_llm(agent, &req).await;
        self.learn(&req, &turn);
        if turn.context_overflow {
            let why = turn.error.as_ref().map_or("", |e| e.message.as_str());
            let error = ErrorInfo::new(
                ErrorCode::ContextOverflow,
                format!(
                    "the conversation does not fit the model's context window, even after \
compaction: {why}"
                ),
            );
            self.ctx
                .events
                .emit(EventPayload::Error {
                    error: error.clone(),
                })
                .await;
            turn.error = Some(error);
        }
        turn
    }

    /// The ladder: returns the rung it reached; `req.messages` is what to send.
    async fn fit(&self, agent: &Agent, req: &mut LlmRequest, force: Option<Force>) -> Rung {
        let Some(limit) = force.map(|f| f.limit).or(self.rs.context_limit) else {
            return Rung::None;
        };
        let at_least = force.map_or(Rung::None, |f| f.at_least);
        let before = self.estimate(req);
        if before <= limit && at_least == Rung::None {
            return Rung::None;
        }
        let ratio = self.ratio();
        let fixed = fixed_bytes(req);
        let est = |m: &[LlmMessage]| tokens(fixed + messages_bytes(m), ratio);

        // 1) Boundary slice.
        let mut sliced = req.messages.clone();
        let n = boundary_slice(&mut sliced);
        let after = est(&sliced);
        self.note(format!(
            "context: ~{before} tokens, over the budget of {limit}: 1) boundary slice: replaced \
{n} old tool outputs with stubs (~{after} tokens)"
        ))
        .await;
        if after <= limit && at_least <= Rung::Slice {
            req.messages = sliced;
            return Rung::Slice;
        }

        // 2) Collapse, keeping room for the summary and the re-injected notes.
        let room = u64::from(SUMMARY_MAX_TOKENS).min(limit / 4) + 200.min(limit / 8);
        let target_tokens = limit.saturating_sub(room);
        let target_bytes = ((target_tokens as f64 / ratio) * BYTES_PER_TOKEN as f64) as u64;
        let end = collapse(&sliced, target_bytes.saturating_sub(fixed));
        if end <= 1 {
            self.note(format!(
                "context: 2) collapse: nothing left to drop (the first message and the last turn \
are kept; ~{after} tokens)"
            ))
            .await;
            req.messages = sliced;
            return Rung::Collapse;
        }
        let dropped = &req.messages[1..end];
        self.note(format!(
            "context: 2) collapse: left out the {} oldest messages after the first (whole tool \
call and result pairs; ~{} tokens left)",
            dropped.len(),
            est(&[&sliced[..1], &sliced[end..]].concat())
        ))
        .await;

        // 3) Auto-compact: a summary of the dropped span.
        let summary = match self
            .summarize(agent, dropped, limit)
            .instrument(elfgate_core::telemetry::compaction_span(dropped.len()))
            .await
        {
            Ok((text, reused)) => {
                self.note(if reused {
                    format!(
                        "context: 3) auto-compact: reused the summary of these messages ({} \
characters)",
                        text.len()
                    )
                } else {
                    format!(
                        "context: 3) auto-compact: summarized the dropped messages with the \
model ({} characters)",
                        text.len()
                    )
                })
                .await;
                Some(text)
            }
            Err(e) => {
                self.note(format!(
                    "context: 3) auto-compact: the summary call failed ({}); the dropped messages \
are left out without a summary",
                    e.message
                ))
                .await;
                None
            }
        };

        // 4) Re-inject what the agent is likely to need again.
        let paths = recent_paths(&req.messages, REINJECT_PATHS);
        let skills = results_of(dropped, LOAD_SKILL);
        let mut note = format!(
            "[Context compaction: {} earlier messages were left out of this request to fit the \
model's context window; they are still stored.]",
            dropped.len()
        );
        if let Some(s) = &summary {
            note.push_str(&format!("\n\nSummary of them:\n{s}"));
        }
        if !paths.is_empty() {
            note.push_str(&format!("\n\nFiles used recently: {}", paths.join(", ")));
        }
        for s in &skills {
            let cut: String = s.chars().take(SKILL_NOTE_CHARS).collect();
            note.push_str(&format!("\n\nLoaded earlier: {cut}"));
        }
        let mut messages = Vec::with_capacity(sliced.len() - end + 2);
        messages.push(sliced[0].clone());
        messages.push(LlmMessage {
            role: Role::User,
            blocks: vec![ContentBlock::text(note)],
        });
        messages.extend_from_slice(&sliced[end..]);
        self.note(format!(
            "context: 4) re-injected {} recently used file paths and {} skill notes (~{} tokens)",
            paths.len(),
            skills.len(),
            est(&messages)
        ))
        .await;
        req.messages = messages;
        Rung::Collapse
    }

    /// The summary of `dropped` (the messages after the first): the session's cached one when it
    /// covers exactly them, else one model call (given the cached summary and only the messages
    /// it does not cover, when it covers a beginning of them). Returns the text and whether it
    /// was reused.
    async fn summarize(
        &self,
        agent: &Agent,
        dropped: &[LlmMessage],
        limit: u64,
    ) -> Result<(String, bool), ErrorInfo> {
        let session = self.ctx.session_id();
        let cached = self
            .inner
            .summaries
            .lock()
            .ok()
            .and_then(|m| m.get(&session).cloned())
            .filter(|c| c.covered <= dropped.len() && span_hash(&dropped[..c.covered]) == c.hash);
        if let Some(c) = &cached
            && c.covered == dropped.len()
        {
            return Ok((c.text.clone(), true));
        }
        let (earlier, new) = match &cached {
            Some(c) => (Some(c.text.as_str()), &dropped[c.covered..]),
            None => (None, dropped),
        };
        // The summary request must fit too: its transcript gets at most half the budget.
        let max_chars = ((limit as f64 / self.ratio()) * BYTES_PER_TOKEN as f64 / 2.0) as usize;
        let mut text: String = transcript(new, SUMMARY_PER_MESSAGE_CHARS)
            .chars()
            .take(max_chars.max(1000))
            .collect();
        if let Some(e) = earlier {
            text = format!("Summary of what came before:\n{e}\n\nThen:\n{text}");
        }
        let req = LlmRequest {
            model: agent.model.clone(),
            system: Some(SUMMARY_SYSTEM.to_string()),
            cache_prefix_len: 0,
            messages: vec![LlmMessage {
                role: Role::User,
                blocks: vec![ContentBlock::text(format!(
                    "Summarize this part of the conversation:\n\n{text}"
                ))],
            }],
            temperature: Some(0.0),
            max_tokens: Some(SUMMARY_MAX_TOKENS),
            thinking: Default::default(),
            tools: Vec::new(),
            // The transcript to summarize may need the long window as much as the run does.
            extended_context: self.rs.extended_context,
            ..Default::default()
        };
        let turn = relay_turn(
            self.call_target(),
            &req,
            &self.rs.llm_retry,
            &self.ctx,
            Instant::now(),
            TurnOptions {
                relay_deltas: false,
                split_think: true,
                report_errors: false,
                cancel: Some(&agent.cancel),
                retries_done: 0,
            },
            None,
        )
        .await;
        self.add_tokens(&turn);
        if let Some(e) = turn.error {
            return Err(e);
        }
        if turn.interrupted || turn.text.trim().is_empty() {
            return Err(ErrorInfo::new(ErrorCode::Summary, "no summary came back"));
        }
        let text = turn.text.trim().to_string();
        if let Ok(mut m) = self.inner.summaries.lock() {
            m.insert(
                session,
                CachedSummary {
                    covered: dropped.len(),
                    hash: span_hash(dropped),
                    text: text.clone(),
                },
            );
        }
        Ok((text, false))
    }
}
