//! The rules' matching and the buckets' arithmetic on one node, without a daemon.

use super::{Limit, Payer, RateError, RateLimits};
use crate::config::{RateLimitRule, RateScope};

fn rule(scope: RateScope, rpm: Option<i64>, tpm: Option<i64>, runs: Option<i64>) -> RateLimitRule {
    RateLimitRule {
        scope,
        requests_per_minute: rpm,
        tokens_per_minute: tpm,
        concurrent_runs: runs,
        window_secs: None,
    }
}

const ALICE: Payer<'static> = Payer {
    key_id: Some("k1"),
    user: "alice",
    team: "research",
};

const BOB: Payer<'static> = Payer {
    key_id: Some("k2"),
    user: "bob",
    team: "research",
};

#[tokio::test]
async fn a_request_takes_from_its_key_user_and_team_and_the_tightest_refuses() {
    let limits = RateLimits::new(
        &[
            rule(RateScope::Team("research".into()), Some(3), None, None),
            rule(RateScope::Key("k1".into()), Some(1), None, None),
            rule(RateScope::User("carol".into()), Some(1), None, None),
        ],
        None,
    );
    // Alice's key allows one; its request took one of the team's three too.
    let quota = limits.take_request(ALICE).await.unwrap().unwrap();
    assert_eq!((quota.limit, quota.remaining), (1, 0));
    let Err(RateError::Refused(refusal)) = limits.take_request(ALICE).await else {
        panic!("a second request of k1 went through");
    };
    assert_eq!(
        (refusal.scope.as_str(), refusal.limit),
        ("key:k1", Limit::Requests)
    );
    // The refused request gave back what it took of the team's: Bob (same team) has two left.
    assert_eq!(
        limits.take_request(BOB).await.unwrap().unwrap().remaining,
        1
    );
    assert_eq!(
        limits.take_request(BOB).await.unwrap().unwrap().remaining,
        0
    );
    assert!(limits.take_request(BOB).await.is_err());
    // Someone no rule matches pays nothing and sees no quota.
    let other = Payer {
        key_id: None,
        user: "dave",
        team: "ops",
    };
    assert_eq!(limits.take_request(other).await.unwrap(), None);
}

#[tokio::test]
async fn tokens_are_reserved_then_settled_and_concurrent_runs_counted() {
    let limits = RateLimits::new(
        &[rule(
            RateScope::Team("research".into()),
            None,
            Some(100),
            Some(1),
        )],
        None,
    );
    assert!(limits.limits_tokens(ALICE) && limits.limits_any_tokens());
    limits.reserve_tokens(ALICE, 60).await.unwrap();
    // The call used 90: 30 more are charged; 10 are left, so a call of 20 must wait.
    limits.settle_tokens(ALICE, 60, 90).await.unwrap();
    let Err(RateError::Refused(wait)) = limits.reserve_tokens(BOB, 20).await else {
        panic!("a reservation past the bucket went through");
    };
    assert_eq!(wait.limit, Limit::Tokens);
    assert!(
        wait.retry_after.as_secs_f64() > 5.0,
        "{:?}",
        wait.retry_after
    );
    // One run at once for the team: the second is refused until the first ends.
    let idle = |_| false;
    let session = elfgate_core::SessionId::new();
    let run = elfgate_core::RunId::new();
    let slot = limits
        .hold_run(ALICE, run, session, &idle)
        .await
        .unwrap()
        .unwrap();
    slot.admitted();
    let other = elfgate_core::RunId::new();
    assert!(limits.hold_run(BOB, other, session, &idle).await.is_err());
    limits.run_ended(run).await;
    let dropped = limits.hold_run(BOB, other, session, &idle).await.unwrap();
    // A slot never admitted is free once dropped (its release is a task of the runtime's).
    drop(dropped);
    tokio::task::yield_now().await;
    let again = elfgate_core::RunId::new();
    assert!(
        limits
            .hold_run(BOB, again, session, &idle)
            .await
            .unwrap()
            .is_some()
    );
}
