//! API keys: stored by public id with the hash of their secret, changed field by field, revoked
//! once (a revoked key keeps its first revocation time and takes no change).

use super::Db;
use chrono::{Duration, SubsecRound, Utc};
use elfgate_core::{PrincipalRole, Scopes};
use elfgate_store::{AccessEvent, KeyChange, StoreError, StoredKey};

fn key(id: &str) -> StoredKey {
    let now = Utc::now().trunc_subsecs(3);
    StoredKey {
        id: id.into(),
        name: format!("{id}'s key"),
        user: "alice".into(),
        team: "research".into(),
        role: PrincipalRole::Member,
        scopes: Scopes {
            engines: Some(vec!["chat".into()]),
            ..Scopes::default()
        },
        secret_hash: "ab".repeat(32),
        created_at: now,
        expires_at: Some(now + Duration::days(1)),
        revoked_at: None,
        updated_at: now,
    }
}

pub(crate) async fn api_keys_are_created_read_changed_and_revoked(db: Db) {
    let store = db.open().await;
    let first = key("k1first");
    let second = key("k2second");
    store.create_key(&first).await.unwrap();
    store.create_key(&second).await.unwrap();
    assert_eq!(store.get_key("k1first").await.unwrap(), Some(first.clone()));
    assert_eq!(store.get_key("nosuchkey").await.unwrap(), None);
    // One id, one key.
    let again = store.create_key(&first).await.unwrap_err();
    assert!(matches!(again, StoreError::Constraint(_)), "{again:?}");
    let ids: Vec<String> = store
        .list_keys()
        .await
        .unwrap()
        .into_iter()
        .map(|k| k.id)
        .collect();
    assert_eq!(ids, ["k1first", "k2second"]);

    // A change replaces what it names and nothing else.
    let renamed = store
        .update_key(
            "k1first",
            &KeyChange {
                name: Some("renamed".into()),
                ..KeyChange::default()
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(renamed.name, "renamed");
    assert_eq!(renamed.role, PrincipalRole::Member);
    assert_eq!(renamed.scopes, first.scopes);
    assert_eq!(renamed.expires_at, first.expires_at);
    let changed = store
        .update_key(
            "k1first",
            &KeyChange {
                role: Some(PrincipalRole::Viewer),
                scopes: Some(Scopes::default()),
                expires_at: Some(None),
                ..KeyChange::default()
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(changed.name, "renamed");
    assert_eq!(changed.role, PrincipalRole::Viewer);
    assert_eq!(changed.scopes, Scopes::default());
    assert_eq!(changed.expires_at, None);
    assert_eq!(changed.secret_hash, first.secret_hash);
    assert_eq!(store.get_key("k1first").await.unwrap(), Some(changed));
    assert_eq!(
        store
            .update_key("nosuchkey", &KeyChange::default())
            .await
            .unwrap(),
        None
    );

    // Revoked once: the first time stays; a revoked key takes no change; the other is untouched.
    let revoked = store.revoke_key("k1first").await.unwrap().unwrap();
    let at = revoked.revoked_at.expect("revoked");
    let twice = store.revoke_key("k1first").await.unwrap().unwrap();
    assert_eq!(twice.revoked_at, Some(at));
    assert_eq!(
        store
            .update_key(
                "k1first",
                &KeyChange {
                    name: Some("back".into()),
                    ..KeyChange::default()
                }
            )
            .await
            .unwrap(),
        None
    );
    assert_eq!(store.revoke_key("nosuchkey").await.unwrap(), None);
    assert_eq!(store.get_key("k2second").await.unwrap(), Some(second));
    // Kept after a reopen.
    store.close().await;
    drop(store);
    let store = db.open().await;
    assert_eq!(
        store.get_key("k1first").await.unwrap().unwrap().revoked_at,
        Some(at)
    );
}

pub(crate) async fn access_events_are_appended_in_batches_and_read_newest_first(db: Db) {
    let store = db.open().await;
    let event = |kind: &str, i: u16| AccessEvent {
        at: Utc::now().trunc_subsecs(3),
        kind: kind.into(),
        actor: Some("root".into()),
        key_id: Some(format!("k{i}")),
        route: Some("GET /v1/sessions".into()),
        status: Some(401),
        reason: Some("unknown_key".into()),
        detail: Some(serde_json::json!({"role": "viewer"})),
    };
    let bare = AccessEvent {
        at: Utc::now().trunc_subsecs(3),
        kind: "refused".into(),
        actor: None,
        key_id: None,
        route: None,
        status: None,
        reason: None,
        detail: None,
    };
    store
        .append_access_events(&[event("key_created", 1), event("refused", 2)])
        .await
        .unwrap();
    store
        .append_access_events(std::slice::from_ref(&bare))
        .await
        .unwrap();
    let all = store.access_events(None, 10).await.unwrap();
    let kinds: Vec<&str> = all.iter().map(|e| e.event.kind.as_str()).collect();
    assert_eq!(kinds, ["refused", "refused", "key_created"]);
    assert_eq!(all[0].event, bare);
    let mut created = event("key_created", 1);
    created.at = all[2].event.at;
    assert_eq!(all[2].event, created);
    assert!(all[0].id > all[1].id && all[1].id > all[2].id);
    // Paged by id.
    let older = store.access_events(Some(all[0].id), 1).await.unwrap();
    assert_eq!(older.len(), 1);
    assert_eq!(older[0].id, all[1].id);
}
