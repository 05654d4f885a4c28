//! The Gemini API: the pieces both the client and the gateway's Gemini door speak.

use super::{thinking_budget, thinking_level_for_budget};
use crate::ThinkingLevel;
use serde::{Deserialize, Serialize};

/// `generationConfig.thinkingConfig`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThinkingConfig {
    /// Whether the answer carries the reasoning's summaries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub include_thoughts: Option<bool>,
    /// The tokens the reasoning may take: 0 none, -1 as the model decides.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking_budget: Option<i64>,
    /// The newer models' level (`low`, `medium`, `high`; `minimal`), instead of a budget.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking_level: Option<String>,
}

impl ThinkingConfig {
    /// The `thinkingConfig` of a request at `level`; None leaves the model's own default.
    pub fn for_level(level: ThinkingLevel) -> Option<Self> {
        thinking_budget(level).map(|b| ThinkingConfig {
            include_thoughts: Some(true),
            thinking_budget: Some(i64::from(b)),
            thinking_level: None,
        })
    }

    /// The level it asks for: its level if named, else its budget's (the model's own choice,
    /// -1, reads as medium).
    pub fn level(&self) -> ThinkingLevel {
        match (self.thinking_level.as_deref(), self.thinking_budget) {
            (Some("low" | "LOW" | "minimal" | "MINIMAL"), _) => ThinkingLevel::Low,
            (Some("medium" | "MEDIUM"), _) => ThinkingLevel::Medium,
            (Some("high" | "HIGH"), _) => ThinkingLevel::High,
            (_, Some(0) | None) => ThinkingLevel::default(),
            (_, Some(b)) if b < 0 => ThinkingLevel::Medium,
            (_, Some(b)) => thinking_level_for_budget(b.unsigned_abs()),
        }
    }
}

/// `usageMetadata`: the token counts of an answer (in a stream, each chunk's running totals).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageMetadata {
    /// The prompt's tokens, cached ones included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_token_count: Option<u64>,
    /// The answer's tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidates_token_count: Option<u64>,
    /// The reasoning's tokens (not in `candidates_token_count`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thoughts_token_count: Option<u64>,
    /// Prompt tokens served from a cached content (counted in `prompt_token_count` too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_content_token_count: Option<u64>,
    /// All of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_token_count: Option<u64>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a test fails loudly")]

    use super::*;
    use serde_json::json;

    #[test]
    fn thinking_config_round_trips_through_its_wire_form() {
        for level in [
            ThinkingLevel::Low,
            ThinkingLevel::Medium,
            ThinkingLevel::High,
        ] {
            let config = ThinkingConfig::for_level(level).unwrap();
            let wire = serde_json::to_value(&config).unwrap();
            assert_eq!(wire["includeThoughts"], true);
            assert!(wire.get("thinkingLevel").is_none());
            let back: ThinkingConfig = serde_json::from_value(wire).unwrap();
            assert_eq!(back, config);
            assert_eq!(back.level(), level);
        }
        assert_eq!(ThinkingConfig::for_level(ThinkingLevel::None), None);
    }

    #[test]
    fn a_named_level_wins_over_a_budget_and_a_dynamic_budget_reads_as_medium() {
        let read = |v| serde_json::from_value::<ThinkingConfig>(v).unwrap().level();
        assert_eq!(
            read(json!({"thinkingLevel": "HIGH", "thinkingBudget": 10})),
            ThinkingLevel::High
        );
        assert_eq!(read(json!({"thinkingBudget": -1})), ThinkingLevel::Medium);
        assert_eq!(read(json!({"thinkingBudget": 0})), ThinkingLevel::None);
        assert_eq!(read(json!({"thinkingBudget": 5000})), ThinkingLevel::Medium);
        assert_eq!(read(json!({})), ThinkingLevel::None);
    }

    #[test]
    fn usage_round_trips_and_leaves_out_what_it_does_not_know() {
        let usage = UsageMetadata {
            prompt_token_count: Some(12),
            candidates_token_count: Some(3),
            total_token_count: Some(15),
            ..Default::default()
        };
        let wire = serde_json::to_value(usage).unwrap();
        assert_eq!(
            wire,
            json!({"promptTokenCount": 12, "candidatesTokenCount": 3, "totalTokenCount": 15})
        );
        assert_eq!(
            serde_json::from_value::<UsageMetadata>(wire).unwrap(),
            usage
        );
    }
}
