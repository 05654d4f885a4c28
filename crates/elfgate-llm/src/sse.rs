//! A small incremental Server-Sent Events parser.
//!
//! Bytes are fed chunk by chunk; complete events are handed to a callback as
//! borrowed `(event, data)` string slices. Buffers are reused between events so
//! the steady state allocates nothing per token.

/// Incremental SSE parser state.
#[derive(Debug, Default)]
pub struct SseParser {
    /// An incomplete line carried over from the previous chunk.
    line: Vec<u8>,
    /// The `event:` field of the event being built.
    event: String,
    /// The joined `data:` lines of the event being built.
    data: String,
    /// Whether at least one `data:` line was seen for the current event.
    has_data: bool,
    /// Whether the first line (which may start with a byte-order mark) is still to come.
    bom_pending: bool,
}

impl SseParser {
    /// A fresh parser.
    pub fn new() -> Self {
        SseParser {
            bom_pending: true,
            ..Default::default()
        }
    }

    /// Feeds one chunk. `on_event(event, data)` is called for each complete
    /// event; returning `false` stops parsing (the rest of the chunk is
    /// discarded) and makes `feed` return `false`.
    pub fn feed<F>(&mut self, chunk: &[u8], on_event: &mut F) -> bool
    where
        F: FnMut(&str, &str) -> bool,
    {
        let mut rest = chunk;
        if !self.line.is_empty() {
            match find_newline(rest) {
                None => {
                    self.line.extend_from_slice(rest);
                    return true;
                }
                Some(i) => {
                    self.line.extend_from_slice(&rest[..i]);
                    rest = &rest[i + 1..];
                    let line = std::mem::take(&mut self.line);
                    let cont = self.process_line(&line, on_event);
                    self.line = line;
                    self.line.clear();
                    if !cont {
                        return false;
                    }
                }
            }
        }
        while let Some(i) = find_newline(rest) {
            // The common event, one `data:` line and the blank line ending it, both in this
            // chunk, with nothing gathered before it: handed over from the chunk, not copied.
            if let Some((data, len)) = self.lone_data_line(rest, i) {
                if !on_event("", data) {
                    return false;
                }
                rest = &rest[len..];
                continue;
            }
            if !self.process_line(&rest[..i], on_event) {
                return false;
            }
            rest = &rest[i + 1..];
        }
        self.line.extend_from_slice(rest);
        true
    }

    /// Flushes at end of input: a trailing line without a newline is processed
    /// and a pending event is dispatched. Returns `false` if the callback asked
    /// to stop.
    pub fn finish<F>(&mut self, on_event: &mut F) -> bool
    where
        F: FnMut(&str, &str) -> bool,
    {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            if !self.process_line(&line, on_event) {
                return false;
            }
        }
        self.process_line(b"", on_event)
    }

    /// If `buf` starts with a whole event of one `data:` line (ending at `newline`) and nothing is
    /// pending, its data and the length of the event with its blank line.
    fn lone_data_line<'b>(&self, buf: &'b [u8], newline: usize) -> Option<(&'b str, usize)> {
        if self.has_data || !self.event.is_empty() || self.bom_pending {
            return None;
        }
        let line = &buf[..newline];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let value = line.strip_prefix(b"data:")?;
        let value = value.strip_prefix(b" ").unwrap_or(value);
        let after = &buf[newline + 1..];
        let blank = if after.starts_with(b"\n") {
            1
        } else if after.starts_with(b"\r\n") {
            2
        } else {
            return None;
        };
        let data = std::str::from_utf8(value).ok()?;
        Some((data, newline + 1 + blank))
    }

    fn process_line<F>(&mut self, line: &[u8], on_event: &mut F) -> bool
    where
        F: FnMut(&str, &str) -> bool,
    {
        let mut line = line.strip_suffix(b"\r").unwrap_or(line);
        if self.bom_pending {
            // A byte-order mark may only appear at the very start of the stream.
            self.bom_pending = false;
            line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        }
        if line.is_empty() {
            let mut cont = true;
            if self.has_data {
                cont = on_event(&self.event, &self.data);
            }
            self.event.clear();
            self.data.clear();
            self.has_data = false;
            return cont;
        }
        if line[0] == b':' {
            return true; // comment / keep-alive
        }
        let (name, value) = match memchr::memchr(b':', line) {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match name {
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                push_utf8(&mut self.data, value);
                self.has_data = true;
            }
            b"event" => {
                self.event.clear();
                push_utf8(&mut self.event, value);
            }
            _ => {} // id, retry and unknown fields are ignored
        }
        true
    }
}

