//! Events out to NATS and back in: a node publishes every event of its buses on the session's
//! subject, in order; a follower on another node subscribes and decodes them.
//!
//! A message is `SEQ TYPE\n` followed by the event's JSON envelope as the stream sends it, so
//! that neither side parses or re-encodes the JSON.

use bytes::Bytes;
use elfgate_core::EventRecord;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::sync::mpsc;

/// Publishes what the hub relays until the hub is gone. A publish that fails (NATS away and its
/// client's buffer full) drops the event from the relay: followers fill it from the log.
pub(crate) async fn publish(fleet: Arc<super::Fleet>, mut rx: mpsc::Receiver<Arc<EventRecord>>) {
    let mut failures = 0u64;
    while let Some(e) = rx.recv().await {
        fleet.counts.events_relayed.fetch_add(1, Ordering::Relaxed);
        let mut msg = Vec::with_capacity(e.json.len() + 32);
        msg.extend_from_slice(format!("{} {}\n", e.seq, e.event_type()).as_bytes());
        msg.extend_from_slice(e.json.as_bytes());
        if let Err(err) = fleet
            .nats
            .publish(fleet.events_subject(e.session_id), Bytes::from(msg))
            .await
        {
            fleet.counts.relay_failures.fetch_add(1, Ordering::Relaxed);
            failures += 1;
            if failures == 1 || failures.is_power_of_two() {
                tracing::warn!(error = %err, failures, "an event could not be relayed to NATS");
            }
        }
    }
}

/// Events as one message: each `SEQ TYPE\n` and its JSON envelope on one line (an envelope's JSON
/// never holds a raw newline).
pub(crate) fn encode_many(events: &[Arc<EventRecord>]) -> Bytes {
    let mut msg = Vec::with_capacity(events.iter().map(|e| e.json.len() + 32).sum());
    for e in events {
        msg.extend_from_slice(format!("{} {}\n", e.seq, e.event_type()).as_bytes());
        msg.extend_from_slice(e.json.as_bytes());
        msg.push(b'\n');
    }
    Bytes::from(msg)
}

/// The events of [`encode_many`]'s message, in order; None when it is not one.
pub(crate) fn decode_many(payload: &[u8]) -> Option<Vec<Relayed>> {
    let text = std::str::from_utf8(payload).ok()?;
    let mut lines = text.lines();
    let mut out = Vec::new();
    while let Some(head) = lines.next() {
        let json = lines.next()?;
        let (seq, event_type) = head.split_once(' ')?;
        out.push(Relayed {
            seq: seq.parse().ok()?,
            event_type: event_type.to_string(),
            json: json.to_string(),
        });
    }
    Some(out)
}

/// One relayed event: its seq, its type and its JSON envelope.
pub(crate) struct Relayed {
    pub seq: u64,
    pub event_type: String,
    pub json: String,
}

/// Decodes a relayed event; None for anything else.
pub(crate) fn decode(payload: &[u8]) -> Option<Relayed> {
    let text = std::str::from_utf8(payload).ok()?;
    let (head, json) = text.split_once('\n')?;
    let (seq, event_type) = head.split_once(' ')?;
    Some(Relayed {
        seq: seq.parse().ok()?,
        event_type: event_type.to_string(),
        json: json.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::decode;

    #[test]
    fn a_relayed_event_decodes_to_its_seq_type_and_json() {
        let e = decode(b"42 streamDelta\n{\"a\":\"x\\ny\"}").unwrap();
        assert_eq!(e.seq, 42);
        assert_eq!(e.event_type, "streamDelta");
        assert_eq!(e.json, "{\"a\":\"x\\ny\"}");
        assert!(decode(b"nonsense").is_none());
        assert!(decode(b"x streamDelta\n{}").is_none());
    }

    #[test]
    fn several_events_decode_in_order() {
        let many =
            super::decode_many(b"3 init\n{\"a\":1}\n4 streamDelta\n{\"b\":\"x\\ny\"}\n").unwrap();
        assert_eq!(many.len(), 2);
        assert_eq!((many[0].seq, many[0].event_type.as_str()), (3, "init"));
        assert_eq!(many[1].json, "{\"b\":\"x\\ny\"}");
        assert!(super::decode_many(b"").unwrap().is_empty());
        assert!(super::decode_many(b"3 init\n").is_none());
    }
}
