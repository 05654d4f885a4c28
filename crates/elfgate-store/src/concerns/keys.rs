//! API keys: one row per key, found by its public id (never by scanning), holding the SHA-256 of
//! its secret, never the secret.

use crate::StoreResult;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use elfgate_core::{PrincipalRole, Scopes};

/// One stored API key.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredKey {
    /// Its public id (the `<id>` of `egk_<id>_<secret>`): the primary key.
    pub id: String,
    /// What its creator called it.
    pub name: String,
    /// The user it acts for.
    pub user: String,
    /// That user's team.
    pub team: String,
    /// What it may do.
    pub role: PrincipalRole,
    /// How far it reaches, within its role.
    pub scopes: Scopes,
    /// The SHA-256 of its secret, in lowercase hex.
    pub secret_hash: String,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it stops working; None: never.
    pub expires_at: Option<DateTime<Utc>>,
    /// When it was revoked; None: it was not.
    pub revoked_at: Option<DateTime<Utc>>,
    /// When it was last created, changed or revoked.
    pub updated_at: DateTime<Utc>,
}

/// A change to a key: each field given replaces the stored one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeyChange {
    /// A new name.
    pub name: Option<String>,
    /// A new role.
    pub role: Option<PrincipalRole>,
    /// New scopes (the whole object).
    pub scopes: Option<Scopes>,
    /// A new expiry: `Some(None)` makes it never expire.
    pub expires_at: Option<Option<DateTime<Utc>>>,
}

/// Storing and reading API keys.
#[async_trait]
pub trait KeyStore: Send + Sync {
    /// Stores a new key; a key of the same id already stored is a
    /// [`StoreError::Constraint`](crate::StoreError::Constraint).
    async fn create_key(&self, key: &StoredKey) -> StoreResult<()>;
    /// The key of public id `id`, revoked or not.
    async fn get_key(&self, id: &str) -> StoreResult<Option<StoredKey>>;
    /// Every key, revoked ones included, oldest first.
    async fn list_keys(&self) -> StoreResult<Vec<StoredKey>>;
    /// Applies `change` to key `id` and returns it; None when there is no such key, or it is
    /// revoked (a revoked key stays as it was revoked).
    async fn update_key(&self, id: &str, change: &KeyChange) -> StoreResult<Option<StoredKey>>;
    /// Revokes key `id` (keeping the time of its first revocation) and returns it; None when
    /// there is no such key.
    async fn revoke_key(&self, id: &str) -> StoreResult<Option<StoredKey>>;
}
