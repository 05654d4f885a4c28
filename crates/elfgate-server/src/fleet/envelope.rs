//! How a forwarded request and its answer travel on the bus: a head (method, path, headers,
//! principal, deadline; or status and headers) as JSON, then the body as it is, bytes for bytes:
//! nothing escaped, so a body travels at its own size. A message larger than the NATS server
//! takes (`max_payload`) goes as numbered parts that the receiver puts back together; parts of
//! one sender on one subject arrive in order (NATS keeps a publisher's order), so a part out of
//! order means one was lost, and the whole is dropped (the sender's wait ends in a 503).

use bytes::{BufMut, Bytes, BytesMut};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A message that is the whole envelope.
const WHOLE: u8 = 0;
/// A message that is one part of an envelope.
const PART: u8 = 1;
/// Bytes of a part's prefix: kind, id, index, count.
const PART_PREFIX: usize = 1 + 16 + 4 + 4;
/// Room kept in each message for the NATS headers (the signature) and the subjects.
const HEADROOM: usize = 1024;
/// Envelopes being put back together at once; past it the oldest is dropped.
const MAX_ASSEMBLING: usize = 64;

/// A head and a body in one message's bytes.
pub(crate) fn pack<H: Serialize>(head: &H, body: &[u8]) -> Result<Bytes, serde_json::Error> {
    let head = serde_json::to_vec(head)?;
    let mut out = BytesMut::with_capacity(4 + head.len() + body.len());
    out.put_u32(u32::try_from(head.len()).unwrap_or(u32::MAX));
    out.extend_from_slice(&head);
    out.extend_from_slice(body);
    Ok(out.freeze())
}

/// The head and body of [`pack`]'s bytes; None when they are not that.
pub(crate) fn unpack<H: DeserializeOwned>(packed: &Bytes) -> Option<(H, Bytes)> {
    let len = usize::try_from(u32::from_be_bytes(packed.get(..4)?.try_into().ok()?)).ok()?;
    let head = serde_json::from_slice(packed.get(4..4 + len)?).ok()?;
    Some((head, packed.slice(4 + len..)))
}

/// `packed` as the messages that carry it, none larger than `max_payload` bytes with the
/// signature's headers: one message when it fits.
pub(crate) fn into_messages(packed: Bytes, max_payload: usize) -> Vec<Bytes> {
    let room = max_payload.saturating_sub(HEADROOM).max(PART_PREFIX + 1);
    if packed.len() < room {
        let mut out = BytesMut::with_capacity(1 + packed.len());
        out.put_u8(WHOLE);
        out.extend_from_slice(&packed);
        return vec![out.freeze()];
    }
    let chunk = room - PART_PREFIX;
    let id = uuid::Uuid::new_v4().into_bytes();
    let count = packed.len().div_ceil(chunk);
    (0..count)
        .map(|i| {
            let part = packed.slice(i * chunk..((i + 1) * chunk).min(packed.len()));
            let mut out = BytesMut::with_capacity(PART_PREFIX + part.len());
            out.put_u8(PART);
            out.extend_from_slice(&id);
            out.put_u32(u32::try_from(i).unwrap_or(u32::MAX));
            out.put_u32(u32::try_from(count).unwrap_or(u32::MAX));
            out.extend_from_slice(&part);
            out.freeze()
        })
        .collect()
}

/// Envelopes whose parts are arriving.
pub(crate) struct Assembler {
    /// The most bytes one envelope may have (past it, it is dropped).
    max_bytes: usize,
    /// How long the parts of one envelope may take to arrive.
    max_wait: Duration,
    partial: HashMap<[u8; 16], Partial>,
}

struct Partial {
    started: Instant,
    next: u32,
    count: u32,
    bytes: BytesMut,
}

/// What a message added.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Assembled {
    /// A whole envelope (packed).
    Whole(Bytes),
    /// A part: more are to come.
    Partial,
    /// Not an envelope's message, a part out of order or past the bound: dropped.
    Dropped,
}

