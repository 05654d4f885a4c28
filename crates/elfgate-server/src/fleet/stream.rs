//! The fleet's recent events kept by the NATS server itself: a JetStream stream, in memory, over
//! every session's events subject, keeping each event for [`MAX_AGE`] (past it a follower would
//! drop it as stale anyway) and a session's last [`SUBSCRIBER_BUFFER`] events at most (what the
//! owner's memory holds too). A follower on another node that opens a stream, or sees a gap,
//! reads the session's events from it with one request to the NATS server, so that catching up
//! does not wait for the owner: in a burst of session starts the owner's answer to a `recent`
//! request queues behind the burst on its busy cores (`recent`, which stays the fallback when the
//! server has no JetStream, or the stream does not hold every event asked for).
//!
//! Nothing changes for the owner: the server stores the messages it already publishes on the
//! events subjects. What a follower reads from the stream is verified as a live message is (the
//! fleet's signature, the session's owner as sender), and taken only when it holds every event
//! after the cursor.
//!
//! The JetStream API is spoken over plain NATS requests (a few JSON messages), which every
//! nats-server with JetStream since 2.9 answers.

use super::Fleet;
use super::signing::MAX_AGE;
use crate::event_frame::{Framed, single_frame};
use bytes::Bytes;
use elfgate_core::{SUBSCRIBER_BUFFER, SessionId};
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How often a node makes sure the stream exists: a NATS server restarted loses a stream kept in
/// memory, and a server given JetStream later gets one.
const KEEP_EVERY: Duration = Duration::from_secs(10);
/// The most the stream holds; past it the oldest events go first.
const MAX_BYTES: u64 = 256 * 1024 * 1024;
/// How long a reader waits for the server's answer and the stored events before it asks the
/// owner instead.
const READ_TIMEOUT: Duration = Duration::from_millis(250);
/// JetStream's error code for a stream of that name with another configuration.
const STREAM_NAME_IN_USE: u64 = 10058;
/// How long the server keeps a reader's consumer once its reader has gone.
const CONSUMER_IDLE: Duration = Duration::from_secs(2);

impl Fleet {
    /// The stream's name: the fleet's subjects' prefix in the characters a name may hold.
    fn stream_name(&self) -> String {
        self.subjects
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect()
    }

    /// Whether the stream was there at the last look.
    pub(crate) fn stream_ready(&self) -> bool {
        self.stream_ready.load(Ordering::Acquire)
    }

    /// A JetStream API request: its JSON answer, or why there is none (with JetStream's error
    /// code when it gave one).
    async fn jetstream(&self, api: String, request: Value) -> Result<Value, (Option<u64>, String)> {
        let reply = self
            .nats
            .request(api, Bytes::from(request.to_string()))
            .await
            .map_err(|e| (None, e.to_string()))?;
        let answer: Value =
            serde_json::from_slice(&reply.payload).map_err(|e| (None, e.to_string()))?;
        match answer.get("error") {
            Some(error) => Err((
                error["err_code"].as_u64(),
                error["description"]
                    .as_str()
                    .unwrap_or("JetStream refused")
                    .to_string(),
            )),
            None => Ok(answer),
        }
    }

    /// Creates the stream, or finds it there (made by another node, possibly of another version
    /// with other limits: read all the same, since what is read from it is verified).
    async fn make_stream(&self) -> Result<(), String> {
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let name = self.stream_name();
        self.jetstream(
            format!("$JS.API.STREAM.CREATE.{name}"),
            json!({
                "name": name,
                "subjects": [self.events_subject_all()],
                "retention": "limits",
                "storage": "memory",
                "discard": "old",
                "max_age": nanos(MAX_AGE),
                "duplicate_window": nanos(MAX_AGE),
                "max_bytes": MAX_BYTES,
                "max_msgs": -1,
                "max_msgs_per_subject": SUBSCRIBER_BUFFER,
                "max_consumers": -1,
                "max_msg_size": -1,
                "num_replicas": 1,
            }),
        )
        .await
        .map(drop)
        .or_else(|(code, why)| match code {
            Some(STREAM_NAME_IN_USE) => Ok(()),
            _ => Err(why),
        })
    }

    /// Every event of `session` the stream holds, or None when it cannot be read within
    /// [`READ_TIMEOUT`] (the caller asks the owner instead).
    pub(crate) async fn stored_events_within_timeout(
        &self,
        session: SessionId,
    ) -> Option<Vec<(String, Framed)>> {
        tokio::time::timeout(READ_TIMEOUT, self.stored_events(session))
            .await
            .ok()?
    }

    /// The events after `after` in `stored` when it holds them all, each sent by `owner`
    /// (counted as a catch-up from the stream); None otherwise.
    pub(crate) fn complete_from(
        &self,
        stored: &[(String, Framed)],
        after: u64,
        owner: &str,
    ) -> Option<Vec<Framed>> {
        let events = complete_after(stored, after, owner)?;
        self.counts.stream_reads.fetch_add(1, Ordering::Relaxed);
        Some(events)
    }

