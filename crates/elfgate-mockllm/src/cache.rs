//! A prompt cache, simulated: an Anthropic request whose system blocks carry `cache_control`
//! reads the cache when the same prefix (its tools and its system blocks up to the last marked
//! one) was seen before, and writes it otherwise. The counters are the prefix's words, the
//! mock's token unit. The model keys `cache_read=N` and `cache_write=N` override them in every
//! format.

use crate::behavior::Behavior;
use crate::wire::{CacheUse, Format, count_words_in_content};
use serde_json::Value;
use std::collections::HashSet;

/// The marked prefix of an Anthropic body: its identity (the JSON of the tools and the system
/// blocks up to the last one with `cache_control`) and its size in words.
pub fn marked_prefix(format: Format, body: &Value) -> Option<(String, u64)> {
    if format != Format::Anthropic {
        return None;
    }
    let system = body.get("system")?.as_array()?;
    let last = system
        .iter()
        .rposition(|b| b.get("cache_control").is_some())?;
    let prefix = &system[..=last];
    let key = serde_json::json!([body.get("tools"), prefix]).to_string();
    let words = prefix.iter().map(count_words_in_content).sum::<u64>();
    Some((key, words.max(1)))
}

/// The counters of a request with this marked prefix, remembering it in `seen`.
pub fn cache_use(
    prefix: Option<(String, u64)>,
    b: &Behavior,
    seen: &mut HashSet<String>,
) -> CacheUse {
    let mut out = CacheUse::default();
    if let Some((key, words)) = prefix {
        if seen.contains(&key) {
            out.read = words;
        } else {
            seen.insert(key);
            out.write = words;
        }
    }
    CacheUse {
        read: b.cache_read.unwrap_or(out.read),
        write: b.cache_write.unwrap_or(out.write),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn same_prefix_reads_what_the_first_wrote() {
        let mut seen = HashSet::new();
        let b = Behavior::default();
        let body = |tail: &str| {
            json!({"system": [
                {"type": "text", "text": "one two three", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": tail},
            ]})
        };
        let an = |v: &Value| marked_prefix(Format::Anthropic, v);
        let first = cache_use(an(&body("a")), &b, &mut seen);
        assert_eq!(first, CacheUse { read: 0, write: 3 });
        let second = cache_use(an(&body("b c")), &b, &mut seen);
        assert_eq!(second, CacheUse { read: 3, write: 0 });
        // No marker, no cache; the model keys win.
        let plain = json!({"system": "one two three"});
        assert_eq!(cache_use(an(&plain), &b, &mut seen), CacheUse::default());
        let keyed = Behavior::parse("m:cache_read=9");
        assert_eq!(
            cache_use(marked_prefix(Format::OpenAiChat, &plain), &keyed, &mut seen).read,
            9
        );
    }
}
