//! The node's id on every log line of a fleet node, so that the lines of several nodes gathered
//! in one place say which node wrote them.
//!
//! A span would name the node only for work done inside it, and tokio tasks do not inherit
//! spans; the formatter hands each whole line to the writer in one call, so the writer adds the
//! field instead: `"node":"ID"` first in a JSON line, ` node=ID` at the end of a text line.

use std::io::{self, Write};
use std::sync::OnceLock;
use tracing_subscriber::fmt::MakeWriter;

static NODE: OnceLock<Tag> = OnceLock::new();

/// The node's id as each log format writes it.
struct Tag {
    json: Vec<u8>,
    text: Vec<u8>,
}

/// Names the node on every log line from now on (once; a later call is ignored).
pub fn set_node(id: &str) {
    let quoted = serde_json::to_string(id).unwrap_or_else(|_| "\"\"".into());
    let _ = NODE.set(Tag {
        json: format!("{{\"node\":{quoted},").into_bytes(),
        text: format!(" node={id}").into_bytes(),
    });
}

/// Standard error, with the node's id added to each line once [`set_node`] was called.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeTaggedStderr;

impl<'a> MakeWriter<'a> for NodeTaggedStderr {
    type Writer = Tagged<io::Stderr>;

    fn make_writer(&'a self) -> Self::Writer {
        Tagged(io::stderr())
    }
}

/// A writer that tags each line written to it in one call.
#[derive(Debug)]
pub struct Tagged<W>(pub W);

impl<W: Write> Write for Tagged<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match NODE.get() {
            Some(tag) => {
                self.0.write_all(&tagged(tag, buf))?;
                Ok(buf.len())
            }
            None => self.0.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// `line` with the tag: inside a JSON object's braces, else before the newline.
fn tagged(tag: &Tag, line: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(line.len() + tag.json.len());
    if let Some(rest) = line.strip_prefix(b"{") {
        out.extend_from_slice(&tag.json);
        if rest.starts_with(b"}") {
            // An object without fields: no comma after the tag.
            out.pop();
        }
        out.extend_from_slice(rest);
    } else {
        let body = line.strip_suffix(b"\n").unwrap_or(line);
        out.extend_from_slice(body);
        out.extend_from_slice(&tag.text);
        if body.len() < line.len() {
            out.push(b'\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(id: &str) -> Tag {
        Tag {
            json: format!("{{\"node\":{},", serde_json::to_string(id).unwrap()).into_bytes(),
            text: format!(" node={id}").into_bytes(),
        }
    }

    #[test]
    fn a_json_line_gets_the_node_as_its_first_field() {
        let out = tagged(&tag("a-1"), b"{\"level\":\"INFO\",\"message\":\"hi\"}\n");
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["node"], "a-1");
        assert_eq!(v["message"], "hi");
        assert!(out.ends_with(b"}\n"));
        let empty = tagged(&tag("b"), b"{}\n");
        assert_eq!(empty, b"{\"node\":\"b\"}\n");
    }

    #[test]
    fn a_text_line_ends_with_the_node() {
        let out = tagged(
            &tag("b"),
            b"2026-12-04T17:00:00Z  INFO elfgate: listening\n",
        );
        assert_eq!(
            out,
            b"2026-12-04T17:00:00Z  INFO elfgate: listening node=b\n".to_vec()
        );
        assert_eq!(
            tagged(&tag("b"), b"no newline"),
            b"no newline node=b".to_vec()
        );
    }
}
