//! The providers' wire formats where more than one side of the daemon speaks them: this crate's
//! clients (the requests they build, the streams they read), the gateway's front doors (the same
//! requests parsed, their answers written) and the mock provider (its answers). Each piece is
//! defined once here, so that the sides cannot drift apart; [`thinking_budget`] is the one table
//! between reasoning levels and token budgets, `openai::reasoning_effort` the one between levels
//! and OpenAI's efforts.

pub mod anthropic;
pub mod gemini;
pub mod openai;
pub mod responses;

use crate::ThinkingLevel;

/// The levels that think, from the least.
const THINKING_LEVELS: [ThinkingLevel; 3] = [
    ThinkingLevel::Low,
    ThinkingLevel::Medium,
    ThinkingLevel::High,
];

/// The token budget a reasoning level asks for where a provider takes a budget (Anthropic's
/// `thinking.budget_tokens`, Gemini's `thinkingConfig.thinkingBudget`); None for no reasoning.
pub fn thinking_budget(level: ThinkingLevel) -> Option<u32> {
    match level {
        ThinkingLevel::None => None,
        ThinkingLevel::Low => Some(1024),
        ThinkingLevel::Medium => Some(4096),
        ThinkingLevel::High => Some(16384),
    }
}

/// The level a caller's token budget asks for: the highest level whose budget it reaches, and
/// at least [`ThinkingLevel::Low`] (a caller that gives a budget wants reasoning).
pub fn thinking_level_for_budget(budget: u64) -> ThinkingLevel {
    THINKING_LEVELS
        .into_iter()
        .rev()
        .find(|l| thinking_budget(*l).is_some_and(|b| budget >= u64::from(b)))
        .unwrap_or(ThinkingLevel::Low)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_levels_budget_reads_back_as_that_level() {
        for level in THINKING_LEVELS {
            let budget = thinking_budget(level).map(u64::from);
            assert_eq!(budget.map(thinking_level_for_budget), Some(level));
        }
        assert_eq!(thinking_budget(ThinkingLevel::None), None);
    }

    #[test]
    fn a_budget_between_levels_asks_for_the_lower_one() {
        assert_eq!(thinking_level_for_budget(0), ThinkingLevel::Low);
        assert_eq!(thinking_level_for_budget(4095), ThinkingLevel::Low);
        assert_eq!(thinking_level_for_budget(4096), ThinkingLevel::Medium);
        assert_eq!(thinking_level_for_budget(16383), ThinkingLevel::Medium);
        assert_eq!(thinking_level_for_budget(1 << 40), ThinkingLevel::High);
    }
}
