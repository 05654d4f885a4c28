//! A logged event as the SSE stream sends it (`id: SEQ\nevent: TYPE\ndata: JSON\n\n`), and read
//! back. The fleet's bus carries events in this form too, so that the node that follows a session
//! another node runs passes each message to its clients as it came, without parsing or
//! re-encoding anything but the seq.

use bytes::{Bytes, BytesMut};
use elfgate_core::EventType;

/// Appends the frame of one event to `out`.
pub(crate) fn push_frame(out: &mut BytesMut, seq: u64, event_type: &str, json: &str) {
    out.reserve(json.len() + event_type.len() + 40);
    out.extend_from_slice(b"id: ");
    out.extend_from_slice(elfgate_core::decimal::digits(seq, &mut [0; 20]));
    out.extend_from_slice(b"\nevent: ");
    out.extend_from_slice(event_type.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    out.extend_from_slice(json.as_bytes());
    out.extend_from_slice(b"\n\n");
}

/// The frame of one event.
pub(crate) fn frame(seq: u64, event_type: &str, json: &str) -> Bytes {
    let mut out = BytesMut::new();
    push_frame(&mut out, seq, event_type, json);
    out.freeze()
}

/// One event's frame with what a stream needs to know of it.
#[derive(Debug, Clone)]
pub(crate) struct Framed {
    /// The event's seq.
    pub seq: u64,
    /// Whether it is the run's `complete`.
    pub complete: bool,
    /// The frame, ready to send.
    pub frame: Bytes,
}

impl Framed {
    /// The event's JSON (the frame's `data:` line).
    pub fn json(&self) -> Option<&str> {
        let at = self.frame.windows(7).position(|w| w == b"\ndata: ")? + 7;
        let end = self.frame.len().checked_sub(2)?;
        std::str::from_utf8(self.frame.get(at..end)?).ok()
    }
}

/// The frame at the start of `bytes` and its length; None when it is not one. An event's JSON
/// never holds a raw newline, so the frame ends at the first newline after `data: `.
fn parse_one(bytes: &[u8]) -> Option<(u64, bool, usize)> {
    let rest = bytes.strip_prefix(b"id: ")?;
    let seq_end = rest.iter().position(|&b| b == b'\n')?;
    let seq = std::str::from_utf8(&rest[..seq_end]).ok()?.parse().ok()?;
    let rest = rest[seq_end + 1..].strip_prefix(b"event: ")?;
    let type_end = rest.iter().position(|&b| b == b'\n')?;
    let complete = &rest[..type_end] == EventType::Complete.as_str().as_bytes();
    let rest = rest[type_end + 1..].strip_prefix(b"data: ")?;
    let data_end = rest.iter().position(|&b| b == b'\n')?;
    if rest.get(data_end + 1) != Some(&b'\n') {
        return None;
    }
    let len = bytes.len() - rest.len() + data_end + 2;
    Some((seq, complete, len))
}

/// Every frame of `payload`, in order, each sharing its bytes; None when it is not frames only.
pub(crate) fn split_frames(payload: &Bytes) -> Option<Vec<Framed>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < payload.len() {
        let (seq, complete, len) = parse_one(&payload[at..])?;
        out.push(Framed {
            seq,
            complete,
            frame: payload.slice(at..at + len),
        });
        at += len;
    }
    Some(out)
}

/// `payload` as exactly one frame; None for anything else.
pub(crate) fn single_frame(payload: &Bytes) -> Option<Framed> {
    let (seq, complete, len) = parse_one(payload)?;
    (len == payload.len()).then(|| Framed {
        seq,
        complete,
        frame: payload.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_reads_back_to_its_seq_and_kind() {
        let f = frame(42, "streamDelta", "{\"a\":\"x\\ny\"}");
        assert_eq!(
            &f[..],
            b"id: 42\nevent: streamDelta\ndata: {\"a\":\"x\\ny\"}\n\n"
        );
        let got = single_frame(&f).unwrap();
        assert_eq!((got.seq, got.complete, got.frame), (42, false, f));
        let done = single_frame(&frame(7, "complete", "{}")).unwrap();
        assert_eq!((done.seq, done.complete), (7, true));
        assert_eq!(done.json(), Some("{}"));
        for bad in [
            &b"nonsense"[..],
            b"id: x\nevent: a\ndata: {}\n\n",
            b"id: 1\nevent: a\ndata: {}\n",
            b"id: 1\nevent: a\ndata: {}\n\nid: 2",
        ] {
            assert!(single_frame(&Bytes::copy_from_slice(bad)).is_none());
        }
    }

    #[test]
    fn several_frames_split_in_order_and_share_the_message() {
        let mut out = BytesMut::new();
        push_frame(&mut out, 3, "init", "{\"a\":1}");
        push_frame(&mut out, 4, "complete", "{\"b\":2}");
        let all = out.freeze();
        let got = split_frames(&all).unwrap();
        assert_eq!(
            got.iter().map(|f| (f.seq, f.complete)).collect::<Vec<_>>(),
            [(3, false), (4, true)]
        );
        assert_eq!(
            &got[1].frame[..],
            b"id: 4\nevent: complete\ndata: {\"b\":2}\n\n"
        );
        assert!(split_frames(&Bytes::new()).unwrap().is_empty());
        assert!(split_frames(&all.slice(..all.len() - 1)).is_none());
    }
}
