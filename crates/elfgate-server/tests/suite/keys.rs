//! API keys: an admin creates one (its secret shown once), lists, changes and revokes them; a key
//! acts as its principal (`GET /v1/me`); a malformed, unknown, wrong, expired or revoked key is
//! one 401 that does not say which; admin routes are 403 to the other roles; bodies are strict.

use crate::common;

use common::{Daemon, Opts};
use elfgate_mockllm::MockServer;
use elfgate_test_support::keys::key_body;
use elfgate_test_support::router::InProcess;
use serde_json::{Value, json};

fn message_of(v: &Value) -> &str {
    v["error"]["message"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn an_admin_creates_lists_changes_and_revokes_a_key_that_acts_as_its_user() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let created = d
        .create_key_answer(json!({
            "name": "alice's laptop",
            "user": "alice",
            "team": "research",
            "role": "member",
            "expiresAt": null,
            "scopes": {"engines": ["chat"]},
        }))
        .await;
    let id = created["id"].as_str().unwrap();
    let key = created["key"].as_str().unwrap();
    assert!(key.starts_with(&format!("egk_{id}_")), "{created}");
    assert_eq!(created["name"], "alice's laptop");
    assert_eq!(created["user"], "alice");
    assert_eq!(created["team"], "research");
    assert_eq!(created["role"], "member");
    assert_eq!(created["scopes"], json!({"engines": ["chat"]}));
    assert_eq!(created["expiresAt"], Value::Null);
    assert!(created["createdAt"].is_string(), "{created}");

    // The key is its principal.
    let alice = d.as_key(key);
    let (s, me) = alice.get("/v1/me").await;
    assert_eq!(s, 200, "{me}");
    assert_eq!(
        me,
        json!({"user": "alice", "team": "research", "role": "member", "keyId": id,
               "scopes": {"engines": ["chat"]}})
    );
    // The root token is root.
    let (s, me) = d.get("/v1/me").await;
    assert_eq!(s, 200, "{me}");
    assert_eq!(
        (&me["user"], &me["team"], &me["role"]),
        (&json!("root"), &json!("root"), &json!("admin"))
    );
    assert!(me.get("keyId").is_none(), "{me}");

    // Listed without its secret, or anything of it.
    let (s, list) = d.get("/v1/admin/keys").await;
    assert_eq!(s, 200, "{list}");
    let listed = &list["keys"][0];
    assert_eq!(listed["id"], id);
    assert!(listed.get("key").is_none(), "{list}");
    let secret = key.splitn(3, '_').nth(2).unwrap(); // base64url: it may hold `_`
    assert!(!list.to_string().contains(secret), "{list}");
    assert!(!list.to_string().contains("Hash"), "{list}");

    // Changed: the key is what it now says at once.
    let (s, changed) = d
        .as_key(d.token.as_deref().unwrap())
        .patch(
            &format!("/v1/admin/keys/{id}"),
            json!({"name": "renamed", "role": "viewer", "scopes": {}, "expiresAt": "2999-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(s, 200, "{changed}");
    assert_eq!(changed["name"], "renamed");
    assert_eq!(changed["role"], "viewer");
    assert_eq!(changed["scopes"], json!({}));
    assert_eq!(changed["expiresAt"], "2999-01-01T00:00:00Z");
    let (_, me) = alice.get("/v1/me").await;
    assert_eq!((&me["role"], &me["scopes"]), (&json!("viewer"), &json!({})));

    // Revoked: refused at once, listed as revoked, and no longer changed.
    assert_eq!(d.delete(&format!("/v1/admin/keys/{id}")).await, 204);
    let (s, v) = alice.get("/v1/me").await;
    assert_eq!(s, 401, "{v}");
    let (_, list) = d.get("/v1/admin/keys").await;
    assert!(list["keys"][0]["revokedAt"].is_string(), "{list}");
    let (s, v) = d
        .as_key(d.token.as_deref().unwrap())
        .patch(&format!("/v1/admin/keys/{id}"), json!({"name": "back"}))
        .await;
    assert_eq!(s, 404, "{v}");
    assert_eq!(d.delete("/v1/admin/keys/0000000000000000").await, 404);
}

#[tokio::test]
async fn a_malformed_unknown_wrong_expired_or_revoked_key_is_one_401() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let good = d.create_key(key_body("bob", "ops", "member")).await;
    let (id, secret) = good
        .strip_prefix("egk_")
        .and_then(|rest| rest.split_once('_'))
        .unwrap();
    let expired = d
        .create_key(
            json!({"name": "old", "user": "bob", "team": "ops", "role": "member",
                           "expiresAt": "2001-01-01T00:00:00Z"}),
        )
        .await;
    let revoked = d.create_key(key_body("carol", "ops", "member")).await;
    let revoked_id = revoked.split('_').nth(1).unwrap();
    assert_eq!(d.delete(&format!("/v1/admin/keys/{revoked_id}")).await, 204);
    let other_secret: String = secret.chars().rev().collect();

    let (s, v) = d.as_key(&good).get("/v1/me").await;
    assert_eq!(s, 200, "{v}");
    let mut messages = Vec::new();
    for (what, bearer) in [
        ("malformed", "egk_nothex_short".to_string()),
        ("unknown", format!("egk_0123456789abcdef_{secret}")),
        ("wrong secret", format!("egk_{id}_{other_secret}")),
        ("expired", expired),
        ("revoked", revoked),
        ("wrong token", "not-the-token".to_string()),
    ] {
        let (s, v) = d.as_key(&bearer).get("/v1/sessions").await;
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (401, Some("unauthorized")),
            "{what}: {v}"
        );
        messages.push(message_of(&v).to_string());
    }
    let (s, v) = d.anonymous().get("/v1/sessions").await;
    assert_eq!(s, 401, "{v}");
    messages.push(message_of(&v).to_string());
    messages.dedup();
    assert_eq!(messages.len(), 1, "{messages:?}");
    // The answer names no key.
    assert!(!messages[0].contains(id), "{messages:?}");
}

#[tokio::test]
async fn admin_routes_are_403_to_members_and_viewers_and_open_to_admin_keys() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let member = d.create_key(key_body("dave", "research", "member")).await;
    let viewer = d.create_key(key_body("erin", "research", "viewer")).await;
    let admin = d.create_key(key_body("frank", "ops", "admin")).await;
    for key in [&member, &viewer] {
        let k = d.as_key(key);
        for (method, path) in [
            ("GET", "/v1/admin/keys"),
            ("POST", "/v1/admin/keys"),
            ("PATCH", "/v1/admin/keys/0123456789abcdef"),
            ("DELETE", "/v1/admin/keys/0123456789abcdef"),
            ("GET", "/metrics"),
            ("GET", "/v1/cluster"),
            ("POST", "/v1/mcp/reload"),
        ] {
            let body = (method != "GET" && method != "DELETE").then(|| key_body("x", "y", "admin"));
            let (s, v) = k.request(method.parse().unwrap(), path, body).await;
            assert_eq!(
                (s, v["error"]["code"].as_str()),
                (403, Some("forbidden")),
                "{method} {path}: {v}"
            );
        }
        // Who it is, it may ask.
        let (s, v) = k.get("/v1/me").await;
        assert_eq!(s, 200, "{v}");
    }
    let a = d.as_key(&admin);
    let (s, v) = a.get("/v1/admin/keys").await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["keys"].as_array().unwrap().len(), 3);
    let (s, v) = a
        .post("/v1/admin/keys", key_body("gina", "ops", "viewer"))
        .await;
    assert_eq!(s, 201, "{v}");
    let r = a
        .builder(reqwest::Method::GET, "/metrics", None)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
}

