//! The access audit (`GET /v1/admin/audit`, admins only): a key's creation, change and
//! revocation (by whom, which key, what changed, never the secret), and each refused request's
//! key id, route, status and reason; a flood of bad requests is written at a bounded rate, the
//! rest counted.

use crate::common;

use common::{Daemon, Opts, poll_until};
use elfgate_mockllm::MockServer;
use elfgate_test_support::keys::key_body;
use elfgate_test_support::router::InProcess;
use serde_json::{Value, json};

/// The audit's entries, newest first, once `want` of them are there (the writer is a task).
async fn entries(d: &Daemon, want: usize) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + common::GUARD;
    loop {
        let (s, v) = d.get("/v1/admin/audit").await;
        assert_eq!(s, 200, "{v}");
        let found = v["entries"].as_array().unwrap().clone();
        if found.len() >= want {
            return found;
        }
        assert!(tokio::time::Instant::now() < deadline, "{found:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

fn of_kind<'a>(entries: &'a [Value], kind: &str, key_id: &str) -> &'a Value {
    entries
        .iter()
        .find(|e| e["kind"] == kind && e["keyId"] == key_id)
        .unwrap_or_else(|| panic!("no {kind} of {key_id} in {entries:?}"))
}

#[tokio::test]
async fn key_changes_and_refused_requests_are_audited_without_secrets() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let created = d
        .create_key_answer(key_body("alice", "research", "member"))
        .await;
    let (id, key) = (
        created["id"].as_str().unwrap(),
        created["key"].as_str().unwrap(),
    );
    let (s, v) = d
        .as_key(d.token.as_deref().unwrap())
        .patch(&format!("/v1/admin/keys/{id}"), json!({"role": "viewer"}))
        .await;
    assert_eq!(s, 200, "{v}");
    // Refused: a viewer on an admin route (403), then the key once revoked (401).
    let (s, _) = d.as_key(key).get("/v1/admin/audit").await;
    assert_eq!(s, 403);
    assert_eq!(d.delete(&format!("/v1/admin/keys/{id}")).await, 204);
    let (s, _) = d.as_key(key).get("/v1/sessions").await;
    assert_eq!(s, 401);
    let (s, _) = d.as_key("wrong-token").get("/v1/sessions").await;
    assert_eq!(s, 401);

    let all = entries(&d, 6).await;
    let made = of_kind(&all, "key_created", id);
    assert_eq!(made["actor"], "root");
    assert_eq!(
        (&made["detail"]["user"], &made["detail"]["role"]),
        (&json!("alice"), &json!("member"))
    );
    let changed = of_kind(&all, "key_changed", id);
    assert_eq!(changed["detail"], json!({"role": "viewer"}));
    assert_eq!(of_kind(&all, "key_revoked", id)["actor"], "root");
    let refused: Vec<(Value, Value, Value, Value)> = all
        .iter()
        .filter(|e| e["kind"] == "refused")
        .map(|e| {
            (
                e["keyId"].clone(),
                e["route"].clone(),
                e["status"].clone(),
                e["reason"].clone(),
            )
        })
        .collect();
    assert_eq!(
        refused,
        [
            (
                Value::Null,
                json!("GET /v1/sessions"),
                json!(401),
                json!("invalid_credentials")
            ),
            (
                json!(id),
                json!("GET /v1/sessions"),
                json!(401),
                json!("revoked_key")
            ),
            (
                json!(id),
                json!("GET /v1/admin/audit"),
                json!(403),
                json!("admin_only")
            ),
        ]
    );
    let secret = key.splitn(3, '_').nth(2).unwrap(); // base64url: it may hold `_`
    let text = serde_json::to_string(&all).unwrap();
    assert!(
        !text.contains(secret) && !text.contains("wrong-token"),
        "{text}"
    );
}

/// In-process: a thousand bad requests at once are not a thousand rows.
#[tokio::test]
async fn a_flood_of_refused_requests_is_written_at_a_bounded_rate_and_the_rest_counted() {
    let mock = MockServer::start().await.unwrap();
    let d = InProcess::start(&mock, "").await;
    for i in 0..1_000 {
        let a = d
            .send_as(
                Some(&format!("bad-{i}")),
                axum::http::Method::GET,
                "/v1/sessions",
                None,
            )
            .await;
        assert_eq!(a.status, 401);
    }
    let dropped = poll_until("refusals counted as dropped", || {
        let text = d.daemon.state.access_audit.render_prometheus();
        let n: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("elfgate_audit_dropped_total "))?
            .parse()
            .ok()?;
        (n > 0).then_some(n)
    })
    .await;
    let written = 1_000 - dropped;
    let a = d.get("/v1/admin/audit?limit=1000").await;
    let entries = a.body["entries"].as_array().unwrap();
    assert!(
        entries.len() as u64 <= written,
        "{} > {written}",
        entries.len()
    );
    assert!(written < 1_000);
}
