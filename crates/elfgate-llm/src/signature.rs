//! Reasoning signatures are the provider's own: Anthropic verifies a thinking block's signature,
//! Gemini 3 wants its thought signature back on the function call it came with, the Responses
//! API can only replay a reasoning item from its encrypted content. One conversation may be
//! answered by providers of several kinds (an alias's fallback chain, a client of the gateway
//! replaying a history), so a signature is stored tagged with the kind that made it and only
//! sent back to that kind: a foreign one would get the request refused.
//!
//! Anthropic's signatures are stored as they came (base64 has no `:`), as they were before the
//! other kinds had signatures; the others carry a `KIND:` prefix.

use crate::ProviderKind;

const GEMINI: &str = "gemini:";
const RESPONSES: &str = "openai-responses:";

/// The signature `raw`, made by a provider of `kind`, as stored on a thinking block.
pub(crate) fn tag(kind: ProviderKind, raw: &str) -> String {
    match kind {
        ProviderKind::Gemini => format!("{GEMINI}{raw}"),
        ProviderKind::OpenaiResponses => format!("{RESPONSES}{raw}"),
        ProviderKind::Anthropic | ProviderKind::Openai => raw.to_string(),
    }
}

/// The signature to send to a provider of `kind`, when `stored` was made by that kind.
pub(crate) fn for_kind(kind: ProviderKind, stored: &str) -> Option<&str> {
    let own = match kind {
        ProviderKind::Gemini => stored.strip_prefix(GEMINI),
        ProviderKind::OpenaiResponses => stored.strip_prefix(RESPONSES),
        ProviderKind::Anthropic => {
            (!stored.starts_with(GEMINI) && !stored.starts_with(RESPONSES)).then_some(stored)
        }
        // Chat Completions replays no reasoning.
        ProviderKind::Openai => None,
    };
    own.filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ProviderKind::*;

    #[test]
    fn a_signature_goes_back_only_to_the_kind_that_made_it() {
        for made_by in [Anthropic, Gemini, OpenaiResponses] {
            let stored = tag(made_by, "c2ln+/=");
            for to in [Openai, Anthropic, Gemini, OpenaiResponses] {
                let expected = (to == made_by).then_some("c2ln+/=");
                assert_eq!(for_kind(to, &stored), expected, "{made_by:?} -> {to:?}");
            }
        }
        assert_eq!(for_kind(Anthropic, ""), None);
        assert_eq!(for_kind(Gemini, "gemini:"), None);
    }
}
