//! Budgets: created, changed and deleted (those of the configuration only by syncing it), and
//! their accounts: a reservation is refused rather than pass the limit, however many are made at
//! once; reconciling releases the reservation and adds the cost; a period that ended starts the
//! account again; the soft limit is announced once per period.

use super::Db;
use chrono::{DateTime, Duration, SubsecRound, Utc};
use elfgate_core::{BudgetPeriod, BudgetScope, BudgetSource};
use elfgate_store::{BudgetChange, Reservation, StoredBudget};

fn budget(id: &str, scope: BudgetScope, max_nusd: i64, source: BudgetSource) -> StoredBudget {
    let now = Utc::now().trunc_subsecs(3);
    StoredBudget {
        id: id.into(),
        scope,
        period: BudgetPeriod::Day,
        max_nusd,
        soft_nusd: None,
        source,
        period_start: BudgetPeriod::Day.start_of(now),
        spent_nusd: 0,
        reserved_nusd: 0,
        warned_period: None,
        created_at: now,
        updated_at: now,
    }
}

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

pub(crate) async fn budgets_are_stored_changed_and_config_ones_synced(db: Db) {
    let store = db.open().await;
    let team = budget(
        "bud_team",
        BudgetScope::Team("research".into()),
        5_000,
        BudgetSource::Api,
    );
    store.create_budget(&team).await.unwrap();
    assert_eq!(
        store.get_budget("bud_team").await.unwrap(),
        Some(team.clone())
    );
    assert!(
        store.create_budget(&team).await.is_err(),
        "one id, one budget"
    );

    let changed = store
        .update_budget(
            "bud_team",
            &BudgetChange {
                max_nusd: Some(9_000),
                soft_nusd: Some(Some(4_000)),
                ..BudgetChange::default()
            },
            Utc::now(),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!((changed.max_nusd, changed.soft_nusd), (9_000, Some(4_000)));
    assert_eq!(changed.period, BudgetPeriod::Day);

    // The configuration's budgets: created by syncing, kept with their account when synced
    // again, gone when the configuration drops them, and never changed or deleted otherwise.
    let cfg = budget(
        "cfg_key",
        BudgetScope::Key("k1".into()),
        1_000,
        BudgetSource::Config,
    );
    store
        .sync_config_budgets(std::slice::from_ref(&cfg))
        .await
        .unwrap();
    let now = Utc::now();
    assert!(matches!(
        store.reserve_budget("cfg_key", 300, now).await.unwrap(),
        Reservation::Granted(_)
    ));
    store.settle_budget("cfg_key", 300, 250, now).await.unwrap();
    let raised = StoredBudget {
        max_nusd: 2_000,
        ..cfg.clone()
    };
    store.sync_config_budgets(&[raised]).await.unwrap();
    let kept = store.get_budget("cfg_key").await.unwrap().unwrap();
    assert_eq!((kept.max_nusd, kept.spent_nusd), (2_000, 250));
    assert_eq!(kept.source, BudgetSource::Config);
    let refused = store
        .update_budget("cfg_key", &BudgetChange::default(), now)
        .await
        .unwrap();
    assert_eq!(
        refused, None,
        "a configured budget is not changed through the API"
    );
    assert!(!store.delete_budget("cfg_key").await.unwrap());
    store.sync_config_budgets(&[]).await.unwrap();
    assert_eq!(store.get_budget("cfg_key").await.unwrap(), None);

    let ids: Vec<String> = store
        .list_budgets()
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.id)
        .collect();
    assert_eq!(ids, ["bud_team"]);
    assert!(store.delete_budget("bud_team").await.unwrap());
    assert!(!store.delete_budget("bud_team").await.unwrap());
}