    /// Every event of `session` in the stream, verified, with the node that sent it; None when
    /// the stream cannot be read. A consumer of the server's own delivers them to an inbox of
    /// this node's; each delivery says how many are left, so the last one is known.
    async fn stored_events(&self, session: SessionId) -> Option<Vec<(String, Framed)>> {
        let inbox = self.nats.new_inbox();
        let mut deliveries = self.nats.subscribe(inbox.clone()).await.ok()?;
        let name = self.stream_name();
        let subject = self.events_subject(session);
        let created = self
            .jetstream(
                format!("$JS.API.CONSUMER.CREATE.{name}"),
                json!({
                    "stream_name": name,
                    "config": {
                        "deliver_subject": inbox,
                        "filter_subject": subject,
                        "deliver_policy": "all",
                        "ack_policy": "none",
                        "replay_policy": "instant",
                        "mem_storage": true,
                        "num_replicas": 1,
                        "inactive_threshold":
                            u64::try_from(CONSUMER_IDLE.as_nanos()).unwrap_or(u64::MAX),
                    }
                }),
            )
            .await;
        let created = match created {
            Ok(info) => info,
            Err((_, e)) => {
                // Gone with a restarted server, say: made again by the next look.
                tracing::debug!(error = %e, "cannot read the fleet's stream");
                self.stream_ready.store(false, Ordering::Release);
                return None;
            }
        };
        let stored = created["num_pending"].as_u64().unwrap_or(0)
            + created["delivered"]["consumer_seq"].as_u64().unwrap_or(0);
        let mut events = Vec::new();
        if stored == 0 {
            return Some(events);
        }
        while let Some(msg) = deliveries.next().await {
            let Some(left) = pending_after(&msg) else {
                continue;
            };
            // Stored as the owner published it: signed for the events subject, without a reply.
            let verified = self
                .key
                .verify(&msg.subject, None, msg.headers.as_ref(), &msg.payload);
            match (verified, single_frame(&msg.payload)) {
                (Ok(sender), Some(frame)) => events.push((sender.node, frame)),
                (Err(why), _) => self.dropped(why.into(), &msg.subject, None),
                (Ok(_), None) => {}
            }
            if left == 0 {
                return Some(events);
            }
        }
        None
    }
}

/// How many messages the consumer had left to deliver after `msg`: the last field of its
/// acknowledgement subject (`$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer
/// seq>.<time>.<pending>`); None for a message that is not a delivery.
fn pending_after(msg: &async_nats::Message) -> Option<u64> {
    let reply = msg.reply.as_ref()?;
    reply
        .strip_prefix("$JS.ACK.")?
        .rsplit('.')
        .next()?
        .parse()
        .ok()
}

/// The events after `after` in `stored`, when it holds each of them, in order, all sent by
/// `owner`, and reaches back to the cursor (the event at `after`, or the session's first).
fn complete_after(stored: &[(String, Framed)], after: u64, owner: &str) -> Option<Vec<Framed>> {
    let first = stored.first()?;
    if first.1.seq > after + 1 {
        return None;
    }
    let mut events = Vec::new();
    for (expected, (sender, event)) in (first.1.seq..).zip(stored) {
        if sender != owner || event.seq != expected {
            return None;
        }
        if event.seq > after {
            events.push(event.clone());
        }
    }
    Some(events)
}

/// Keeps the fleet's stream there while the node runs: made at start, and looked for again every
/// [`KEEP_EVERY`]. Without JetStream (or without the rights to use it) followers ask the owner,
/// as before; the log says which, once per change.
pub(crate) async fn keep(fleet: Arc<Fleet>) {
    let mut every = tokio::time::interval(KEEP_EVERY);
    let mut said: Option<bool> = None;
    loop {
        every.tick().await;
        if !fleet.nats_connected() {
            continue;
        }
        let made = fleet.make_stream().await;
        let ready = made.is_ok();
        fleet.stream_ready.store(ready, Ordering::Release);
        if said == Some(ready) {
            continue;
        }
        said = Some(ready);
        match made {
            Ok(()) => tracing::info!(
                stream = %fleet.stream_name(),
                "the NATS server keeps the fleet's recent events: followers catch up from it"
            ),
            Err(e) => tracing::warn!(
                error = %e,
                "the NATS server cannot keep the fleet's recent events (JetStream off, or not \
                 allowed): followers catch up from the owner's memory"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(events: &[(&str, u64)]) -> Vec<(String, Framed)> {
        events
            .iter()
            .map(|(node, seq)| {
                let frame = crate::event_frame::frame(*seq, "streamDelta", "{}");
                (node.to_string(), single_frame(&frame).unwrap())
            })
            .collect()
    }

    fn seqs(events: Option<Vec<Framed>>) -> Option<Vec<u64>> {
        events.map(|e| e.iter().map(|f| f.seq).collect())
    }

    #[test]
    fn the_stream_is_taken_only_when_it_holds_every_event_after_the_cursor_from_the_owner() {
        let run = stored(&[("a", 1), ("a", 2), ("a", 3)]);
        assert_eq!(seqs(complete_after(&run, 0, "a")), Some(vec![1, 2, 3]));
        assert_eq!(seqs(complete_after(&run, 2, "a")), Some(vec![3]));
        assert_eq!(seqs(complete_after(&run, 3, "a")), Some(vec![]));
        // Another sender, a gap, events gone from the start, nothing stored: the owner is asked.
        assert_eq!(seqs(complete_after(&run, 0, "b")), None);
        let gap = stored(&[("a", 1), ("a", 3)]);
        assert_eq!(seqs(complete_after(&gap, 0, "a")), None);
        let late = stored(&[("a", 5), ("a", 6)]);
        assert_eq!(seqs(complete_after(&late, 3, "a")), None);
        assert_eq!(seqs(complete_after(&late, 4, "a")), Some(vec![5, 6]));
        assert_eq!(seqs(complete_after(&[], 0, "a")), None);
    }
}
