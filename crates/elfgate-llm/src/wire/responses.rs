//! OpenAI's Responses API: the pieces the client, the gateway's Responses door and the mock
//! provider all speak.

use serde::{Deserialize, Serialize};

/// A response's `usage`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// The input's tokens, cached ones included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// What the input's tokens were made of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens_details: Option<InputTokensDetails>,
    /// The output's tokens, reasoning included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// What the output's tokens were made of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_details: Option<OutputTokensDetails>,
    /// Both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<u64>,
}

/// `usage.input_tokens_details`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputTokensDetails {
    /// Input tokens served from the provider's cache (counted in `input_tokens` too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
}

/// `usage.output_tokens_details`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputTokensDetails {
    /// The reasoning's tokens (counted in `output_tokens` too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
}

impl Usage {
    /// Every count named: input (`cached` of them from the cache), output (`reasoning` of them
    /// reasoning) and the total.
    pub fn of(input: u64, cached: u64, output: u64, reasoning: u64) -> Self {
        Usage {
            input_tokens: Some(input),
            input_tokens_details: Some(InputTokensDetails {
                cached_tokens: Some(cached),
            }),
            output_tokens: Some(output),
            output_tokens_details: Some(OutputTokensDetails {
                reasoning_tokens: Some(reasoning),
            }),
            total_tokens: Some(input + output),
        }
    }

    /// The input's cached tokens, 0 when not said.
    pub fn cached_tokens(&self) -> u64 {
        self.input_tokens_details
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
    fn usage_round_trips_through_its_wire_form() {
        let usage = Usage::of(20, 8, 5, 2);
        let wire = serde_json::to_value(usage).unwrap();
        assert_eq!(
            wire,
            json!({"input_tokens": 20, "input_tokens_details": {"cached_tokens": 8},
                   "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 2},
                   "total_tokens": 25})
        );
        let back: Usage = serde_json::from_value(wire).unwrap();
        assert_eq!(back, usage);
        assert_eq!(back.cached_tokens(), 8);
        let bare: Usage = serde_json::from_value(json!({"input_tokens": 1})).unwrap();
        assert_eq!(bare.cached_tokens(), 0);
    }
}
