//! The event log: what a session's bus published, read back for replay.

use crate::StoreResult;
use async_trait::async_trait;
use elfgate_core::{EventType, SessionId};

/// One logged event, as read back for replay.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    /// Its seq.
    pub seq: u64,
    /// Its type.
    pub event_type: EventType,
    /// The whole envelope as JSON.
    pub json: String,
}

/// Reading the event log and reserving its seqs (events are written through the store's log
/// sender).
#[async_trait]
pub trait EventLog: Send + Sync {
    /// The highest seq logged for a session (0 when none).
    async fn last_seq(&self, session_id: SessionId) -> StoreResult<u64>;
    /// Opens a seq range for a session's bus: returns `(last, reserved)` where `last` is the larger of
    /// the highest logged seq and the stored reservation (a crash may have handed out seqs that never
    /// reached the log), and `reserved` = `last` + a block, stored before this returns.
    async fn open_seq_range(&self, session_id: SessionId) -> StoreResult<(u64, u64)>;
    /// Logged events with seq > `after`, in order, at most `limit`.
    async fn events_after(
        &self,
        session_id: SessionId,
        after: u64,
        limit: u32,
    ) -> StoreResult<Vec<StoredEvent>>;
}
