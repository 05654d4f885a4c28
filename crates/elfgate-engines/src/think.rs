//! `<think>...</think>` stripping: models that reason inline get their reasoning moved into a
//! thinking block, also while streaming (a tag may be split across deltas).

use elfgate_core::DeltaKind;

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// Splits streamed text into answer text and thinking at `<think>` tags.
#[derive(Debug, Default)]
pub(crate) struct ThinkSplitter {
    in_think: bool,
    pending: String,
    trim_next_text: bool,
}

/// The length of the longest suffix of `s` that is a proper prefix of `tag`.
fn partial_tag_len(s: &str, tag: &str) -> usize {
    (1..tag.len())
        .rev()
        .find(|&n| {
            s.len() >= n && s.is_char_boundary(s.len() - n) && tag.starts_with(&s[s.len() - n..])
        })
        .unwrap_or(0)
}

impl ThinkSplitter {
    /// Feeds a piece of text; returns what can be emitted now.
    pub(crate) fn feed(&mut self, text: &str) -> Vec<(DeltaKind, String)> {
        let mut buf = std::mem::take(&mut self.pending);
        buf.push_str(text);
        let mut out = Vec::new();
        loop {
            let tag = if self.in_think { CLOSE } else { OPEN };
            if let Some(pos) = buf.find(tag) {
                self.push(&mut out, buf[..pos].to_string());
                buf = buf[pos + tag.len()..].to_string();
                self.in_think = !self.in_think;
                if !self.in_think {
                    self.trim_next_text = true;
                }
                continue;
            }
            let keep = partial_tag_len(&buf, tag);
            let emit = buf[..buf.len() - keep].to_string();
            self.pending = buf[buf.len() - keep..].to_string();
            self.push(&mut out, emit);
            return out;
        }
    }

    /// Flushes what is held back at the end of the stream.
    pub(crate) fn finish(&mut self) -> Vec<(DeltaKind, String)> {
        let rest = std::mem::take(&mut self.pending);
        let mut out = Vec::new();
        self.push(&mut out, rest);
        out
    }

    fn push(&mut self, out: &mut Vec<(DeltaKind, String)>, mut text: String) {
        let kind = if self.in_think {
            DeltaKind::Thinking
        } else {
            DeltaKind::Text
        };
        if kind == DeltaKind::Text && self.trim_next_text {
            text = text.trim_start().to_string();
            if text.is_empty() {
                return;
            }
            self.trim_next_text = false;
        }
        if text.is_empty() {
            return;
        }
        match out.last_mut() {
            Some((k, t)) if *k == kind => t.push_str(&text),
            _ => out.push((kind, text)),
        }
    }
}

/// Splits a whole text: (answer, thinking).
#[cfg(test)]
pub(crate) fn split_think(text: &str) -> (String, String) {
    let mut sp = ThinkSplitter::default();
    let mut answer = String::new();
    let mut thinking = String::new();
    for (k, t) in sp.feed(text).into_iter().chain(sp.finish()) {
        match k {
            DeltaKind::Text => answer.push_str(&t),
            DeltaKind::Thinking => thinking.push_str(&t),
        }
    }
    (answer, thinking)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_text() {
        assert_eq!(
            split_think("<think>plan it</think>\n\nThe answer."),
            ("The answer.".to_string(), "plan it".to_string())
        );
        assert_eq!(
            split_think("no tags"),
            ("no tags".to_string(), String::new())
        );
        assert_eq!(split_think("a < b"), ("a < b".to_string(), String::new()));
    }

    #[test]
    fn tags_split_across_deltas() {
        let mut sp = ThinkSplitter::default();
        let mut pieces = Vec::new();
        for d in ["Hi <th", "ink>deep", " thought</thi", "nk> there", " <"] {
            pieces.extend(sp.feed(d));
        }
        pieces.extend(sp.finish());
        let text: String = pieces
            .iter()
            .filter(|(k, _)| *k == DeltaKind::Text)
            .map(|(_, t)| t.as_str())
            .collect();
        let think: String = pieces
            .iter()
            .filter(|(k, _)| *k == DeltaKind::Thinking)
            .map(|(_, t)| t.as_str())
            .collect();
        assert_eq!(text, "Hi there <");
        assert_eq!(think, "deep thought");
    }
}
