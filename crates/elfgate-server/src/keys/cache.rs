//! Checking an API key: its row found by public id through a per-node cache with a short
//! lifetime, its secret's hash compared in constant time, its expiry and revocation checked.

use super::{constant_time_eq, parse_key, secret_hash};
use dashmap::DashMap;
use elfgate_core::Principal;
use elfgate_store::{KeyStore, StoreError, StoredKey};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Keys kept at most: past this, expired copies are dropped, and while it is still full a key
/// read is used without being kept, so that the cache cannot grow without bound.
const MAX_CACHED_KEYS: usize = 100_000;

/// Why a key was refused. The client reads one message whatever the reason (a key must not learn
/// whether an id exists); the reason is for the audit and the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyRefusal {
    /// Not of the form `egk_<id>_<secret>`.
    Malformed,
    /// No key of that id.
    Unknown,
    /// The id's secret is another.
    WrongSecret,
    /// Past its expiry.
    Expired,
    /// Revoked.
    Revoked,
}

impl KeyRefusal {
    /// The reason's name, for the audit and the log.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyRefusal::Malformed => "malformed_key",
            KeyRefusal::Unknown => "unknown_key",
            KeyRefusal::WrongSecret => "wrong_secret",
            KeyRefusal::Expired => "expired_key",
            KeyRefusal::Revoked => "revoked_key",
        }
    }
}

/// A key's check: refused, or the store could not be asked (which refuses too, never opens).
#[derive(Debug)]
pub enum KeyCheckError {
    /// The key is refused, for this reason; the public id when the bearer had one.
    Refused(KeyRefusal, Option<String>),
    /// The store did not answer.
    Store(StoreError),
}

/// A key as read from the store, and when.
struct Cached {
    read_at: Instant,
    key: Arc<StoredKey>,
}

/// The node's API keys: read from the store by public id, kept for `lifetime`.
pub struct KeyAuth {
    store: Arc<dyn KeyStore>,
    lifetime: Duration,
    cache: DashMap<String, Cached>,
    /// Grows with every [`KeyAuth::forget`]: a read that began before one is not kept, so that
    /// a key changed while it was being read is not cached as it was.
    forgotten: AtomicU64,
}

impl KeyAuth {
    /// Keys of `store`, each kept `lifetime` after it is read.
    pub fn new(store: Arc<dyn KeyStore>, lifetime: Duration) -> Self {
        KeyAuth {
            store,
            lifetime,
            cache: DashMap::new(),
            forgotten: AtomicU64::new(0),
        }
    }

    /// The principal of API key `bearer`, or why it is refused.
    pub async fn authenticate(&self, bearer: &str) -> Result<Principal, KeyCheckError> {
        let Some((id, secret)) = parse_key(bearer) else {
            return Err(KeyCheckError::Refused(KeyRefusal::Malformed, None));
        };
        let refused = |why| KeyCheckError::Refused(why, Some(id.to_owned()));
        let key = self
            .lookup(id)
            .await
            .map_err(KeyCheckError::Store)?
            .ok_or_else(|| refused(KeyRefusal::Unknown))?;
        // Compared in time that does not depend on where the hashes differ.
        if !constant_time_eq(secret_hash(secret).as_bytes(), key.secret_hash.as_bytes()) {
            return Err(refused(KeyRefusal::WrongSecret));
        }
        if key.revoked_at.is_some() {
            return Err(refused(KeyRefusal::Revoked));
        }
        if key.expires_at.is_some_and(|at| at <= chrono::Utc::now()) {
            return Err(refused(KeyRefusal::Expired));
        }
        Ok(Principal {
            user: key.user.clone(),
            team: key.team.clone(),
            role: key.role,
            key_id: Some(key.id.clone()),
            scopes: key.scopes.clone(),
        })
    }

    /// Drops what this node keeps of key `id` (created, changed or revoked here or elsewhere).
    pub fn forget(&self, id: &str) {
        self.forgotten.fetch_add(1, Ordering::SeqCst);
        self.cache.remove(id);
    }

    /// Key `id`, from the cache while fresh, else from the store.
    async fn lookup(&self, id: &str) -> Result<Option<Arc<StoredKey>>, StoreError> {
        if let Some(hit) = self.cache.get(id)
            && hit.read_at.elapsed() < self.lifetime
        {
            return Ok(Some(hit.key.clone()));
        }
        let read_at = Instant::now();
        let epoch = self.forgotten.load(Ordering::SeqCst);
        let Some(key) = self.store.get_key(id).await? else {
            self.cache.remove(id);
            return Ok(None);
        };
        let key = Arc::new(key);
        if self.cache.len() >= MAX_CACHED_KEYS {
            // Expired copies are otherwise dropped only when their key is read again.
            let lifetime = self.lifetime;
            self.cache.retain(|_, c| c.read_at.elapsed() < lifetime);
        }
        if !self.lifetime.is_zero() && self.cache.len() < MAX_CACHED_KEYS {
            self.cache.insert(
                id.to_owned(),
                Cached {
                    read_at,
                    key: key.clone(),
                },
            );
        }
        // Checked after the insert, so that a forget at any moment of the read undoes it.
        if self.forgotten.load(Ordering::SeqCst) != epoch || self.lifetime.is_zero() {
            self.cache.remove(id);
        }
        Ok(Some(key))
    }
}