/// In-process (no daemon binary): what a key body is answered needs no process.
#[tokio::test]
async fn key_bodies_are_strict_about_fields_and_roles() {
    let mock = MockServer::start().await.unwrap();
    let d = InProcess::start(&mock, "").await;
    let refused = [
        (
            json!({"name": "n", "user": "u", "team": "t", "role": "member", "bogus": 1}),
            "bogus",
        ),
        (
            json!({"name": "n", "user": "u", "team": "t", "role": "member",
                "scopes": {"engine": ["chat"]}}),
            "engine",
        ),
        (
            json!({"name": "n", "user": "u", "team": "t", "role": "owner"}),
            "owner",
        ),
        (
            json!({"name": " ", "user": "u", "team": "t", "role": "member"}),
            "name",
        ),
    ];
    for (body, named) in refused {
        let a = d.post("/v1/admin/keys", &body).await;
        assert_eq!(a.status, 422, "{body}: {:?}", a.body);
        assert!(message_of(&a.body).contains(named), "{body}: {:?}", a.body);
    }
    let a = d.get("/v1/admin/keys").await;
    assert_eq!(a.body["keys"], json!([]), "nothing was stored");

    let key = d.create_key(&key_body("hal", "t", "member")).await;
    let id = key.split('_').nth(1).unwrap();
    let path = format!("/v1/admin/keys/{id}");
    for (body, named) in [
        (json!({"owner": "x"}), "owner"),
        (json!({"role": "superuser"}), "superuser"),
        (json!({}), "nothing to change"),
    ] {
        let a = d.send(axum::http::Method::PATCH, &path, Some(&body)).await;
        assert_eq!(a.status, 422, "{body}: {:?}", a.body);
        assert!(message_of(&a.body).contains(named), "{body}: {:?}", a.body);
    }
    let a = d
        .send_as(Some(&key), axum::http::Method::GET, "/v1/me", None)
        .await;
    assert_eq!(a.body["role"], "member", "{:?}", a.body);
}

