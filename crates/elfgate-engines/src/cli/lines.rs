//! Splitting a child's output into lines of bounded length: a line longer than the bound is
//! dropped whole (reported once), never held in memory past the bound.

/// One piece of output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Piece {
    /// A whole line, without its newline.
    Line(Vec<u8>),
    /// A line longer than the bound began; it is skipped up to its newline.
    TooLong,
}

/// Splits bytes into lines of at most `max` bytes.
#[derive(Debug)]
pub(crate) struct LineSplitter {
    buf: Vec<u8>,
    skipping: bool,
    max: usize,
}

impl LineSplitter {
    pub(crate) fn new(max: usize) -> Self {
        LineSplitter {
            buf: Vec::new(),
            skipping: false,
            max,
        }
    }

    /// The pieces `bytes` completes.
    pub(crate) fn feed(&mut self, mut bytes: &[u8]) -> Vec<Piece> {
        let mut out = Vec::new();
        while let Some(pos) = bytes.iter().position(|&b| b == b'\n') {
            let (head, rest) = (&bytes[..pos], &bytes[pos + 1..]);
            bytes = rest;
            if self.skipping {
                self.skipping = false;
                continue;
            }
            if self.buf.len() + head.len() > self.max {
                self.buf.clear();
                out.push(Piece::TooLong);
                continue;
            }
            self.buf.extend_from_slice(head);
            out.push(Piece::Line(std::mem::take(&mut self.buf)));
        }
        if !self.skipping {
            if self.buf.len() + bytes.len() > self.max {
                self.buf.clear();
                self.skipping = true;
                out.push(Piece::TooLong);
            } else {
                self.buf.extend_from_slice(bytes);
            }
        }
        out
    }

    /// The last line when the output ends without a newline.
    pub(crate) fn finish(&mut self) -> Option<Piece> {
        let rest = std::mem::take(&mut self.buf);
        (!self.skipping && !rest.is_empty()).then_some(Piece::Line(rest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_across_chunks_and_an_over_long_one_skipped_to_its_newline() {
        let mut s = LineSplitter::new(4);
        assert_eq!(s.feed(b"ab"), vec![]);
        assert_eq!(s.feed(b"c\nxy"), vec![Piece::Line(b"abc".to_vec())]);
        assert_eq!(s.feed(b"zzz"), vec![Piece::TooLong]);
        assert_eq!(s.feed(b"zzzzzz"), vec![]);
        assert_eq!(
            s.feed(b"z\nok\n123456\nend"),
            vec![Piece::Line(b"ok".to_vec()), Piece::TooLong]
        );
        assert_eq!(s.finish(), Some(Piece::Line(b"end".to_vec())));
    }
}
