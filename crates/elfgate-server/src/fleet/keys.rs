//! API keys across the fleet: a node that changes or revokes a key says so on the bus (the key's
//! public id, signed), and every node drops its cached copy, so that the key's next request there
//! reads the store. While the bus is away, the cache's lifetime (`[auth] key_cache_ms`, at most
//! 2 s) bounds how long a node keeps acting on the old key. A key just created needs no word: no
//! node keeps a key it did not find.

use super::Fleet;
use crate::keys::KeyAuth;
use bytes::Bytes;
use futures_util::StreamExt;
use std::sync::Arc;

impl Fleet {
    /// The subject key changes are announced on.
    fn keys_subject(&self) -> String {
        format!("{}.keys", self.subjects)
    }

    /// Tells every node that key `id` changed. A failure is logged, not returned: the change is
    /// stored, and the other nodes see it when their cached copy expires.
    pub(crate) async fn announce_key_change(&self, id: &str) {
        let sent = self
            .publish_signed(self.keys_subject(), Bytes::from(id.to_owned()))
            .await;
        if let Err(e) = sent {
            tracing::warn!(key_id = id, error = %e, "cannot tell the fleet of a key's change: the other nodes see it when their cached copy expires");
        }
    }
}

/// Drops the cached copy of every key another node says it changed, until NATS is gone for good.
pub(crate) async fn forget_changed_keys(fleet: Arc<Fleet>, keys: Arc<KeyAuth>) {
    let mut changes = match fleet.nats.subscribe(fleet.keys_subject()).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot hear of other nodes' key changes: NATS refused; the key cache's lifetime bounds them");
            return;
        }
    };
    while let Some(msg) = changes.next().await {
        // Only a node of the fleet may say so (anyone else could only make keys be read again).
        if fleet.verified(&msg).is_none() {
            continue;
        }
        if let Ok(id) = std::str::from_utf8(&msg.payload) {
            keys.forget(id);
        }
    }
}
