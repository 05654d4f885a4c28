//! Tokens per minute, charged per model call through the run's meters: before the call its
//! estimate is taken from every matching rule's tokens bucket (or the call is refused, saying how
//! long until the bucket holds it); after it, what it really used is settled against the
//! estimate.

use super::{Limit, Payer, RateError, RateLimits};
use elfgate_core::{
    CallGrant, CallPlan, CallRefusal, CallReport, ModelMeter, RateLimitKind, RateLimitRefusal,
};
use std::sync::Arc;
use std::time::Duration;

/// The daemon's rate limits as a model-call meter.
pub struct RateLimitMeter(pub Arc<RateLimits>);

/// What a call took before it went upstream: the tokens reserved of each matching bucket.
struct Reserved(u64);

fn payer(p: &elfgate_core::Payer) -> Payer<'_> {
    Payer {
        key_id: p.key_id.as_deref(),
        user: &p.user,
        team: &p.team,
    }
}

/// The tokens a call counts: its prompt (cached tokens included) and its output.
fn tokens(usage: &elfgate_core::TokenUsage) -> u64 {
    usage.input_tokens + usage.output_tokens
}

#[async_trait::async_trait]
impl ModelMeter for RateLimitMeter {
    fn may_refuse(&self, p: &elfgate_core::Payer) -> bool {
        self.0.limits_tokens(payer(p))
    }

    async fn before_call(&self, plan: &CallPlan) -> Result<CallGrant, CallRefusal> {
        let who = payer(&plan.payer);
        if !self.0.limits_tokens(who) {
            return Ok(CallGrant::none());
        }
        let estimate = tokens(&plan.estimate);
        match self.0.reserve_tokens(who, estimate).await {
            Ok(()) => Ok(CallGrant::new(Reserved(estimate))),
            Err(RateError::Refused(r)) => Err(CallRefusal::RateLimited(RateLimitRefusal {
                rule: r.rule(),
                kind: match r.limit {
                    Limit::Requests => RateLimitKind::Requests,
                    Limit::Tokens => RateLimitKind::Tokens,
                    Limit::ConcurrentRuns => RateLimitKind::ConcurrentRuns,
                },
                limit: r.quota.limit,
                remaining: r.quota.remaining,
                retry_after: r.retry_after,
            })),
            // The shared buckets cannot be read: the call is not made (nothing fails open), and
            // is tried again shortly, as a bucket's wait is.
            Err(RateError::Store(e)) => Err(CallRefusal::RateLimited(RateLimitRefusal {
                rule: format!("the rate limits cannot be checked ({})", e.summary()),
                kind: RateLimitKind::Tokens,
                limit: 0,
                remaining: 0,
                retry_after: Duration::from_secs(1),
            })),
        }
    }

    async fn after_call(&self, plan: &CallPlan, grant: CallGrant, report: &CallReport) {
        let Some(Reserved(reserved)) = grant.take::<Reserved>() else {
            return;
        };
        let used = if report.made {
            tokens(&report.usage)
        } else {
            0
        };
        if let Err(e) = self
            .0
            .settle_tokens(payer(&plan.payer), reserved, used)
            .await
        {
            // The estimate stays taken: the bucket is charged too much, never too little.
            tracing::warn!(error = %e, "a model call's tokens were not settled with its rate limits");
        }
    }
}
