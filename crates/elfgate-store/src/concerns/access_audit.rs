//! The access audit: what was done with API keys and which requests were refused, newest last.

use crate::StoreResult;
use async_trait::async_trait;
use chrono::{DateTime, Utc};

/// One entry of the access audit. Never holds a secret.
#[derive(Debug, Clone, PartialEq)]
pub struct AccessEvent {
    /// When it happened.
    pub at: DateTime<Utc>,
    /// What happened: `key_created`, `key_changed`, `key_revoked` or `refused`.
    pub kind: String,
    /// Who did it (the user of the principal), when known.
    pub actor: Option<String>,
    /// The public id of the key it concerns (the one changed, or the one refused).
    pub key_id: Option<String>,
    /// The request's method and path.
    pub route: Option<String>,
    /// The status a refusal was answered with.
    pub status: Option<u16>,
    /// Why a request was refused.
    pub reason: Option<String>,
    /// What changed, as JSON.
    pub detail: Option<serde_json::Value>,
}

/// An entry as stored, with its place in the audit.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredAccessEvent {
    /// Its id: later entries have greater ones.
    pub id: i64,
    /// The entry.
    pub event: AccessEvent,
}

/// Writing and reading the access audit.
#[async_trait]
pub trait AccessAudit: Send + Sync {
    /// Appends `events`, in order, in one transaction.
    async fn append_access_events(&self, events: &[AccessEvent]) -> StoreResult<()>;
    /// The latest `limit` entries with an id below `before` (None: the latest), newest first.
    async fn access_events(
        &self,
        before: Option<i64>,
        limit: u32,
    ) -> StoreResult<Vec<StoredAccessEvent>>;
}
