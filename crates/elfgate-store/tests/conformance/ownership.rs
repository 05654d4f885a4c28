//! Who owns a session or a workflow: stored and read back on both backends; a list holds only the
//! sessions its reader sees, filtered in the query so that paging stays right; what was stored
//! before owners existed belongs to the root key.

use super::{Db, run, session};
use elfgate_core::{Ownership, RunStatus, SessionId, Visibility};
use elfgate_store::{SessionsSeen, WorkflowWrite};

/// The migration that gave sessions and workflows their owners.
const OWNERS: i64 = 20261207000061;

fn owned(owner: &str, team: &str, visibility: Visibility) -> Ownership {
    Ownership {
        owner: owner.into(),
        team: team.into(),
        visibility,
    }
}

pub(crate) async fn a_list_holds_what_its_reader_sees_page_by_page(db: Db) {
    let store = db.open().await;
    let made = [
        owned("alice", "a", Visibility::Private),
        owned("alice", "a", Visibility::Team),
        owned("bob", "a", Visibility::Private),
        owned("carol", "b", Visibility::Team),
        owned("bob", "a", Visibility::Team),
        Ownership::root(),
    ];
    let mut ids = Vec::new();
    for ownership in &made {
        let mut s = session();
        s.ownership = ownership.clone();
        store
            .create_session(&s, &run(s.id, RunStatus::Completed), None)
            .await
            .unwrap();
        assert_eq!(
            store.get_session(s.id).await.unwrap().unwrap().ownership,
            *ownership
        );
        ids.push(s.id);
    }
    // Newest first, a page of one at a time.
    async fn all_pages(store: &super::TestStore, seen: SessionsSeen<'_>) -> Vec<SessionId> {
        let mut got = Vec::new();
        let mut cursor = None;
        loop {
            let page = store.list_sessions(seen, 1, cursor).await.unwrap();
            assert!(page.sessions.len() <= 1);
            got.extend(page.sessions.iter().map(|s| s.id));
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => return got,
            }
        }
    }
    let alice = SessionsSeen::By {
        user: "alice",
        team: "a",
    };
    assert_eq!(all_pages(&store, alice).await, [ids[4], ids[1], ids[0]]);
    let carol = SessionsSeen::By {
        user: "carol",
        team: "b",
    };
    assert_eq!(all_pages(&store, carol).await, [ids[3]]);
    // A user of a team nobody shares with sees nothing, and no page is short of what it may see.
    let dan = SessionsSeen::By {
        user: "dan",
        team: "c",
    };
    assert!(all_pages(&store, dan).await.is_empty());
    let every: Vec<SessionId> = ids.iter().rev().copied().collect();
    assert_eq!(all_pages(&store, SessionsSeen::All).await, every);
    let page = store.list_sessions(alice, 2, None).await.unwrap();
    assert_eq!(
        page.sessions.iter().map(|s| s.id).collect::<Vec<_>>(),
        [ids[4], ids[1]]
    );
    assert_eq!(page.next_cursor, Some(ids[1]));
    store.close().await;
}

pub(crate) async fn a_workflow_keeps_its_creators_team_across_versions(db: Db) {
    let store = db.open().await;
    let def = serde_json::json!({"name": "w", "steps": []});
    let alice = owned("alice", "a", Visibility::Team);
    let first = store
        .put_workflow("w", &def, WorkflowWrite::Create, &alice)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.ownership, alice);
    // Changed by someone else: still the creator's team's.
    let second = store
        .put_workflow("w", &def, WorkflowWrite::Replace, &Ownership::root())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((second.version, second.ownership), (2, alice.clone()));
    let listed = store.list_workflows().await.unwrap();
    assert_eq!(listed[0].ownership, alice);
    // Deleted, then made again by another team: that team's.
    assert!(store.delete_workflow("w").await.unwrap());
    let carol = owned("carol", "b", Visibility::Team);
    let again = store
        .put_workflow("w", &def, WorkflowWrite::Create, &carol)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((again.version, again.ownership), (3, carol));
    store.close().await;
}

pub(crate) async fn what_was_stored_before_owners_is_the_root_keys(db: Db) {
    let s = session();
    // The id is this test's own, without quotes.
    let old_rows = format!(
        "INSERT INTO sessions (id, engine, created_at, updated_at) \
         VALUES ('{}', 'chat', '2026-12-01T00:00:00.000Z', '2026-12-01T00:00:00.000Z'); \
         INSERT INTO workflows (name, version, definition, created_at) \
         VALUES ('old', 1, '{{\"name\":\"old\",\"steps\":[]}}', '2026-12-01T00:00:00.000Z');",
        s.id
    );
    db.stored_before(OWNERS, old_rows).await;
    let store = db.open().await;
    let stored = store.get_session(s.id).await.unwrap().unwrap();
    assert_eq!(stored.ownership, Ownership::root());
    let workflow = store.get_workflow("old", None).await.unwrap().unwrap();
    assert_eq!(workflow.ownership, Ownership::root());
    store.close().await;
}
