//! Reading a stream's next event against the last one whose only changing part was one text.
//!
//! A provider's stream events differ from one another in the token's text alone: the same id,
//! model, created second, index and type around it. Replacing a JSON string that needs no
//! unescaping by another such string in an event that was read and accepted gives JSON that
//! serde reads the same way but for that text. So comparing the bytes around the text with the
//! last such event's, and checking the new text for quotes, backslashes and control characters,
//! reads the event without parsing it. Anything else is parsed as before, and the decoder learns
//! a new template from what it accepts.

/// The last event whose only changing part was a text, with what that text is (`K`).
#[derive(Debug)]
pub(crate) struct TextTemplate<K> {
    /// The event learned from; empty when there is none.
    data: String,
    /// The text's byte range in `data`, inside its quotes.
    start: usize,
    end: usize,
    kind: Option<K>,
}

impl<K> Default for TextTemplate<K> {
    fn default() -> Self {
        TextTemplate {
            data: String::new(),
            start: 0,
            end: 0,
            kind: None,
        }
    }
}

impl<K: Copy> TextTemplate<K> {
    /// The text of `data` and its kind, when `data` is the template with another plain text.
    pub(crate) fn matching<'d>(&self, data: &'d str) -> Option<(K, &'d str)> {
        let kind = self.kind?;
        let before = self.data.get(..self.start)?;
        let after = self.data.get(self.end..)?;
        let text_end = data.len().checked_sub(after.len())?;
        if text_end < before.len() || !data.starts_with(before) || !data.ends_with(after) {
            return None;
        }
        // Between an ASCII quote ending `before` and one starting `after`: char boundaries.
        let text = data.get(before.len()..text_end)?;
        plain(text.as_bytes()).then_some((kind, text))
    }

    /// Makes `data` the template, with `text` (a string value of `data`, borrowed from it, so
    /// written without escapes) as its changing part of kind `kind`.
    pub(crate) fn learn(&mut self, data: &str, text: &str, kind: K) {
        // The text is borrowed from `data`: its place is its address's offset.
        let start = (text.as_ptr() as usize).wrapping_sub(data.as_ptr() as usize);
        let quoted = start > 0
            && data.as_bytes().get(start - 1) == Some(&b'"')
            && data.as_bytes().get(start + text.len()) == Some(&b'"');
        if !quoted || data.get(start..start + text.len()) != Some(text) {
            self.forget();
            return;
        }
        self.data.clear();
        self.data.push_str(data);
        self.start = start;
        self.end = start + text.len();
        self.kind = Some(kind);
    }

    /// Drops the template, so that a stale one is not tried again.
    pub(crate) fn forget(&mut self) {
        self.kind = None;
    }
}

/// Whether `b` holds no quote, backslash or control character: a JSON string's contents that
/// need no unescaping.
pub(crate) fn plain(b: &[u8]) -> bool {
    let (words, rest) = b.as_chunks::<8>();
    words.iter().all(|w| look_mask(u64::from_le_bytes(*w)) == 0)
        && rest.iter().all(|&c| c != b'"' && c != b'\\' && c >= 0x20)
}

/// The high bit of each byte of `w` that is a quote, a backslash or a control character (below
/// 0x20). The lowest one set is exact; above it a borrow may set others.
pub(crate) fn look_mask(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // A byte is zero in `x` exactly where this sets its high bit (the classic has-zero-byte test).
    let has_zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    // Bytes below 0x20: as has_zero with 0x20 in place of 1, for bytes without their high bit.
    let below_space = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
    has_zero(w ^ (ONES * u64::from(b'"'))) | has_zero(w ^ (ONES * u64::from(b'\\'))) | below_space
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_reads_the_same_bytes_around_another_plain_text_only() {
        let mut t = TextTemplate::default();
        assert_eq!(t.matching(r#"{"t":"a"}"#), None::<(u8, &str)>);
        let data = r#"{"t":"hello","n":1}"#;
        t.learn(data, &data[6..11], 7u8);
        assert_eq!(t.matching(r#"{"t":"bye now","n":1}"#), Some((7, "bye now")));
        assert_eq!(t.matching(r#"{"t":"","n":1}"#), Some((7, "")));
        for other in [
            r#"{"t":"a\nb","n":1}"#,
            r#"{"t":"a"b","n":1}"#,
            "{\"t\":\"a\u{1}b\",\"n\":1}",
            r#"{"t":"a","n":2}"#,
            r#"{"t":"a","n":1} "#,
            r#"{"t":"a","n":"#,
            r#"{"u":"a","n":1}"#,
            r#"{"t":"#,
        ] {
            assert_eq!(t.matching(other), None, "{other}");
        }
        // A text that is not a string of `data` (not in quotes) is not learned, and the old
        // template goes.
        t.learn(data, &data[1..2], 1);
        assert_eq!(t.matching(r#"{"t":"bye","n":1}"#), None);
    }
}
