//! A session's recent events, from the memory of the node that runs it: a follower on another
//! node that sees a gap before a relayed event (the events published before it subscribed, or a
//! message NATS dropped) asks for them here instead of waiting for the owner's log to be written
//! (its writes linger up to `storage.log_linger_ms`, and the follower reads the log every 200 ms).
//!
//! Every node listens on `elfgate.<fleet>.recent.*` and only the node running the session
//! answers, and only when its bus still holds every event asked for; anyone else stays silent, so
//! the asker falls back to the log after a short wait.

use super::Fleet;
use super::relay::encode_many;
use crate::event_frame::{Framed, split_frames};
use bytes::Bytes;
use elfgate_core::{EngineDispatcher, SessionId};
use futures_util::StreamExt;
use std::sync::Arc;
use std::time::Duration;

/// How long a follower waits for the owner's answer before it reads the log instead.
const ASK_TIMEOUT: Duration = Duration::from_millis(250);

impl Fleet {
    /// The events of `session` after seq `after` sent by `owner`, the node that runs it: from
    /// the fleet's stream on the NATS server when it holds them all (`stream`), else from the
    /// owner's memory; None when it does not answer in time (it is gone, or its memory no longer
    /// covers them). An answer from any other node is not taken.
    pub(crate) async fn recent_events(
        &self,
        session: SessionId,
        after: u64,
        owner: &str,
    ) -> Option<Vec<Framed>> {
        if self.stream_ready()
            && let Some(stored) = self.stored_events_within_timeout(session).await
            && let Some(events) = self.complete_from(&stored, after, owner)
        {
            return Some(events);
        }
        self.recent_from_owner(session, after, owner).await
    }

    /// For a follower that opens a stream: the events after `after` from the memory of the node
    /// that runs the session now, asked at once rather than after the log is read. The store's
    /// lease is looked up beside the question, so that a session nobody runs (no node answers)
    /// costs one query instead of the whole wait for an answer; an answer is taken only from
    /// the node the lease names, which is returned with its events. When the NATS server keeps
    /// the fleet's recent events (`stream`), they are read from it instead, and the owner is
    /// asked only when the stream does not hold them all.
    pub(crate) async fn events_from_owner(
        &self,
        session: SessionId,
        after: u64,
    ) -> Option<(String, Vec<Framed>)> {
        if self.stream_ready() {
            let (owner, stored) = tokio::join!(
                self.store.session_owner(session),
                self.stored_events_within_timeout(session)
            );
            let owner = match owner {
                Ok(Some(node)) if *node != *self.node_id => node,
                _ => return None,
            };
            if let Some(events) = stored.and_then(|s| self.complete_from(&s, after, &owner)) {
                return Some((owner, events));
            }
            let events = self.recent_from_owner(session, after, &owner).await?;
            return Some((owner, events));
        }
        let mut answers = self
            .ask(self.recent_subject(session), Bytes::from(after.to_string()))
            .await
            .ok()?;
        let owner = match self.store.session_owner(session).await {
            Ok(Some(node)) if *node != *self.node_id => node,
            _ => return None,
        };
        let reply = tokio::time::timeout(ASK_TIMEOUT, self.answer_from(&mut answers, &owner))
            .await
            .ok()??
            .ok()?;
        Some((owner, split_frames(&reply.payload)?))
    }

    /// The events of `session` after seq `after` from the memory of `owner`, asked over the bus.
    async fn recent_from_owner(
        &self,
        session: SessionId,
        after: u64,
        owner: &str,
    ) -> Option<Vec<Framed>> {
        let ask = async {
            let mut answers = self
                .ask(self.recent_subject(session), Bytes::from(after.to_string()))
                .await
                .ok()?;
            self.answer_from(&mut answers, owner).await?.ok()
        };
        let reply = tokio::time::timeout(ASK_TIMEOUT, ask).await.ok()??;
        split_frames(&reply.payload)
    }
}

/// Answers requests for recent events of the sessions this node runs, until NATS is gone.
pub(crate) async fn answer(fleet: Arc<Fleet>, dispatcher: Arc<EngineDispatcher>) {
    let subject = fleet.recent_subject_all();
    let mut requests = match fleet.nats.subscribe(subject).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot answer for recent events: NATS refused");
            return;
        }
    };
    while let Some(msg) = requests.next().await {
        // Only a node of the fleet may ask (the answer carries the session's events).
        if fleet.verified(&msg).is_none() {
            continue;
        }
        let (Some(reply_to), Some(session)) = (
            msg.reply,
            msg.subject
                .rsplit('.')
                .next()
                .and_then(|s| s.parse::<SessionId>().ok()),
        ) else {
            continue;
        };
        let Some(after) = std::str::from_utf8(&msg.payload)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
        else {
            continue;
        };
        if !dispatcher.active().contains(session) {
            continue;
        }
        let Some(recent) = dispatcher
            .hub()
            .subscribe_after(session, after)
            .and_then(|sub| sub.recent)
        else {
            continue;
        };
        match fleet.answer_signed(reply_to, encode_many(&recent)).await {
            Ok(()) => {
                fleet
                    .counts
                    .recent_served
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Err(e) => tracing::debug!(error = %e, "could not answer for recent events"),
        }
    }
}
