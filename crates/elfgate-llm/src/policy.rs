//! The retry schedule every engine uses: how many retries, and how long to wait before each.

use serde::Deserialize;
use std::time::Duration;

/// How the delay grows with the retry number `n` (1-based).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backoff {
    /// `base_delay × n`.
    #[default]
    Linear,
    /// `base_delay × 2^(n-1)`.
    Exponential,
}

/// Randomness that spreads out the retries of clients that failed at the same moment, so that
/// they do not all come back at once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Jitter {
    /// The scheduled delay exactly.
    #[default]
    None,
    /// Uniform between zero and the scheduled delay.
    Full,
    /// Half the scheduled delay, plus uniform up to the other half.
    Equal,
}

/// How often and how patiently to retry an LLM call.
#[derive(Clone, Debug)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 = no retry).
    pub max_retries: u32,
    /// The unit of the schedule (see [`Backoff`]).
    pub base_delay: Duration,
    /// Upper bound of any delay, Retry-After included (see [`RetryPolicy::delay`]).
    pub max_delay: Duration,
    /// How the delay grows.
    pub backoff: Backoff,
    /// Randomness applied to the scheduled delay.
    pub jitter: Jitter,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 2,
            base_delay: Duration::from_millis(1000),
            max_delay: Duration::from_secs(30),
            backoff: Backoff::Linear,
            jitter: Jitter::None,
        }
    }
}

impl RetryPolicy {
    /// The scheduled delay before retry `attempt` (1-based), capped at `max_delay`, no jitter.
    pub fn scheduled(&self, attempt: u32) -> Duration {
        let factor = match self.backoff {
            Backoff::Linear => attempt,
            Backoff::Exponential => 2u32.saturating_pow(attempt.saturating_sub(1)),
        };
        self.base_delay.saturating_mul(factor).min(self.max_delay)
    }

    /// [`Self::scheduled`] with the jitter applied; `unit` yields uniform values in [0, 1] and is
    /// only called when there is jitter.
    pub fn jittered(&self, attempt: u32, unit: &mut dyn FnMut() -> f64) -> Duration {
        let d = self.scheduled(attempt);
        let mut u = || {
            let x = unit();
            if x.is_finite() {
                x.clamp(0.0, 1.0)
            } else {
                0.0
            }
        };
        match self.jitter {
            Jitter::None => d,
            Jitter::Full => d.mul_f64(u()),
            Jitter::Equal => {
                let half = d / 2;
                half + (d - half).mul_f64(u())
            }
        }
    }

    /// The wait before retry `attempt` after a failure whose server asked for `retry_after`:
    /// the jittered schedule, raised to Retry-After (never less than the server asked for).
    /// `None` when Retry-After is longer than `max_delay`: retrying sooner would only be refused
    /// again, and waiting longer would exceed what the configuration allows, so the call fails.
    pub fn delay(
        &self,
        attempt: u32,
        retry_after: Option<Duration>,
        unit: &mut dyn FnMut() -> f64,
    ) -> Option<Duration> {
        match retry_after {
            Some(ra) if ra > self.max_delay => None,
            Some(ra) => Some(self.jittered(attempt, unit).max(ra)),
            None => Some(self.jittered(attempt, unit)),
        }
    }

    /// Whether a failure with this Retry-After may be retried at all (see [`Self::delay`]).
    pub fn accepts_retry_after(&self, retry_after: Option<Duration>) -> bool {
        retry_after.is_none_or(|ra| ra <= self.max_delay)
    }
}

/// The jitter source of real calls.
pub fn random_unit() -> f64 {
    fastrand::f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn policy(backoff: Backoff, jitter: Jitter) -> RetryPolicy {
        RetryPolicy {
            max_retries: 10,
            base_delay: ms(1000),
            max_delay: ms(5000),
            backoff,
            jitter,
        }
    }

    #[test]
    fn the_default_is_the_linear_schedule_without_jitter() {
        let p = RetryPolicy::default();
        let mut never = || -> f64 { panic!("no jitter, no randomness") };
        let got: Vec<Duration> = (1..=3).map(|n| p.jittered(n, &mut never)).collect();
        assert_eq!(got, [ms(1000), ms(2000), ms(3000)]);
    }

    #[test]
    fn schedules_grow_and_stop_at_the_cap() {
        let lin = policy(Backoff::Linear, Jitter::None);
        let exp = policy(Backoff::Exponential, Jitter::None);
        let l: Vec<u128> = (1..=7).map(|n| lin.scheduled(n).as_millis()).collect();
        let e: Vec<u128> = (1..=7).map(|n| exp.scheduled(n).as_millis()).collect();
        assert_eq!(l, [1000, 2000, 3000, 4000, 5000, 5000, 5000]);
        assert_eq!(e, [1000, 2000, 4000, 5000, 5000, 5000, 5000]);
        // No overflow far out.
        assert_eq!(exp.scheduled(u32::MAX), ms(5000));
        assert_eq!(lin.scheduled(u32::MAX), ms(5000));
    }

    #[test]
    fn jitter_stays_within_its_range() {
        let full = policy(Backoff::Exponential, Jitter::Full);
        let equal = policy(Backoff::Exponential, Jitter::Equal);
        for (u, f, e) in [(0.0, 0, 2000), (0.5, 2000, 3000), (1.0, 4000, 4000)] {
            assert_eq!(full.jittered(3, &mut || u), ms(f), "full, u={u}");
            assert_eq!(equal.jittered(3, &mut || u), ms(e), "equal, u={u}");
        }
        // The cap applies before the jitter: never more than max_delay.
        assert_eq!(full.jittered(9, &mut || 1.0), ms(5000));
        // A source out of range cannot push the delay out of it.
        assert_eq!(full.jittered(3, &mut || 7.0), ms(4000));
        assert_eq!(full.jittered(3, &mut || f64::NAN), ms(0));
    }

    #[test]
    fn retry_after_is_a_floor_up_to_the_cap() {
        let p = policy(Backoff::Linear, Jitter::Full);
        // Jitter may shorten the schedule but never below what the server asked for.
        assert_eq!(p.delay(2, Some(ms(1500)), &mut || 0.0), Some(ms(1500)));
        assert_eq!(p.delay(2, Some(ms(1500)), &mut || 1.0), Some(ms(2000)));
        assert_eq!(p.delay(2, None, &mut || 0.25), Some(ms(500)));
        // Exactly the cap is still honoured; longer gives up.
        assert_eq!(p.delay(1, Some(ms(5000)), &mut || 0.0), Some(ms(5000)));
        assert_eq!(p.delay(1, Some(ms(5001)), &mut || 0.0), None);
        assert!(!p.accepts_retry_after(Some(ms(5001))));
        assert!(p.accepts_retry_after(None));
    }
}
