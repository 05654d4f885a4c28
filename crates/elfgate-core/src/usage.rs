//! Token counts: one shape for what a provider reports for a call, what a CLI reports for its
//! run, and what a run adds up over its calls.

use serde::{Deserialize, Serialize};

/// Token figures in Elfgate's terms: `input_tokens` counts every prompt token, those read from or
/// written to the provider's prompt cache included (each provider and CLI reports them its own
/// way, and each reader turns them into this).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsage {
    /// Prompt tokens, cached ones included.
    pub input_tokens: u64,
    /// Generated tokens.
    pub output_tokens: u64,
    /// Prompt tokens read from the provider's prompt cache (counted in `inputTokens` too).
    #[serde(default)]
    pub cache_read_tokens: u64,
    /// Prompt tokens written to the provider's prompt cache (counted in `inputTokens` too).
    #[serde(default)]
    pub cache_write_tokens: u64,
}

impl std::ops::AddAssign for TokenUsage {
    fn add_assign(&mut self, other: TokenUsage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
    }
}
