//! Per-provider limits of the gateway's front doors: at most `max_concurrent` requests running
//! on a provider, at most `requests_per_minute` started (a token bucket), and the requests over
//! either waiting in arrival order, at most `max_queued` of them; past that, 429.

use crate::error::ApiError;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// The limits of one provider, as configured.
#[derive(Debug, Clone, Copy, Default)]
pub struct LimitConfig {
    /// Requests running at once (None: no limit).
    pub max_concurrent: Option<usize>,
    /// Requests started per minute (None: no limit).
    pub requests_per_minute: Option<u32>,
    /// Requests that may wait for either limit.
    pub max_queued: usize,
}

/// A token bucket holding up to a minute's requests, refilled continuously.
#[derive(Debug)]
struct Bucket {
    capacity: f64,
    tokens: f64,
    per_sec: f64,
    last: Instant,
}

impl Bucket {
    fn new(rpm: u32) -> Self {
        let capacity = f64::from(rpm.max(1));
        Bucket {
            capacity,
            tokens: capacity,
            per_sec: capacity / 60.0,
            last: Instant::now(),
        }
    }

    fn refill(&mut self) {
        let now = Instant::now();
        let gained = now.duration_since(self.last).as_secs_f64() * self.per_sec;
        self.tokens = (self.tokens + gained).min(self.capacity);
        self.last = now;
    }

    /// Takes a token, waiting for one if need be.
    async fn take(&mut self) {
        self.refill();
        if self.tokens < 1.0 {
            let wait = (1.0 - self.tokens) / self.per_sec;
            tokio::time::sleep(Duration::from_secs_f64(wait)).await;
            self.refill();
        }
        self.tokens = (self.tokens - 1.0).max(0.0);
    }
}

/// One provider's limiter.
#[derive(Debug)]
struct Limiter {
    running: Option<Arc<Semaphore>>,
    // Held while a request waits for its token: tokio's mutex is fair, so the waiters are served
    // in arrival order.
    bucket: Option<Mutex<Bucket>>,
    waiting: AtomicUsize,
    max_queued: usize,
}

/// Held while a request runs; dropping it frees its place.
#[derive(Debug)]
pub struct Permit {
    _running: Option<OwnedSemaphorePermit>,
}

struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Limiter {
    async fn acquire(&self, provider: &str) -> Result<Permit, ApiError> {
        let free_now = self
            .running
            .as_ref()
            .is_none_or(|s| s.available_permits() > 0);
        let ahead = self.waiting.fetch_add(1, Ordering::SeqCst);
        let waiting = Waiting(&self.waiting);
        if ahead >= self.max_queued && !(free_now && ahead == 0) {
            return Err(ApiError::ProviderQueueFull {
                provider: provider.to_string(),
                max_queued: self.max_queued,
            });
        }
        let running = match &self.running {
            Some(s) => Some(
                s.clone()
                    .acquire_owned()
                    .await
                    .map_err(|_| ApiError::shutting_down())?,
            ),
            None => None,
        };
        if let Some(bucket) = &self.bucket {
            bucket.lock().await.take().await;
        }
        drop(waiting);
        Ok(Permit { _running: running })
    }
}

/// The limiters of the providers that have limits.
#[derive(Debug, Default, Clone)]
pub struct ProviderLimits {
    limiters: Arc<BTreeMap<String, Limiter>>,
}

impl ProviderLimits {
    /// Limiters for the providers with a limit.
    pub fn new(configs: impl IntoIterator<Item = (String, LimitConfig)>) -> Self {
        let limiters = configs
            .into_iter()
            .filter(|(_, c)| c.max_concurrent.is_some() || c.requests_per_minute.is_some())
            .map(|(name, c)| {
                let limiter = Limiter {
                    running: c.max_concurrent.map(|n| Arc::new(Semaphore::new(n.max(1)))),
                    bucket: c.requests_per_minute.map(|r| Mutex::new(Bucket::new(r))),
                    waiting: AtomicUsize::new(0),
                    max_queued: c.max_queued,
                };
                (name, limiter)
            })
            .collect();
        ProviderLimits {
            limiters: Arc::new(limiters),
        }
    }

    /// Waits for a place on `provider`; 429 when too many already wait.
    pub async fn acquire(&self, provider: &str) -> Result<Option<Permit>, ApiError> {
        match self.limiters.get(provider) {
            Some(l) => l.acquire(provider).await.map(Some),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(c: LimitConfig) -> ProviderLimits {
        ProviderLimits::new([("p".to_string(), c)])
    }

    #[tokio::test]
    async fn past_the_queue_bound_is_429_and_a_freed_place_goes_to_the_first_waiter() {
        let l = limits(LimitConfig {
            max_concurrent: Some(1),
            requests_per_minute: None,
            max_queued: 1,
        });
        let first = l.acquire("p").await.unwrap();
        let l2 = l.clone();
        let second = tokio::spawn(async move { l2.acquire("p").await.map(|_| ()) });
        // Wait until the second one queues.
        while l.limiters["p"].waiting.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        let third = l.acquire("p").await.unwrap_err();
        assert_eq!(third.status(), axum::http::StatusCode::TOO_MANY_REQUESTS);
        drop(first);
        second.await.unwrap().unwrap();
        assert!(l.acquire("other").await.unwrap().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn the_bucket_holds_a_minutes_worth_and_then_makes_requests_wait() {
        let l = limits(LimitConfig {
            max_concurrent: None,
            requests_per_minute: Some(2),
            max_queued: 4,
        });
        let start = Instant::now();
        l.acquire("p").await.unwrap();
        l.acquire("p").await.unwrap();
        assert!(start.elapsed() < Duration::from_secs(1));
        // The third waits for the refill: one token per 30 s (time is paused, so this is exact
        // up to the test's own steps, not a wall-clock wait).
        l.acquire("p").await.unwrap();
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_secs(30) && waited < Duration::from_secs(31),
            "{waited:?}"
        );
    }

    #[tokio::test]
    async fn waiters_get_their_places_in_arrival_order() {
        let l = limits(LimitConfig {
            max_concurrent: Some(1),
            requests_per_minute: None,
            max_queued: 8,
        });
        let first = l.acquire("p").await.unwrap();
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for i in 0..4 {
            let (l2, order2) = (l.clone(), order.clone());
            waiters.push(tokio::spawn(async move {
                let permit = l2.acquire("p").await.unwrap();
                order2.lock().unwrap().push(i);
                drop(permit);
            }));
            // The next one arrives only once this one waits.
            while l.limiters["p"].waiting.load(Ordering::SeqCst) < i + 1 {
                tokio::task::yield_now().await;
            }
        }
        drop(first);
        for w in waiters {
            w.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3]);
    }
}
