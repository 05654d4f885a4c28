//! What both event log writers (SQLite's `writer`, PostgreSQL's `postgres::log_writer`) share
//! about a batch: the seq reservation changes it carries and the backoff of a failed commit.

use elfgate_core::SessionId;
use std::time::Duration;

/// A change to a session's seq reservation, applied in the batch's transaction, in order.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SeqUpdate {
    Reserve(SessionId, u64),
    Release(SessionId, u64),
}

impl SeqUpdate {
    /// The session whose reservation changes.
    pub(crate) fn session(self) -> SessionId {
        match self {
            SeqUpdate::Reserve(s, _) | SeqUpdate::Release(s, _) => s,
        }
    }
}

/// The first pause before a failed log commit is retried...
pub(crate) const FIRST_RETRY_DELAY: Duration = Duration::from_millis(50);
/// ...and the longest: a full disk may take minutes to be freed, a restarting server seconds,
/// and each attempt costs little.
pub(crate) const MAX_RETRY_DELAY: Duration = Duration::from_secs(1);

/// The pause after `previous` (None: the first failure).
pub(crate) fn next_retry_delay(previous: Option<Duration>) -> Duration {
    previous.map_or(FIRST_RETRY_DELAY, |d| (d * 2).min(MAX_RETRY_DELAY))
}