fn find_newline(buf: &[u8]) -> Option<usize> {
    // memchr scans a word (or a vector) at a time; a relayed stream is mostly this scan.
    memchr::memchr(b'\n', buf)
}

fn push_utf8(out: &mut String, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(s) => out.push_str(s),
        Err(_) => out.push_str(&String::from_utf8_lossy(bytes)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(chunks: &[&[u8]]) -> Vec<(String, String)> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        let mut cb = |e: &str, d: &str| {
            out.push((e.to_string(), d.to_string()));
            true
        };
        for c in chunks {
            p.feed(c, &mut cb);
        }
        p.finish(&mut cb);
        out
    }

    const SAMPLE: &[u8] = b"\xEF\xBB\xBF: keep-alive\r\n\r\nevent: ping\r\ndata: {}\r\n\r\ndata: line1\ndata:line2\nid: 7\nretry: 10\n\nevent: x\n\ndata: \xC3\xA9t\xC3\xA9\n\n";

    fn expected() -> Vec<(String, String)> {
        vec![
            ("ping".into(), "{}".into()),
            (String::new(), "line1\nline2".into()),
            (String::new(), "été".into()),
        ]
    }

    #[test]
    fn parses_whole_input() {
        assert_eq!(collect(&[SAMPLE]), expected());
    }

    #[test]
    fn parses_byte_by_byte() {
        let chunks: Vec<&[u8]> = SAMPLE.chunks(1).collect();
        assert_eq!(collect(&chunks), expected());
    }

    #[test]
    fn parses_every_split_point() {
        for i in 0..SAMPLE.len() {
            let (a, b) = SAMPLE.split_at(i);
            assert_eq!(collect(&[a, b]), expected(), "split at {i}");
        }
    }

    #[test]
    fn flushes_trailing_event_without_blank_line() {
        assert_eq!(
            collect(&[b"data: [DONE]"]),
            vec![(String::new(), "[DONE]".to_string())]
        );
    }

    #[test]
    fn lone_data_lines_read_from_the_chunk_match_gathered_ones() {
        // After the first line, each of these is one `data:` line and its blank line.
        let body: &[u8] =
            b": hi\n\ndata: a\n\ndata:b\r\n\r\ndata: \xC3\xA9\n\ndata: bad \xFF\n\ndata: c\n";
        let want: Vec<(String, String)> = ["a", "b", "é", "bad \u{FFFD}", "c"]
            .iter()
            .map(|d| (String::new(), d.to_string()))
            .collect();
        assert_eq!(collect(&[body, b"\n"]), want);
        for i in 0..body.len() {
            let (a, b) = body.split_at(i);
            assert_eq!(collect(&[a, b, b"\n"]), want, "split at {i}");
        }
    }

    #[test]
    fn stop_in_a_lone_data_line_discards_rest() {
        let mut p = SseParser::new();
        let mut seen = Vec::new();
        assert!(p.feed(b": start\n\n", &mut |_: &str, _: &str| true));
        let cont = p.feed(b"data: a\n\ndata: b\n\n", &mut |_: &str, d: &str| {
            seen.push(d.to_string());
            false
        });
        assert!(!cont);
        assert_eq!(seen, ["a"]);
    }

    #[test]
    fn stop_discards_rest() {
        let mut p = SseParser::new();
        let mut n = 0;
        let cont = p.feed(b"data: a\n\ndata: b\n\n", &mut |_: &str, _: &str| {
            n += 1;
            false
        });
        assert!(!cont);
        assert_eq!(n, 1);
    }
}
