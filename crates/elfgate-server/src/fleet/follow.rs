//! Following a session another node runs: one NATS subscription per session followed on this
//! node, shared by every client following it here, and passed on through a bounded channel.
//!
//! A NATS subscription keeps what its reader has not taken yet (up to 65,536 messages by
//! default): one per client let each client that stopped reading hold that much. Here one task per
//! followed session reads its subscription as the messages come and hands each to the session's
//! clients through a broadcast channel of [`SUBSCRIBER_BUFFER`] messages, as the owner's bus does:
//! a client that falls that far behind is sent `reset` and disconnected (logged and counted), and
//! nobody else waits for it.

use super::Fleet;
use elfgate_core::sync::lock;
use elfgate_core::{SUBSCRIBER_BUFFER, SessionId};
use futures_util::StreamExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use tokio::sync::broadcast;

/// The sessions this node's clients follow over NATS.
#[derive(Debug, Default)]
pub(crate) struct Follows {
    followed: Mutex<HashMap<SessionId, Weak<Followed>>>,
}

/// One followed session: its subscription's reader and the channel to its clients.
#[derive(Debug)]
struct Followed {
    to_clients: broadcast::Sender<async_nats::Message>,
    /// The subscription ended (the NATS client closed for good): a new client subscribes anew.
    ended: Arc<AtomicBool>,
    reader: tokio::task::AbortHandle,
}

impl Drop for Followed {
    fn drop(&mut self) {
        // The last client left: the subscription goes with its reader.
        self.reader.abort();
    }
}

/// A client's share of a followed session's subscription: the session's messages from the moment
/// it was taken.
#[derive(Debug)]
pub(crate) struct Following {
    rx: broadcast::Receiver<async_nats::Message>,
    _shared: Arc<Followed>,
}

impl Following {
    /// The next message: an error when this client fell more than the channel holds behind
    /// (`Lagged`), or when the subscription ended (`Closed`).
    pub(crate) async fn next(
        &mut self,
    ) -> Result<async_nats::Message, broadcast::error::RecvError> {
        self.rx.recv().await
    }
}

impl Follows {
    /// A share of the session's live subscription, if there is one.
    fn join(&self, session: SessionId) -> Option<Following> {
        let followed = lock(&self.followed);
        let shared = followed.get(&session)?.upgrade()?;
        if shared.ended.load(Ordering::Acquire) {
            return None;
        }
        Some(Following {
            rx: shared.to_clients.subscribe(),
            _shared: shared,
        })
    }

    /// Makes `sub` the session's subscription, unless another client's made meanwhile is live
    /// (then `sub` is dropped and that one is shared).
    fn start(&self, session: SessionId, sub: async_nats::Subscriber) -> Following {
        let mut followed = lock(&self.followed);
        if let Some(shared) = followed.get(&session).and_then(Weak::upgrade)
            && !shared.ended.load(Ordering::Acquire)
        {
            return Following {
                rx: shared.to_clients.subscribe(),
                _shared: shared,
            };
        }
        followed.retain(|_, f| f.strong_count() > 0);
        let (to_clients, rx) = broadcast::channel(SUBSCRIBER_BUFFER);
        let ended = Arc::new(AtomicBool::new(false));
        let reader = tokio::spawn(pass_on(sub, to_clients.clone(), ended.clone())).abort_handle();
        let shared = Arc::new(Followed {
            to_clients,
            ended,
            reader,
        });
        followed.insert(session, Arc::downgrade(&shared));
        Following {
            rx,
            _shared: shared,
        }
    }
}

/// Hands every message of `sub` to the session's clients as it comes (none there: dropped).
async fn pass_on(
    mut sub: async_nats::Subscriber,
    to_clients: broadcast::Sender<async_nats::Message>,
    ended: Arc<AtomicBool>,
) {
    while let Some(m) = sub.next().await {
        let _ = to_clients.send(m);
    }
    ended.store(true, Ordering::Release);
}

impl Fleet {
    /// Follows the session's events as its owner publishes them, from now on.
    pub(crate) async fn follow(
        &self,
        session: SessionId,
    ) -> Result<Following, async_nats::SubscribeError> {
        if let Some(f) = self.follows.join(session) {
            return Ok(f);
        }
        let sub = self.nats.subscribe(self.events_subject(session)).await?;
        Ok(self.follows.start(session, sub))
    }

    /// A client following another node's session fell more than [`SUBSCRIBER_BUFFER`] events
    /// behind: it is sent `reset` (counted and logged here).
    pub(crate) fn follower_lagged(&self, session: SessionId, missed: u64) {
        self.counts
            .follow_resets
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::warn!(%session, missed,
            "a client following another node's session fell too far behind: sent reset");
    }
}
