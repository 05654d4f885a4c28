//! A reader for the common shape of a Chat Completions stream chunk: one choice whose delta holds
//! plain text. A chunk is parsed for every streamed token, and serde's derived deserializer spent
//! more on it than the rest of relaying the token; this one reads that shape in one pass over the
//! bytes, borrowing the text.
//!
//! It gives up (None) on anything else: escapes in any string, tool calls, usage, errors, several
//! choices, duplicate fields, nested values it would skip, and anything that is not well-formed
//! JSON. The caller then parses the chunk with serde as before, so that what is
//! accepted, rejected and reported stays exactly serde's.

/// A chunk's only choice, as far as the stream needs it.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct FastChoice<'a> {
    pub(crate) content: Option<&'a str>,
    pub(crate) reasoning_content: Option<&'a str>,
    pub(crate) reasoning: Option<&'a str>,
    pub(crate) finish_reason: Option<&'a str>,
}

/// A chunk of the common shape: no choice (a keep-alive or metadata chunk) or one.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct FastChunk<'a> {
    pub(crate) choice: Option<FastChoice<'a>>,
}

/// Reads `data` if it has the common shape.
pub(crate) fn read(data: &str) -> Option<FastChunk<'_>> {
    let mut r = Reader {
        s: data.as_bytes(),
        src: data,
        i: 0,
    };
    let mut chunk = FastChunk::default();
    let (mut seen_choices, mut seen_usage, mut seen_error) = (false, false, false);
    r.object(|r, key| {
        match key {
            "choices" => {
                if std::mem::replace(&mut seen_choices, true) {
                    return None;
                }
                chunk.choice = r.choices()?;
            }
            // Only null is the common shape for these two.
            "usage" | "error" => {
                let seen = if key == "usage" {
                    &mut seen_usage
                } else {
                    &mut seen_error
                };
                if std::mem::replace(seen, true) {
                    return None;
                }
                r.null()?;
            }
            _ => r.skip_scalar()?,
        }
        Some(())
    })?;
    r.ws();
    (r.i == r.s.len()).then_some(chunk)
}

use crate::text_template::{TextTemplate, look_mask};

/// Which text field of the delta a [`Template`] holds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
enum Slot {
    #[default]
    Content,
    ReasoningContent,
    Reasoning,
}

/// The stream's last chunk whose one choice carried one text field and nothing else that changes
/// from token to token (no finish reason), as a [`TextTemplate`]: the next chunks of the stream
/// are read against it, anything else with [`read`], which learns a new one from what it accepts.
#[derive(Debug, Default)]
pub(crate) struct Template(TextTemplate<Slot>);

impl Template {
    /// Reads `data` against the template, else with [`read`].
    pub(crate) fn read<'d>(&mut self, data: &'d str) -> Option<FastChunk<'d>> {
        if let Some(chunk) = self.matching(data) {
            return Some(chunk);
        }
        let chunk = read(data)?;
        self.learn(data, &chunk);
        Some(chunk)
    }

    pub(crate) fn matching<'d>(&self, data: &'d str) -> Option<FastChunk<'d>> {
        let (slot, text) = self.0.matching(data)?;
        let mut choice = FastChoice::default();
        *match slot {
            Slot::Content => &mut choice.content,
            Slot::ReasoningContent => &mut choice.reasoning_content,
            Slot::Reasoning => &mut choice.reasoning,
        } = Some(text);
        Some(FastChunk {
            choice: Some(choice),
        })
    }

    /// Keeps `data` as the template when its only choice carries exactly one text field and no
    /// finish reason; forgets the old one otherwise, so that a stale template is not tried again.
    fn learn(&mut self, data: &str, chunk: &FastChunk<'_>) {
        let learned = chunk.choice.as_ref().and_then(|c| {
            match (c.content, c.reasoning_content, c.reasoning, c.finish_reason) {
                (Some(t), None, None, None) => Some((t, Slot::Content)),
                (None, Some(t), None, None) => Some((t, Slot::ReasoningContent)),
                (None, None, Some(t), None) => Some((t, Slot::Reasoning)),
                _ => None,
            }
        });
        match learned {
            Some((text, slot)) => self.0.learn(data, text, slot),
            None => self.0.forget(),
        }
    }
}

struct Reader<'a> {
    s: &'a [u8],
    src: &'a str,
    i: usize,
}