pub(crate) async fn reservations_never_pass_a_budgets_limit(db: Db) {
    let store = db.open().await;
    store
        .create_budget(&budget(
            "bud_k",
            BudgetScope::Key("k".into()),
            1_000,
            BudgetSource::Api,
        ))
        .await
        .unwrap();
    // Twenty reservations of 150 at once: six fit in 1000, and no more are granted.
    let now = Utc::now();
    let tries = (0..20).map(|_| {
        let store = store.clone();
        tokio::spawn(async move { store.reserve_budget("bud_k", 150, now).await.unwrap() })
    });
    let mut granted = 0;
    for t in tries {
        let r = t.await.unwrap();
        if let Reservation::Granted(b) = &r {
            granted += 1;
            assert!(b.spent_nusd + b.reserved_nusd <= b.max_nusd, "{b:?}");
        } else {
            assert!(
                matches!(&r, Reservation::Refused(b) if b.max_nusd == 1_000),
                "{r:?}"
            );
        }
    }
    assert_eq!(granted, 6);

    // Reconciled for less than reserved: the room comes back.
    for _ in 0..6 {
        store.settle_budget("bud_k", 150, 100, now).await.unwrap();
    }
    let b = store.get_budget("bud_k").await.unwrap().unwrap();
    assert_eq!((b.spent_nusd, b.reserved_nusd), (600, 0));
    assert!(matches!(
        store.reserve_budget("bud_k", 400, now).await.unwrap(),
        Reservation::Granted(_)
    ));
    store.settle_budget("bud_k", 400, 400, now).await.unwrap();
    // At the limit, even a call estimated at nothing is refused.
    assert!(matches!(
        store.reserve_budget("bud_k", 0, now).await.unwrap(),
        Reservation::Refused(_)
    ));
    // Reset: room again.
    store
        .update_budget(
            "bud_k",
            &BudgetChange {
                reset: true,
                ..BudgetChange::default()
            },
            now,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store
            .get_budget("bud_k")
            .await
            .unwrap()
            .unwrap()
            .spent_at(now),
        0
    );
    assert!(matches!(
        store.reserve_budget("bud_k", 1_000, now).await.unwrap(),
        Reservation::Granted(_)
    ));
    assert_eq!(
        store.reserve_budget("no_such", 1, now).await.unwrap(),
        Reservation::Gone
    );
}

pub(crate) async fn a_budgets_account_starts_again_each_period(db: Db) {
    let store = db.open().await;
    let monday = at("2026-12-07T10:00:00Z");
    let mut b = budget(
        "bud_day",
        BudgetScope::User("alice".into()),
        1_000,
        BudgetSource::Api,
    );
    b.period_start = BudgetPeriod::Day.start_of(monday);
    b.soft_nusd = Some(500);
    store.create_budget(&b).await.unwrap();
    assert!(matches!(
        store
            .reserve_budget("bud_day", 1_000, monday)
            .await
            .unwrap(),
        Reservation::Granted(_)
    ));
    let spent = store
        .settle_budget("bud_day", 1_000, 1_000, monday)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(spent.spent_at(monday), 1_000);
    assert!(matches!(
        store.reserve_budget("bud_day", 1, monday).await.unwrap(),
        Reservation::Refused(_)
    ));
    // The soft limit is announced once in a period, whoever asks.
    let start = BudgetPeriod::Day.start_of(monday);
    assert!(store.claim_budget_warning("bud_day", start).await.unwrap());
    assert!(!store.claim_budget_warning("bud_day", start).await.unwrap());

    let tuesday = monday + Duration::days(1);
    assert_eq!(spent.spent_at(tuesday), 0, "a new day, nothing spent yet");
    let reserved = store.reserve_budget("bud_day", 700, tuesday).await.unwrap();
    assert!(
        matches!(reserved, Reservation::Granted(_)),
        "a new day has room: {reserved:?}"
    );
    let b = store.get_budget("bud_day").await.unwrap().unwrap();
    assert_eq!((b.spent_nusd, b.reserved_nusd), (0, 700));
    assert_eq!(b.period_start, BudgetPeriod::Day.start_of(tuesday));
    let tuesday_start = BudgetPeriod::Day.start_of(tuesday);
    assert!(
        store
            .claim_budget_warning("bud_day", tuesday_start)
            .await
            .unwrap()
    );
}
