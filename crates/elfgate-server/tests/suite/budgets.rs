//! Budgets through the API: an admin creates one on a key, a user or a team and reads it back
//! with its spend in the current period; changes it, resets it, deletes it; bodies are strict
//! and a wrong field is a 422 naming it; the configuration's `[[budgets]]` are listed as
//! `source: "config"` and refused to a change; other roles are refused (403).

use crate::common;

use common::{Daemon, Opts};
use elfgate_mockllm::MockServer;
use elfgate_test_support::keys::key_body;
use serde_json::{Value, json};

fn message_of(v: &Value) -> &str {
    v["error"]["message"].as_str().unwrap_or_default()
}

fn root(d: &Daemon) -> elfgate_test_support::keys::AsKey<'_> {
    d.as_key(d.token.as_deref().expect("the daemon's token"))
}

#[tokio::test]
async fn an_admin_creates_reads_changes_resets_and_deletes_budgets() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let alice = d
        .create_key_answer(key_body("alice", "research", "member"))
        .await;
    let key_id = alice["id"].as_str().unwrap();

    let (s, team) = d
        .post(
            "/v1/admin/budgets",
            json!({"scope": {"team": "research"}, "maxUsd": 25.5, "period": "month",
                   "softUsd": 20.0}),
        )
        .await;
    assert_eq!(s, 201, "{team}");
    let id = team["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("bud_"), "{team}");
    assert_eq!(team["scope"], json!({"team": "research"}));
    assert_eq!(team["maxUsd"], 25.5);
    assert_eq!(team["softUsd"], 20.0);
    assert_eq!(team["period"], "month");
    assert_eq!(team["source"], "api");
    assert_eq!(team["spentUsd"], 0.0);
    assert_eq!(team["reservedUsd"], 0.0);
    let start = team["periodStart"].as_str().unwrap();
    assert!(
        start.ends_with("-01T00:00:00Z"),
        "a month starts on the 1st: {team}"
    );

    let (s, key) = d
        .post(
            "/v1/admin/budgets",
            json!({"scope": {"key": key_id}, "maxUsd": 1, "period": "total"}),
        )
        .await;
    assert_eq!(s, 201, "{key}");
    assert!(
        key.get("periodStart").is_none(),
        "a total budget has no period: {key}"
    );
    assert!(key.get("softUsd").is_none(), "{key}");

    let (s, list) = d.get("/v1/admin/budgets").await;
    assert_eq!(s, 200, "{list}");
    let ids: Vec<&str> = list["budgets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [id.as_str(), key["id"].as_str().unwrap()]);
    let (s, one) = d.get(&format!("/v1/admin/budgets/{id}")).await;
    assert_eq!((s, &one), (200, &team));

    // A change replaces what it names; softUsd null removes the soft limit.
    let (s, changed) = root(&d)
        .patch(
            &format!("/v1/admin/budgets/{id}"),
            json!({"maxUsd": 30, "softUsd": null, "period": "week"}),
        )
        .await;
    assert_eq!(s, 200, "{changed}");
    assert_eq!(changed["maxUsd"], 30.0);
    assert_eq!(changed["period"], "week");
    assert!(changed.get("softUsd").is_none(), "{changed}");
    let (s, reset) = root(&d)
        .patch(&format!("/v1/admin/budgets/{id}"), json!({"reset": true}))
        .await;
    assert_eq!(s, 200, "{reset}");
    assert_eq!(reset["spentUsd"], 0.0);

    assert_eq!(d.delete(&format!("/v1/admin/budgets/{id}")).await, 204);
    let (s, gone) = d.get(&format!("/v1/admin/budgets/{id}")).await;
    assert_eq!(s, 404, "{gone}");
    assert_eq!(message_of(&gone), format!("no budget '{id}'"));
    assert_eq!(d.delete(&format!("/v1/admin/budgets/{id}")).await, 404);
}

#[tokio::test]
async fn bad_budgets_are_refused_naming_the_field() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let team = |extra: Value| {
        let mut b = json!({"scope": {"team": "t"}, "maxUsd": 5, "period": "day"});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    for (body, want) in [
        (team(json!({"maxUsd": -1})), "`maxUsd`"),
        (team(json!({"softUsd": 6})), "`softUsd`"),
        (team(json!({"softUsd": 0})), "`softUsd`"),
        (team(json!({"period": "hour"})), "`period`"),
        (team(json!({"scope": {"group": "g"}})), "`scope`"),
        (
            team(json!({"scope": {"team": "a", "user": "b"}})),
            "`scope`",
        ),
        (team(json!({"scope": "t"})), "`scope`"),
        (team(json!({"scope": {"team": ""}})), "`scope.team`"),
        (team(json!({"scope": {"key": "nokey"}})), "`scope.key`"),
        (team(json!({"hardUsd": 1})), "hardUsd"),
    ] {
        let (s, v) = d.post("/v1/admin/budgets", body.clone()).await;
        assert_eq!(s, 422, "{body}: {v}");
        assert!(message_of(&v).contains(want), "{body}: {v}");
    }
    let (s, made) = d.post("/v1/admin/budgets", team(json!({}))).await;
    assert_eq!(s, 201, "{made}");
    let path = format!("/v1/admin/budgets/{}", made["id"].as_str().unwrap());
    for (body, want) in [
        (json!({}), "nothing to change"),
        (json!({"maxUsd": 1, "softUsd": 2}), "`softUsd`"),
        (json!({"scope": {"team": "u"}}), "scope"),
        (json!({"period": "fortnight"}), "`period`"),
    ] {
        let (s, v) = root(&d).patch(&path, body.clone()).await;
        assert_eq!(s, 422, "{body}: {v}");
        assert!(message_of(&v).contains(want), "{body}: {v}");
    }
    let (s, v) = root(&d)
        .patch("/v1/admin/budgets/bud_nosuch", json!({"maxUsd": 1}))
        .await;
    assert_eq!(s, 404, "{v}");
}

#[tokio::test]
async fn configured_budgets_are_listed_read_only_and_budgets_are_for_admins() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: "[[budgets]]\nscope = { user = \"alice\" }\nmax_usd = 2.5\n\
                         period = \"day\"\nsoft_usd = 1.0\n"
                .into(),
            ..Opts::default()
        },
    );
    let (s, list) = d.get("/v1/admin/budgets").await;
    assert_eq!(s, 200, "{list}");
    let configured = &list["budgets"][0];
    assert_eq!(configured["source"], "config", "{list}");
    assert_eq!(configured["scope"], json!({"user": "alice"}));
    assert_eq!(configured["maxUsd"], 2.5);
    assert_eq!(configured["softUsd"], 1.0);
    let path = format!("/v1/admin/budgets/{}", configured["id"].as_str().unwrap());
    let (s, v) = root(&d).patch(&path, json!({"maxUsd": 9})).await;
    assert_eq!(s, 409, "{v}");
    assert!(message_of(&v).contains("[[budgets]]"), "{v}");
    let (s, v) = root(&d).delete(&path).await;
    assert_eq!(s, 409, "{v}");

    let member = d.create_key(key_body("bob", "t", "member")).await;
    for (method, target) in [
        ("get", "/v1/admin/budgets".to_string()),
        ("get", path.clone()),
        ("post", "/v1/admin/budgets".to_string()),
    ] {
        let (s, v) = match method {
            "get" => d.as_key(&member).get(&target).await,
            _ => {
                d.as_key(&member)
                    .post(
                        &target,
                        json!({"scope": {"user": "bob"}, "maxUsd": 100, "period": "day"}),
                    )
                    .await
            }
        };
        assert_eq!(s, 403, "{method} {target}: {v}");
    }
}
