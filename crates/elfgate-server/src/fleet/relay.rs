//! Events out to NATS and back in: a node publishes every event of its buses on the session's
//! subject, in order; a follower on another node subscribes and passes them on.
//!
//! A message is the event's SSE frame (`crate::event_frame`), so that the follower sends it to its
//! clients as it came: neither side parses or re-encodes the JSON. It is signed (`signing`), and a
//! follower passes it on only when it verifies and comes from the session's owner (`owner`). Nodes of different versions
//! whose frames differ do not read each other's messages; their followers read the log instead.

use crate::event_frame::{frame, push_frame};
use bytes::{Bytes, BytesMut};
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
        if let Err(err) = fleet
            .publish_signed(
                fleet.events_subject(e.session_id),
                frame(e.seq, e.event_type(), &e.json),
            )
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

/// Events as one message: their frames, one after the other.
pub(crate) fn encode_many(events: &[Arc<EventRecord>]) -> Bytes {
    let mut msg = BytesMut::with_capacity(events.iter().map(|e| e.json.len() + 48).sum());
    for e in events {
        push_frame(&mut msg, e.seq, e.event_type(), &e.json);
    }
    msg.freeze()
}