/// The median time of `n` requests of `GET /v1/me` with `key`, each answered as `user`.
async fn median_me(d: &InProcess, key: &str, user: &str, n: usize) -> std::time::Duration {
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let started = std::time::Instant::now();
        let a = d
            .send_as(Some(key), axum::http::Method::GET, "/v1/me", None)
            .await;
        times.push(started.elapsed());
        assert_eq!(a.body["user"], user, "{:?}", a.body);
    }
    times.sort();
    times[n / 2]
}

/// Keys are found by their public id (the primary key), never by scanning: a key among 10,000
/// others is found, and the time it takes is printed beside the time with no others (no timing
/// goal here; docs/benchmarks.md has the figures).
#[tokio::test]
async fn a_key_among_ten_thousand_others_is_found_by_its_id() {
    let mock = MockServer::start().await.unwrap();
    // A cache of 0: every request reads its key from the store.
    let d = InProcess::start(&mock, "[auth]\nkey_cache_ms = 0\n").await;
    let key = d.create_key(&key_body("needle", "t", "member")).await;
    let root = median_me(&d, d.token.as_deref().unwrap(), "root", 200).await;
    let alone = median_me(&d, &key, "needle", 200).await;

    let now = chrono::Utc::now();
    for i in 0..10_000u32 {
        let other = elfgate_store::StoredKey {
            id: format!("{i:016x}"),
            name: format!("hay {i}"),
            user: format!("user{i}"),
            team: "t".into(),
            role: elfgate_core::PrincipalRole::Member,
            scopes: Default::default(),
            secret_hash: format!("{i:064x}"),
            created_at: now,
            expires_at: None,
            revoked_at: None,
            updated_at: now,
        };
        d.daemon.state.store.create_key(&other).await.unwrap();
    }
    let among = median_me(&d, &key, "needle", 200).await;
    let a = d.get("/v1/admin/keys").await;
    assert_eq!(a.body["keys"].as_array().unwrap().len(), 10_001);
    // With the default cache, for the figures.
    let cached = InProcess::start(&mock, "").await;
    let cached_key = cached.create_key(&key_body("needle", "t", "member")).await;
    let cached_root = median_me(&cached, cached.token.as_deref().unwrap(), "root", 200).await;
    let cached_key = median_me(&cached, &cached_key, "needle", 200).await;
    eprintln!(
        "GET /v1/me, median: root token {root:?}; a key read from the store {alone:?} alone, \
         {among:?} among 10,000 keys; with the default cache: root token {cached_root:?}, a key \
         {cached_key:?}"
    );
}
