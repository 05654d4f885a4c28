//! OpenAI's chat completions: the pieces the client, the gateway's chat completions door and the
//! mock provider all speak.

use crate::ThinkingLevel;
use serde::{Deserialize, Serialize};

/// The `reasoning_effort` (chat completions) or `reasoning.effort` (Responses) of a level; None
/// for no reasoning.
pub fn reasoning_effort(level: ThinkingLevel) -> Option<&'static str> {
    match level {
        ThinkingLevel::None => None,
        ThinkingLevel::Low => Some("low"),
        ThinkingLevel::Medium => Some("medium"),
        ThinkingLevel::High => Some("high"),
    }
}

/// The level a caller's reasoning effort asks for, if it names one both APIs know (`minimal`
/// reads as low).
pub fn level_of_effort(effort: &str) -> Option<ThinkingLevel> {
    match effort {
        "minimal" | "low" => Some(ThinkingLevel::Low),
        "medium" => Some(ThinkingLevel::Medium),
        "high" => Some(ThinkingLevel::High),
        _ => None,
    }
}

/// A completion's `usage` (in a stream, the last chunk's, when `stream_options.include_usage`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// The prompt's tokens, cached ones included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    /// The answer's tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens: Option<u64>,
    /// Both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<u64>,
    /// What the prompt's tokens were made of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
}

/// `usage.prompt_tokens_details`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptTokensDetails {
    /// Prompt tokens served from the provider's cache (counted in `prompt_tokens` too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
}

impl Usage {
    /// Prompt and answer tokens, and their total.
    pub fn of(prompt_tokens: u64, completion_tokens: u64) -> Self {
        Usage {
            prompt_tokens: Some(prompt_tokens),
            completion_tokens: Some(completion_tokens),
            total_tokens: Some(prompt_tokens + completion_tokens),
            prompt_tokens_details: None,
        }
    }

    /// The prompt's cached tokens, 0 when not said.
    pub fn cached_tokens(&self) -> u64 {
        self.prompt_tokens_details
            .and_then(|d| d.cached_tokens)
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a test fails loudly")]

    use super::*;
    use serde_json::json;

    #[test]
    fn each_levels_effort_reads_back_as_that_level() {
        for level in [
            ThinkingLevel::Low,
            ThinkingLevel::Medium,
            ThinkingLevel::High,
        ] {
            assert_eq!(
                reasoning_effort(level).and_then(level_of_effort),
                Some(level)
            );
        }
        assert_eq!(reasoning_effort(ThinkingLevel::None), None);
        assert_eq!(level_of_effort("minimal"), Some(ThinkingLevel::Low));
        assert_eq!(level_of_effort("max"), None);
    }

    #[test]
    fn usage_round_trips_through_its_wire_form() {
        let usage = Usage {
            prompt_tokens_details: Some(PromptTokensDetails {
                cached_tokens: Some(4),
            }),
            ..Usage::of(10, 2)
        };
        let wire = serde_json::to_value(usage).unwrap();
        assert_eq!(
            wire,
            json!({"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12,
                   "prompt_tokens_details": {"cached_tokens": 4}})
        );
        let back: Usage = serde_json::from_value(wire).unwrap();
        assert_eq!(back, usage);
        assert_eq!(back.cached_tokens(), 4);
        assert_eq!(Usage::of(1, 1).cached_tokens(), 0);
    }
}