impl<'a> Reader<'a> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.i) {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, b: u8) -> Option<()> {
        (self.peek()? == b).then(|| self.i += 1)
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        self.ws();
        let end = self.i + word.len();
        (self.s.get(self.i..end)? == word).then(|| self.i = end)
    }

    fn null(&mut self) -> Option<()> {
        self.literal(b"null")
    }

    /// A string without escapes or control characters, borrowed.
    fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.i;
        let mut at = start;
        // Eight bytes at a time, to the first byte that ends the string or needs a look. Past the
        // input's end the word is padded with zeros, which count as control characters: a string
        // the input does not close stops there and is refused below.
        let stop = loop {
            let rest = self.s.get(at..)?;
            let word = match rest.first_chunk::<8>() {
                Some(w) => u64::from_le_bytes(*w),
                None => {
                    let mut w = [0u8; 8];
                    w[..rest.len()].copy_from_slice(rest);
                    u64::from_le_bytes(w)
                }
            };
            let look = look_mask(word);
            if look != 0 {
                // The lowest flagged byte is exact (the borrows of the word tests only run upward).
                break at + (look.trailing_zeros() / 8) as usize;
            }
            at += 8;
        };
        // A backslash, a control character, or the end of the input: not this reader's shape.
        (*self.s.get(stop)? == b'"').then_some(())?;
        self.i = stop + 1;
        // Both ends are ASCII quotes of a &str: char boundaries.
        self.src.get(start..stop)
    }

    /// `"..."` or `null`.
    fn string_or_null(&mut self) -> Option<Option<&'a str>> {
        if self.peek()? == b'n' {
            self.null()?;
            Some(None)
        } else {
            self.string().map(Some)
        }
    }

    /// A number, as JSON spells one.
    fn number(&mut self) -> Option<()> {
        self.ws();
        let digits = |r: &mut Self| {
            let start = r.i;
            while r.s.get(r.i).is_some_and(u8::is_ascii_digit) {
                r.i += 1;
            }
            r.i > start
        };
        if self.s.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        match self.s.get(self.i)? {
            b'0' => self.i += 1,
            b'1'..=b'9' => {
                digits(self);
            }
            _ => return None,
        }
        if self.s.get(self.i) == Some(&b'.') {
            self.i += 1;
            digits(self).then_some(())?;
        }
        if let Some(b'e' | b'E') = self.s.get(self.i) {
            self.i += 1;
            if let Some(b'+' | b'-') = self.s.get(self.i) {
                self.i += 1;
            }
            digits(self).then_some(())?;
        }
        Some(())
    }

    /// A string, number, boolean or null, skipped.
    fn skip_scalar(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'n' => self.null(),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            _ => self.number(),
        }
    }

    /// An object, handing each key to `field`, which reads its value.
    fn object(&mut self, mut field: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            let key = self.string()?;
            self.eat(b':')?;
            field(self, key)?;
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// `[]` or `[choice]`, or null (serde reads both as no choice).
    fn choices(&mut self) -> Option<Option<FastChoice<'a>>> {
        if self.peek()? == b'n' {
            self.null()?;
            return Some(None);
        }
        self.eat(b'[')?;
        if self.peek()? == b']' {
            self.i += 1;
            return Some(None);
        }
        let choice = self.choice()?;
        self.eat(b']')?;
        Some(Some(choice))
    }

    fn choice(&mut self) -> Option<FastChoice<'a>> {
        let mut c = FastChoice::default();
        let (mut seen_delta, mut seen_finish) = (false, false);
        self.object(|r, key| match key {
            "delta" => {
                if std::mem::replace(&mut seen_delta, true) {
                    return None;
                }
                // A null delta carries nothing, as an empty one.
                if r.peek()? == b'n' {
                    r.null()
                } else {
                    r.delta(&mut c)
                }
            }
            "finish_reason" => {
                if std::mem::replace(&mut seen_finish, true) {
                    return None;
                }
                c.finish_reason = r.string_or_null()?;
                Some(())
            }
            // Fields serde's Choice does not have (index, logprobs, ...) are ignored there too.
            _ => r.skip_scalar(),
        })?;
        Some(c)
    }

    fn delta(&mut self, c: &mut FastChoice<'a>) -> Option<()> {
        let mut seen = [false; 3];
        self.object(|r, key| {
            let (slot, n) = match key {
                "content" => (&mut c.content, 0),
                "reasoning_content" => (&mut c.reasoning_content, 1),
                "reasoning" => (&mut c.reasoning, 2),
                "tool_calls" => return None,
                // Fields serde's Delta does not have (role, refusal, ...) are ignored there too.
                _ => return r.skip_scalar(),
            };
            if std::mem::replace(&mut seen[n], true) {
                return None;
            }
            *slot = r.string_or_null()?;
            Some(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_common_shapes() {
        let c = read(r#"{"choices":[{"delta":{"content":"tok0 "},"finish_reason":null,"index":0}],"created":1,"id":"x","model":"m","object":"chat.completion.chunk"}"#).unwrap();
        assert_eq!(
            c.choice,
            Some(FastChoice {
                content: Some("tok0 "),
                ..Default::default()
            })
        );
        let c = read(" {\"id\":\"x\", \"choices\" : [ { \"index\":0, \"delta\":{}, \"logprobs\":null, \"finish_reason\":\"stop\" } ] , \"usage\":null, \"n\":-1.5e+3, \"b\":true }\n").unwrap();
        assert_eq!(
            c.choice,
            Some(FastChoice {
                finish_reason: Some("stop"),
                ..Default::default()
            })
        );
        assert_eq!(read(r#"{"choices":[]}"#).unwrap().choice, None);
        assert_eq!(read("{}").unwrap().choice, None);
        assert_eq!(
            read(r#"{"choices":[{"delta":{"role":"assistant","reasoning_content":"é😀","content":null}}]}"#)
                .unwrap()
                .choice,
            Some(FastChoice {
                reasoning_content: Some("é😀"),
                ..Default::default()
            })
        );
    }

    #[test]
    fn the_word_test_finds_every_byte_that_ends_or_breaks_a_string() {
        for b in 0..=255u8 {
            for at in 0..8 {
                let mut w = *b"abcdefgh";
                w[at] = b;
                let expected = b == b'"' || b == b'\\' || b < 0x20;
                let look = look_mask(u64::from_le_bytes(w));
                assert_eq!(look != 0, expected, "{b} at {at}");
                if expected {
                    assert_eq!(look.trailing_zeros() / 8, at as u32, "{b} at {at}");
                }
                // Whatever follows a stop, the first one is the one found.
                for later in at + 1..8 {
                    for c in [0u8, 0x1f, b'"', b'\\', 0x80, 0xff] {
                        let mut w2 = w;
                        w2[later] = c;
                        let look = look_mask(u64::from_le_bytes(w2));
                        if expected {
                            assert_eq!(
                                look.trailing_zeros() / 8,
                                at as u32,
                                "{b} at {at}, {c} at {later}"
                            );
                        }
                    }
                }
            }
        }
        // Long strings, with the stop anywhere.
        for at in 0..40 {
            let mut text = "x".repeat(40);
            text.replace_range(at..at + 1, "\\n");
            let data = format!(r#"{{"a":"{text}"}}"#);
            assert_eq!(read(&data), None, "{data}");
            let text = "é".repeat(at);
            let data = format!(r#"{{"choices":[{{"delta":{{"content":"{text}"}}}}]}}"#);
            assert_eq!(read(&data).unwrap().choice.unwrap().content, Some(&*text));
            // A string the input does not close, whatever its length.
            let data = format!(r#"{{"choices":[{{"delta":{{"content":"{text}"#);
            assert_eq!(read(&data), None, "{data}");
            let data = format!(r#"{{"a":"{}"#, "x".repeat(at));
            assert_eq!(read(&data), None, "{data}");
        }
    }

    #[test]
    fn gives_up_on_everything_else() {
        for data in [
            r#"{"choices":[{"delta":{"content":"a\"b"}}]}"#,
            r#"{"choices":[{"delta":{"content":"a\nb"}}]}"#,
            "{\"choices\":[{\"delta\":{\"content\":\"a\u{1}b\"}}]}",
            r#"{"choices":[{"delta":{"tool_calls":[]}}]}"#,
            r#"{"choices":[{"delta":{"content":"a","content":"b"}}]}"#,
            r#"{"choices":[{"delta":{}},{"delta":{}}]}"#,
            r#"{"choices":[],"choices":[]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":1}}"#,
            r#"{"error":{"message":"x"}}"#,
            r#"{"choices":[{"logprobs":{"content":[]}}]}"#,
            r#"{"x":{}}"#,
            r#"{"x":[]}"#,
            r#"{"x":01}"#,
            r#"{"x":1.}"#,
            r#"{"x":nul}"#,
            r#"{"x":1,}"#,
            r#"{"x":1} x"#,
            r#"{"x":1"#,
            r#"{"choices":[{"delta":{"content":"a"}]}"#,
            "",
            "[DONE]",
        ] {
            assert_eq!(read(data), None, "{data}");
        }
    }
}
