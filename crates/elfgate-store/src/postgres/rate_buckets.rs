//! The token buckets of rate limits that a fleet's nodes share (docs/spend.md, "Rate limits"):
//! one row per bucket, refilled and taken from by one statement under the row's lock, so that
//! nodes taking at once are served one after the other and none overshoots.

use super::PgStore;
use crate::StoreResult;

/// A bucket after a take.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketLevel {
    /// Whether the tokens asked for were taken.
    pub granted: bool,
    /// What is left (may be below zero after a charge larger than what was left).
    pub tokens: f64,
}

/// Takes `$3` tokens from bucket `$1` of capacity `$2` (its limit per window of `$5` seconds)
/// when its refilled level holds them (or whatever it holds when `$4`, a charge). The refilled
/// level is what the row held plus `$2 / $5` each second since it was last touched (the
/// database's clock, the same for every node), at most its capacity; written out three times
/// because a statement's SET cannot name an expression.
const TAKE: &str = "INSERT INTO rate_buckets (key, tokens, updated_at, granted) \
     VALUES ($1, $2::float8 - $3::float8, now(), TRUE) \
     ON CONFLICT (key) DO UPDATE SET \
       tokens = LEAST($2::float8, rate_buckets.tokens + EXTRACT(EPOCH FROM (now() - \
                  rate_buckets.updated_at))::float8 * $2::float8 / $5::float8) \
                - CASE WHEN $4 OR LEAST($2::float8, rate_buckets.tokens + EXTRACT(EPOCH FROM \
                  (now() - rate_buckets.updated_at))::float8 * $2::float8 / $5::float8) >= $3::float8 \
                  THEN $3::float8 ELSE 0 END, \
       granted = $4 OR LEAST($2::float8, rate_buckets.tokens + EXTRACT(EPOCH FROM (now() - \
                  rate_buckets.updated_at))::float8 * $2::float8 / $5::float8) >= $3::float8, \
       updated_at = now() \
     RETURNING tokens, granted";

impl PgStore {
    /// Takes `cost` tokens from the bucket `key` of capacity `per_window` (refilled over
    /// `window_secs`) when it holds them (`force`: takes them even when it does not, leaving a debt:
    /// a charge for tokens already spent). One round trip.
    pub async fn take_rate_tokens(
        &self,
        key: &str,
        per_window: f64,
        window_secs: f64,
        cost: f64,
        force: bool,
    ) -> StoreResult<BucketLevel> {
        // The caller never asks for more than the capacity, so a new bucket always grants.
        let (tokens, granted): (f64, bool) = sqlx::query_as(TAKE)
            .bind(key)
            .bind(per_window)
            .bind(cost)
            .bind(force)
            .bind(window_secs)
            .fetch_one(&self.pool)
            .await?;
        Ok(BucketLevel { granted, tokens })
    }

    /// Puts back `amount` tokens taken from `key` (a request refused by another rule, an
    /// estimate larger than what was spent), at most up to its capacity.
    pub async fn give_back_rate_tokens(
        &self,
        key: &str,
        per_window: f64,
        amount: f64,
    ) -> StoreResult<()> {
        sqlx::query(
            "UPDATE rate_buckets SET tokens = LEAST($2::float8, tokens + $3::float8) \
             WHERE key = $1",
        )
        .bind(key)
        .bind(per_window)
        .bind(amount)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}
