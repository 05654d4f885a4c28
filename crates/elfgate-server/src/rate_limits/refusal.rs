//! What a rate limit says to a caller: the refusal (429 with `Retry-After`) and the
//! `x-ratelimit-*` headers, under OpenAI's names, on refusals and on answers that went through.

use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use std::time::Duration;

/// Which of a rule's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// `requests_per_minute`.
    Requests,
    /// `tokens_per_minute`.
    Tokens,
    /// `concurrent_runs`.
    ConcurrentRuns,
}

impl Limit {
    /// The word of the `x-ratelimit-*-{word}` headers (none for concurrent runs: OpenAI has no
    /// such header).
    fn header_word(self) -> Option<&'static str> {
        match self {
            Limit::Requests => Some("requests"),
            Limit::Tokens => Some("tokens"),
            Limit::ConcurrentRuns => None,
        }
    }

    fn describe(self, allowed: u64, window_secs: u64) -> String {
        let per = match window_secs {
            60 => "per minute".to_string(),
            secs => format!("per {secs} s"),
        };
        match self {
            Limit::Requests => format!("{allowed} requests {per}"),
            Limit::Tokens => format!("{allowed} tokens {per}"),
            Limit::ConcurrentRuns => format!("{allowed} concurrent runs"),
        }
    }
}

/// Where a bucket stands after a take: its limit, what is left, and how long until it is full.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quota {
    /// The rule's limit.
    pub limit: u64,
    /// Whole tokens left.
    pub remaining: u64,
    /// Until the bucket is full again.
    pub reset: Duration,
}

impl Quota {
    /// The quota of a bucket of capacity `per_window`, refilled over `window_secs`, holding
    /// `tokens`.
    pub(super) fn of(per_window: u64, window_secs: u64, tokens: f64) -> Quota {
        Quota {
            limit: per_window,
            remaining: tokens.max(0.0).floor() as u64,
            reset: refill_time(per_window, window_secs, per_window as f64 - tokens),
        }
    }

    /// The tighter of two quotas: the one with fewer left.
    pub(super) fn tighter(self, other: Option<Quota>) -> Quota {
        match other {
            Some(o) if o.remaining < self.remaining => o,
            _ => self,
        }
    }

    /// Sets the `x-ratelimit-{limit,remaining,reset}-{word}` trio.
    pub fn write(&self, limit: Limit, headers: &mut HeaderMap) {
        let Some(word) = limit.header_word() else {
            return;
        };
        for (name, value) in [
            ("limit", self.limit.to_string()),
            ("remaining", self.remaining.to_string()),
            ("reset", openai_duration(self.reset)),
        ] {
            if let (Ok(name), Ok(value)) = (
                HeaderName::try_from(format!("x-ratelimit-{name}-{word}")),
                HeaderValue::try_from(value),
            ) {
                headers.insert(name, value);
            }
        }
    }
}

/// A request or model call refused by a rule.
#[derive(Debug, Clone, PartialEq)]
pub struct RateRefusal {
    /// The rule's scope (`team:NAME`, `user:NAME`, `key:ID`).
    pub scope: String,
    /// Which of its limits.
    pub limit: Limit,
    /// The bucket when it refused.
    pub quota: Quota,
    /// The seconds the rule's limits count over.
    pub window_secs: u64,
    /// When trying again may work.
    pub retry_after: Duration,
}

impl std::fmt::Display for RateRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rate limit of {}: {}; try again in {} s",
            self.scope,
            self.limit.describe(self.quota.limit, self.window_secs),
            retry_after_secs(self.retry_after)
        )
    }
}

impl RateRefusal {
    /// The rule and its limit, e.g. `team:research (1000 tokens per minute)`.
    pub fn rule(&self) -> String {
        format!(
            "{} ({})",
            self.scope,
            self.limit.describe(self.quota.limit, self.window_secs)
        )
    }

    /// `Retry-After` (whole seconds, at least 1) and the refused limit's header trio.
    pub fn write_headers(&self, headers: &mut HeaderMap) {
        headers.insert(
            header::RETRY_AFTER,
            HeaderValue::from(retry_after_secs(self.retry_after)),
        );
        self.quota.write(self.limit, headers);
    }
}

/// How long a bucket of capacity `per_window` refilled over `window_secs` takes to gain `missing`
/// tokens.
pub(super) fn refill_time(per_window: u64, window_secs: u64, missing: f64) -> Duration {
    let per_sec = per_window as f64 / window_secs as f64;
    Duration::from_secs_f64((missing / per_sec).clamp(0.0, 86_400.0))
}

/// Whole seconds, rounded up, at least 1: `Retry-After` has no fractions, and 0 would invite an
/// immediate retry that is refused again.
pub fn retry_after_secs(after: Duration) -> u64 {
    after.as_secs_f64().ceil().max(1.0) as u64
}

/// A duration as OpenAI writes its resets: `250ms`, `12s`, `1m30s`.
fn openai_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1_000 {
        return format!("{ms}ms");
    }
    let secs = d.as_secs_f64().ceil() as u64;
    match secs {
        0..60 => format!("{secs}s"),
        _ => format!("{}m{}s", secs / 60, secs % 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_carry_the_limit_what_is_left_and_the_reset_in_openais_format() {
        let mut headers = HeaderMap::new();
        let refusal = RateRefusal {
            scope: "team:t".into(),
            limit: Limit::Requests,
            quota: Quota::of(60, 60, 0.5),
            window_secs: 60,
            retry_after: Duration::from_millis(500),
        };
        refusal.write_headers(&mut headers);
        assert_eq!(headers["retry-after"], "1");
        assert_eq!(headers["x-ratelimit-limit-requests"], "60");
        assert_eq!(headers["x-ratelimit-remaining-requests"], "0");
        assert_eq!(headers["x-ratelimit-reset-requests"], "1m0s");
        assert_eq!(openai_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(openai_duration(Duration::from_secs(90)), "1m30s");
        assert!(refusal.to_string().contains("60 requests per minute"));
    }
}