impl Assembler {
    /// An assembler of envelopes up to `max_bytes`, each within `max_wait`.
    pub(crate) fn new(max_bytes: usize, max_wait: Duration) -> Self {
        Assembler {
            max_bytes,
            max_wait,
            partial: HashMap::new(),
        }
    }

    /// Takes one message of an envelope.
    pub(crate) fn take(&mut self, msg: &Bytes) -> Assembled {
        match msg.first() {
            Some(&WHOLE) => Assembled::Whole(msg.slice(1..)),
            Some(&PART) if msg.len() > PART_PREFIX => self.take_part(msg),
            _ => Assembled::Dropped,
        }
    }

    fn take_part(&mut self, msg: &Bytes) -> Assembled {
        let word = |at: usize| {
            msg.get(at..at + 4)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_be_bytes)
        };
        let (Some(id), Some(index), Some(count)) = (
            msg.get(1..17).and_then(|b| <[u8; 16]>::try_from(b).ok()),
            word(17),
            word(21),
        ) else {
            return Assembled::Dropped;
        };
        let data = &msg[PART_PREFIX..];
        let max_wait = self.max_wait;
        self.partial.retain(|_, p| p.started.elapsed() < max_wait);
        if index == 0 {
            if self.partial.len() >= MAX_ASSEMBLING
                && let Some(oldest) = self
                    .partial
                    .iter()
                    .min_by_key(|(_, p)| p.started)
                    .map(|(k, _)| *k)
            {
                self.partial.remove(&oldest);
            }
            self.partial.insert(
                id,
                Partial {
                    started: Instant::now(),
                    next: 0,
                    count,
                    bytes: BytesMut::new(),
                },
            );
        }
        let Some(p) = self.partial.get_mut(&id) else {
            return Assembled::Dropped;
        };
        if p.next != index || p.count != count || p.bytes.len() + data.len() > self.max_bytes {
            self.partial.remove(&id);
            return Assembled::Dropped;
        }
        p.bytes.extend_from_slice(data);
        p.next += 1;
        if p.next < p.count {
            return Assembled::Partial;
        }
        match self.partial.remove(&id) {
            Some(p) => Assembled::Whole(p.bytes.freeze()),
            None => Assembled::Dropped,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_envelope_goes_in_parts_and_comes_back_whole() {
        let body: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let packed = pack(&serde_json::json!({"m": "POST"}), &body).unwrap();
        let messages = into_messages(packed, 2048);
        assert!(messages.len() > 5);
        assert!(messages.iter().all(|m| m.len() <= 2048));
        let mut a = Assembler::new(1 << 20, Duration::from_secs(10));
        let mut whole = None;
        for m in &messages {
            match a.take(m) {
                Assembled::Whole(w) => whole = Some(w),
                Assembled::Partial => {}
                Assembled::Dropped => panic!("dropped"),
            }
        }
        let (head, got): (serde_json::Value, Bytes) = unpack(&whole.unwrap()).unwrap();
        assert_eq!(head["m"], "POST");
        assert_eq!(&got[..], &body[..]);
    }

    #[test]
    fn a_small_envelope_is_one_message_and_a_lost_part_drops_the_whole() {
        let packed = pack(&"head", b"body").unwrap();
        let one = into_messages(packed.clone(), 1 << 20);
        assert_eq!(one.len(), 1);
        let mut a = Assembler::new(1 << 20, Duration::from_secs(10));
        assert_eq!(a.take(&one[0]), Assembled::Whole(packed));

        let big = pack(&"head", &vec![7u8; 5000]).unwrap();
        let parts = into_messages(big, 2048);
        assert_eq!(a.take(&parts[0]), Assembled::Partial);
        assert_eq!(a.take(&parts[2]), Assembled::Dropped);
        assert_eq!(a.take(&parts[1]), Assembled::Dropped);
        // Past the bound.
        let mut small = Assembler::new(1500, Duration::from_secs(10));
        assert_eq!(small.take(&parts[0]), Assembled::Partial);
        assert_eq!(small.take(&parts[1]), Assembled::Dropped);
    }
}
