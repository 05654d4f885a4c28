//! Every message a node puts on the bus is signed with the fleet's secret (`[cluster]
//! secret_env`), and every message a node acts on or passes on is verified first, whatever the
//! NATS server lets its clients do: a client of the bus without the secret can neither forge an
//! event, a control request or an answer, nor replay one past [`MAX_AGE`].
//!
//! The signature is HMAC-SHA256 over the subject, the reply subject (so that a captured request
//! cannot be sent again with the answer going elsewhere), the sending node, the time of sending
//! and the payload, each of the first four prefixed with its length so that no two messages sign
//! the same bytes. It travels in NATS headers, beside the payload, which stays as it was (an
//! event's SSE frame, passed on to clients as it came).

use async_nats::HeaderMap;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The sending node's id.
const NODE: &str = "Elfgate-Node";
/// When the message was sent, in milliseconds since the Unix epoch (the sender's clock).
const SENT: &str = "Elfgate-Sent";
/// The signature, in hex.
const SIGNATURE: &str = "Elfgate-Signature";

/// How old a message may be (or how far ahead of this node's clock) and still be taken: NATS
/// delivers in milliseconds, and a client that buffered messages while NATS was away sends them
/// when it is back, so this bounds how long a captured message can be replayed, not delivery.
/// The nodes' clocks must agree to well within it (NTP).
pub(crate) const MAX_AGE: Duration = Duration::from_secs(30);

/// The fewest bytes a fleet's secret may have.
pub const MIN_SECRET_BYTES: usize = 32;

/// The fleet's key: an HMAC-SHA256 keyed once with the secret, cloned for each message.
#[derive(Clone)]
pub(crate) struct BusKey {
    mac: Hmac<Sha256>,
}

/// Why a message was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rejected {
    /// It carries no signature, or headers that are not ours.
    Unsigned,
    /// The signature does not match: not signed with the fleet's secret, or changed on the way.
    Forged,
    /// Older than [`MAX_AGE`], or from too far in the future.
    Stale,
}

impl Rejected {
    /// The reason as a word, for the log and the metric's label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Rejected::Unsigned => "unsigned",
            Rejected::Forged => "bad_signature",
            Rejected::Stale => "stale",
        }
    }
}

/// A message's verified sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sender {
    /// The node that signed it.
    pub(crate) node: String,
    /// When it says it was sent (milliseconds since the Unix epoch).
    pub(crate) sent_ms: u64,
}

/// Milliseconds since the Unix epoch now.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl BusKey {
    /// The key of `secret`; None for one HMAC cannot take (none: it takes any length).
    pub(crate) fn new(secret: &[u8]) -> Option<Self> {
        Hmac::<Sha256>::new_from_slice(secret)
            .ok()
            .map(|mac| BusKey { mac })
    }

    fn mac(&self, subject: &str, reply: Option<&str>, node: &str, sent_ms: u64) -> Hmac<Sha256> {
        let mut mac = self.mac.clone();
        let sent = sent_ms.to_string();
        for part in [subject, reply.unwrap_or(""), node, &sent] {
            mac.update(&u32::try_from(part.len()).unwrap_or(u32::MAX).to_be_bytes());
            mac.update(part.as_bytes());
        }
        mac
    }

    /// The headers that sign `payload` sent by `node` on `subject` (with `reply`, for a request).
    pub(crate) fn sign(
        &self,
        subject: &str,
        reply: Option<&str>,
        node: &str,
        payload: &[u8],
    ) -> HeaderMap {
        let sent_ms = now_ms();
        let mut mac = self.mac(subject, reply, node, sent_ms);
        mac.update(payload);
        let mut headers = HeaderMap::new();
        headers.insert(NODE, node);
        headers.insert(SENT, sent_ms.to_string());
        headers.insert(SIGNATURE, hex::encode(mac.finalize().into_bytes()));
        headers
    }

    /// The sender of a message, if it was signed with the fleet's secret for its subject and
    /// reply subject, and sent within [`MAX_AGE`] of now.
    pub(crate) fn verify(
        &self,
        subject: &str,
        reply: Option<&str>,
        headers: Option<&HeaderMap>,
        payload: &[u8],
    ) -> Result<Sender, Rejected> {
        let headers = headers.ok_or(Rejected::Unsigned)?;
        let text = |name: &str| {
            headers
                .get(name)
                .map(|v| AsRef::<str>::as_ref(v).to_string())
        };
        let (Some(node), Some(sent), Some(signature)) = (text(NODE), text(SENT), text(SIGNATURE))
        else {
            return Err(Rejected::Unsigned);
        };
        let sent_ms: u64 = sent.parse().map_err(|_| Rejected::Unsigned)?;
        let signature = hex::decode(signature).map_err(|_| Rejected::Unsigned)?;
        let mut mac = self.mac(subject, reply, &node, sent_ms);
        mac.update(payload);
        // Constant time: the comparison says nothing of how much of a guess was right.
        mac.verify_slice(&signature).map_err(|_| Rejected::Forged)?;
        let max = u64::try_from(MAX_AGE.as_millis()).unwrap_or(u64::MAX);
        if now_ms().abs_diff(sent_ms) > max {
            return Err(Rejected::Stale);
        }
        Ok(Sender { node, sent_ms })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_message_verifies_and_any_change_does_not() {
        let key = BusKey::new(b"0123456789abcdef0123456789abcdef").unwrap();
        let headers = key.sign("elfgate.f.events.s", None, "a", b"payload");
        let sender = key
            .verify("elfgate.f.events.s", None, Some(&headers), b"payload")
            .unwrap();
        assert_eq!(sender.node, "a");
        assert_eq!(
            key.verify("elfgate.f.events.t", None, Some(&headers), b"payload"),
            Err(Rejected::Forged)
        );
        assert_eq!(
            key.verify(
                "elfgate.f.events.s",
                Some("inbox"),
                Some(&headers),
                b"payload"
            ),
            Err(Rejected::Forged)
        );
        assert_eq!(
            key.verify("elfgate.f.events.s", None, Some(&headers), b"payloaD"),
            Err(Rejected::Forged)
        );
        assert_eq!(
            key.verify("elfgate.f.events.s", None, None, b"payload"),
            Err(Rejected::Unsigned)
        );
        let other = BusKey::new(b"another secret of the same length!").unwrap();
        assert_eq!(
            other.verify("elfgate.f.events.s", None, Some(&headers), b"payload"),
            Err(Rejected::Forged)
        );
        // Another node's name in the headers, with the same signature.
        let mut renamed = headers;
        renamed.insert(NODE, "b");
        assert_eq!(
            key.verify("elfgate.f.events.s", None, Some(&renamed), b"payload"),
            Err(Rejected::Forged)
        );
    }

    #[test]
    fn an_old_message_is_stale() {
        let key = BusKey::new(b"0123456789abcdef0123456789abcdef").unwrap();
        let old = now_ms() - 2 * u64::try_from(MAX_AGE.as_millis()).unwrap();
        let mut mac = key.mac("s", None, "a", old);
        mac.update(b"p");
        let mut headers = HeaderMap::new();
        headers.insert(NODE, "a");
        headers.insert(SENT, old.to_string());
        headers.insert(SIGNATURE, hex::encode(mac.finalize().into_bytes()));
        assert_eq!(
            key.verify("s", None, Some(&headers), b"p"),
            Err(Rejected::Stale)
        );
    }
}
