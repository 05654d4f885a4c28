//! The spend ledger: a run's model calls are stored with its end (once, a retried end writing
//! them again adds nothing), summed on their session and by key, user, team, model and day, the
//! unpriced ones adding tokens and no cost.

use super::{Db, run, session};
use elfgate_core::{FinishReason, ModelCall, Payer, RunOutcome, RunStatus, TokenUsage};
use elfgate_store::{SpendGroupBy, SpendQuery};
use std::sync::Arc;

fn call(
    s: &elfgate_core::Session,
    r: &elfgate_core::Run,
    seq: u32,
    team: &str,
    cost: Option<f64>,
) -> ModelCall {
    ModelCall {
        seq,
        at: chrono::Utc::now(),
        session_id: s.id,
        run_id: r.id,
        payer: Arc::new(Payer {
            key_id: Some(format!("key-{team}")),
            user: format!("user-{team}"),
            team: team.into(),
        }),
        provider: "p".into(),
        model: format!("model-{seq}"),
        usage: TokenUsage {
            input_tokens: 100,
            output_tokens: 10,
            cache_read_tokens: 40,
            cache_write_tokens: 0,
        },
        input_tokens_estimated: false,
        output_tokens_estimated: seq == 1,
        cost_usd: cost,
    }
}

pub(crate) async fn a_runs_model_calls_are_stored_with_its_end_and_summed(db: Db) {
    let store = db.open().await;
    let s = session();
    let r = run(s.id, RunStatus::Running);
    store.create_session(&s, &r, None).await.unwrap();
    let outcome = RunOutcome {
        model_calls: vec![
            call(&s, &r, 0, "a", Some(0.25)),
            call(&s, &r, 1, "a", None),
            call(&s, &r, 2, "b", Some(0.000_000_001)),
        ],
        ..RunOutcome::new(FinishReason::Stop)
    };
    store
        .run_finished(s.id, r.id, &outcome, None)
        .await
        .unwrap();
    // A retried end (its first commit went through) adds nothing.
    store
        .run_finished(s.id, r.id, &outcome, None)
        .await
        .unwrap();

    let total = store.session_spend(s.id).await.unwrap();
    assert_eq!(total.calls, 3);
    assert_eq!(total.usage.input_tokens, 300);
    assert_eq!(total.usage.cache_read_tokens, 120);
    assert_eq!(total.cost_usd, Some(0.250_000_001));

    let q = |group_by, user: Option<&str>| SpendQuery {
        group_by,
        from: None,
        to: None,
        user: user.map(str::to_string),
    };
    let by_team = store.spend(&q(SpendGroupBy::Team, None)).await.unwrap();
    assert_eq!(by_team.len(), 2);
    assert_eq!(by_team[0].group.as_deref(), Some("a"));
    assert_eq!(by_team[0].calls, 2);
    assert_eq!(by_team[0].cost_usd, Some(0.25));
    let by_model = store.spend(&q(SpendGroupBy::Model, None)).await.unwrap();
    assert_eq!(by_model[1].group.as_deref(), Some("model-1"));
    assert_eq!(by_model[1].cost_usd, None, "an unpriced call has no cost");
    let own = store
        .spend(&q(SpendGroupBy::Key, Some("user-b")))
        .await
        .unwrap();
    assert_eq!(own.len(), 1);
    assert_eq!(own[0].group.as_deref(), Some("key-b"));
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let by_day = store.spend(&q(SpendGroupBy::Day, None)).await.unwrap();
    assert_eq!(by_day[0].group.as_deref(), Some(today.as_str()));
    let later = SpendQuery {
        from: Some("2999-01-01T00:00:00.000Z".into()),
        ..q(SpendGroupBy::Day, None)
    };
    assert!(store.spend(&later).await.unwrap().is_empty());
    // Deleting the session keeps what it spent.
    store.delete_session(s.id).await.unwrap();
    assert_eq!(
        store
            .spend(&q(SpendGroupBy::Team, None))
            .await
            .unwrap()
            .len(),
        2
    );
}
