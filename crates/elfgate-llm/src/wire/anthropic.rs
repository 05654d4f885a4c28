//! Anthropic Messages: the pieces both the client and the gateway's Messages door speak.

use super::{thinking_budget, thinking_level_for_budget};
use crate::ThinkingLevel;
use serde::{Deserialize, Serialize};

/// A request's `thinking`: `{"type": "enabled", "budget_tokens": N}`, or `{"type": "disabled"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThinkingParam {
    /// `enabled` or `disabled`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The tokens the reasoning may take (counted in `max_tokens`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_tokens: Option<u64>,
}

impl ThinkingParam {
    /// The `thinking` of a request at `level`; None when it does not reason.
    pub fn for_level(level: ThinkingLevel) -> Option<Self> {
        thinking_budget(level).map(|b| ThinkingParam {
            kind: "enabled".to_string(),
            budget_tokens: Some(u64::from(b)),
        })
    }

    /// The level it asks for.
    pub fn level(&self) -> ThinkingLevel {
        if self.kind == "enabled" {
            thinking_level_for_budget(self.budget_tokens.unwrap_or(0))
        } else {
            ThinkingLevel::default()
        }
    }
}

/// `usage` (of a message, `message_start` and `message_delta`): the prompt's cached tokens are
/// counted apart from `input_tokens`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// The prompt's tokens that were not read from or written to the cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// The answer's tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// The prompt's tokens written to the cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_creation_input_tokens: Option<u64>,
    /// The prompt's tokens read from the cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_input_tokens: Option<u64>,
}

impl Usage {
    /// Input and output tokens alone (what the gateway's door reports).
    pub fn of(input_tokens: u64, output_tokens: u64) -> Self {
        Usage {
            input_tokens: Some(input_tokens),
            output_tokens: Some(output_tokens),
            ..Default::default()
        }
    }

    /// All prompt tokens, cached or not; None when it names none.
    pub fn total_input(&self) -> Option<u64> {
        let parts = [
            self.input_tokens,
            self.cache_creation_input_tokens,
            self.cache_read_input_tokens,
        ];
        if parts.iter().all(Option::is_none) {
            return None;
        }
        Some(parts.iter().map(|p| p.unwrap_or(0)).sum())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a test fails loudly")]

    use super::*;
    use serde_json::json;

    #[test]
    fn thinking_round_trips_through_its_wire_form() {
        for level in [
            ThinkingLevel::Low,
            ThinkingLevel::Medium,
            ThinkingLevel::High,
        ] {
            let param = ThinkingParam::for_level(level).unwrap();
            let wire = serde_json::to_value(&param).unwrap();
            assert_eq!(wire["type"], "enabled");
            let back: ThinkingParam = serde_json::from_value(wire).unwrap();
            assert_eq!(back, param);
            assert_eq!(back.level(), level);
        }
        assert_eq!(ThinkingParam::for_level(ThinkingLevel::None), None);
        let off: ThinkingParam = serde_json::from_value(json!({"type": "disabled"})).unwrap();
        assert_eq!(off.level(), ThinkingLevel::None);
        assert_eq!(
            serde_json::to_value(&off).unwrap(),
            json!({"type": "disabled"})
        );
    }

    #[test]
    fn usage_round_trips_and_counts_cached_prompt_tokens_in_the_input() {
        let usage = Usage {
            cache_read_input_tokens: Some(100),
            ..Usage::of(5, 7)
        };
        let wire = serde_json::to_value(usage).unwrap();
        assert_eq!(
            wire,
            json!({"input_tokens": 5, "output_tokens": 7, "cache_read_input_tokens": 100})
        );
        let back: Usage = serde_json::from_value(wire).unwrap();
        assert_eq!(back, usage);
        assert_eq!(back.total_input(), Some(105));
        assert_eq!(Usage::default().total_input(), None);
        assert_eq!(
            serde_json::to_value(Usage::of(0, 0)).unwrap(),
            json!({"input_tokens": 0, "output_tokens": 0})
        );
    }
}
