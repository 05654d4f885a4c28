//! The node's side of the bus's signatures (`signing`): every publish, request and answer goes
//! out signed, and every message taken is verified first, dropped and counted when it does not
//! verify. A request's answer is taken only from the node it was meant for: a client of the bus
//! that answers first in another node's place is not heard.

use super::Fleet;
use super::signing::{Rejected, Sender};
use async_nats::{Message, Subscriber};
use bytes::Bytes;
use futures_util::StreamExt;
use std::sync::atomic::Ordering;

/// Why a message was dropped unread, for the log and the metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dropped {
    /// No signature (a client of the bus, or a node without the fleet's secret).
    Unsigned,
    /// A signature that does not verify: another secret, or a message changed on the way.
    BadSignature,
    /// Sent longer ago than the signatures' tolerance (or ahead of this node's clock).
    Stale,
    /// A control request seen before (the same request id), or one past its deadline.
    Replayed,
    /// A session's event, or an answer for it, from a node that does not own the session now.
    NotOwner,
}

impl Dropped {
    /// Every reason, in the metric's order.
    pub(crate) const ALL: [Dropped; 5] = [
        Dropped::Unsigned,
        Dropped::BadSignature,
        Dropped::Stale,
        Dropped::Replayed,
        Dropped::NotOwner,
    ];

    /// The reason's label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Dropped::Unsigned => Rejected::Unsigned.as_str(),
            Dropped::BadSignature => Rejected::Forged.as_str(),
            Dropped::Stale => Rejected::Stale.as_str(),
            Dropped::Replayed => "replayed",
            Dropped::NotOwner => "not_owner",
        }
    }

    fn index(self) -> usize {
        Dropped::ALL.iter().position(|d| *d == self).unwrap_or(0)
    }
}

impl From<Rejected> for Dropped {
    fn from(r: Rejected) -> Self {
        match r {
            Rejected::Unsigned => Dropped::Unsigned,
            Rejected::Forged => Dropped::BadSignature,
            Rejected::Stale => Dropped::Stale,
        }
    }
}

/// A request's answers, as they come, verified.
pub(crate) struct Answers {
    sub: Subscriber,
    inbox: String,
}

/// Why a request got no answer.
#[derive(Debug)]
pub(crate) enum AskError {
    /// Nobody listens on the subject (the server said so at once).
    NoResponders,
    /// The request could not be sent.
    Bus(String),
}

impl Fleet {
    /// Counts a message dropped for `why`, and says so in the log the first time and then at
    /// every power of two, so that a flood of forged messages does not flood the log.
    pub(crate) fn dropped(&self, why: Dropped, subject: &str, from: Option<&str>) {
        let n = self.counts.dropped[why.index()].fetch_add(1, Ordering::Relaxed) + 1;
        if n == 1 || n.is_power_of_two() {
            tracing::warn!(
                reason = why.as_str(),
                subject,
                from = from.unwrap_or("?"),
                count = n,
                "dropped a message from the bus"
            );
        }
    }

    /// The verified sender of `msg`; None (counted, logged) when it does not verify.
    pub(crate) fn verified(&self, msg: &Message) -> Option<Sender> {
        let reply = msg.reply.as_ref().map(async_nats::Subject::as_str);
        match self
            .key
            .verify(&msg.subject, reply, msg.headers.as_ref(), &msg.payload)
        {
            Ok(sender) => Some(sender),
            Err(why) => {
                self.dropped(why.into(), &msg.subject, None);
                None
            }
        }
    }

    /// Publishes `payload` on `subject`, signed.
    pub(crate) async fn publish_signed(
        &self,
        subject: String,
        payload: Bytes,
    ) -> Result<(), async_nats::PublishError> {
        let headers = self.key.sign(&subject, None, &self.node_id, &payload);
        self.nats
            .publish_with_headers(subject, headers, payload)
            .await
    }

    /// Sends `payload` on `subject` as a signed request; its answers come in the returned
    /// [`Answers`].
    pub(crate) async fn ask(&self, subject: String, payload: Bytes) -> Result<Answers, AskError> {
        self.ask_in_parts(subject, vec![payload]).await
    }

    /// Sends a request as `messages` on `subject`, each signed, the last one with the reply
    /// subject; its answers come in the returned [`Answers`]. The answers' inbox is subscribed
    /// before the request leaves (the server handles a connection's commands in order), so that
    /// no answer is missed.
    pub(crate) async fn ask_in_parts(
        &self,
        subject: String,
        mut messages: Vec<Bytes>,
    ) -> Result<Answers, AskError> {
        let last = messages
            .pop()
            .ok_or_else(|| AskError::Bus("nothing to send".into()))?;
        let inbox = self.nats.new_inbox();
        let sub = self
            .nats
            .subscribe(inbox.clone())
            .await
            .map_err(|e| AskError::Bus(e.to_string()))?;
        for part in messages {
            self.publish_signed(subject.clone(), part)
                .await
                .map_err(|e| AskError::Bus(e.to_string()))?;
        }
        let headers = self.key.sign(&subject, Some(&inbox), &self.node_id, &last);
        self.nats
            .publish_with_reply_and_headers(subject, inbox.clone(), headers, last)
            .await
            .map_err(|e| AskError::Bus(e.to_string()))?;
        Ok(Answers { sub, inbox })
    }

    /// The next verified answer; `Err(NoResponders)` when the server says nobody listens, None
    /// when the subscription ended.
    pub(crate) async fn next_answer(
        &self,
        answers: &mut Answers,
    ) -> Option<Result<(Sender, Message), AskError>> {
        loop {
            let msg = answers.sub.next().await?;
            if msg.status == Some(async_nats::StatusCode::NO_RESPONDERS) {
                return Some(Err(AskError::NoResponders));
            }
            // The inbox is the subject the answer was signed for.
            if msg.subject.as_str() != answers.inbox {
                continue;
            }
            if let Some(sender) = self.verified(&msg) {
                return Some(Ok((sender, msg)));
            }
        }
    }

    /// The next verified answer from `node` only; another node's is dropped as not the owner's.
    pub(crate) async fn answer_from(
        &self,
        answers: &mut Answers,
        node: &str,
    ) -> Option<Result<Message, AskError>> {
        loop {
            match self.next_answer(answers).await? {
                Ok((sender, msg)) if sender.node == node => return Some(Ok(msg)),
                Ok((sender, msg)) => {
                    self.dropped(Dropped::NotOwner, &msg.subject, Some(&sender.node));
                }
                Err(e) => return Some(Err(e)),
            }
        }
    }

    /// Answers a request on its reply subject, signed.
    pub(crate) async fn answer_signed(
        &self,
        reply_to: async_nats::Subject,
        payload: Bytes,
    ) -> Result<(), async_nats::PublishError> {
        let headers = self.key.sign(&reply_to, None, &self.node_id, &payload);
        self.nats
            .publish_with_headers(reply_to, headers, payload)
            .await
    }
}
