//! Webhooks both ways, signed with Standard Webhooks' scheme: inbound hooks (`/v1/hooks/{name}`)
//! that refuse a replayed or stale delivery and do not tell a stranger which names exist, and the
//! deliveries of run ends, which carry the same signature, go to each target on its own (a dead
//! target holds up no other) and never to an address that is not public, whatever form it is
//! written in.

use crate::common;
use crate::suite::workflows::receiver;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use common::{Daemon, Opts};
use elfgate_mockllm::MockServer;
use elfgate_test_support::services::fleet_services;
use hmac::{KeyInit, Mac};
use serde_json::{Value, json};

/// Standard Webhooks' `v1,BASE64` over `ID.TIMESTAMP.BODY` under `key`.
fn standard_signature(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()))
}

/// `sha256=HEX` of the body alone, as GitHub signs.
fn body_signature(key: &[u8], body: &[u8]) -> String {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The key Standard Webhooks' libraries sign with for a `whsec_` secret (its decoded bytes).
const DEPLOY_KEY: &[u8] = b"the deploy hook's key bytes";

fn hook_opts() -> Opts {
    Opts {
        extra_toml: "[workflow_hooks.deploy]\nworkflow = \"on-deploy\"\nsecret_env = \"DEPLOY_HOOK_SECRET\"\n\
                     [workflow_hooks.github]\nworkflow = \"on-deploy\"\nsecret_env = \"GITHUB_HOOK_SECRET\"\n\
                     allow_replayable_signature = true\n\
                     [workflow_hooks.strict]\nworkflow = \"takes-nothing\"\nsecret_env = \"DEPLOY_HOOK_SECRET\"\n"
            .to_string(),
        env: vec![
            (
                "DEPLOY_HOOK_SECRET".to_string(),
                format!("whsec_{}", BASE64.encode(DEPLOY_KEY)),
            ),
            ("GITHUB_HOOK_SECRET".to_string(), "s3cret".to_string()),
        ],
        ..Opts::default()
    }
}

/// POSTs `body` to hook `name` with `headers`: the status and the JSON answer.
async fn deliver(d: &Daemon, name: &str, headers: &[(&str, String)], body: &[u8]) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .post(d.url(&format!("/v1/hooks/{name}")))
        .header("content-type", "application/json")
        .body(body.to_vec());
    for (h, v) in headers {
        req = req.header(*h, v);
    }
    let r = req.send().await.unwrap();
    (
        r.status().as_u16(),
        r.json::<Value>().await.unwrap_or(Value::Null),
    )
}

fn standard_headers(
    key: &[u8],
    id: &str,
    timestamp: i64,
    body: &[u8],
) -> Vec<(&'static str, String)> {
    vec![
        ("webhook-id", id.to_string()),
        ("webhook-timestamp", timestamp.to_string()),
        (
            "webhook-signature",
            standard_signature(key, id, timestamp, body),
        ),
    ]
}

async fn sessions(d: &Daemon) -> usize {
    let (_, list) = d.get("/v1/sessions").await;
    list["sessions"].as_array().unwrap().len()
}

/// A delivery signed with Standard Webhooks' headers starts its workflow once: sent again (a
/// captured delivery replayed) it is refused with 409 however often; one signed too long ago is
/// refused; a delivery to a name that does not exist is answered exactly as one with a wrong
/// signature, so that names cannot be probed; GitHub's body-only signature is taken only where
/// the hook allows it.
#[tokio::test]
async fn a_signed_hook_delivery_starts_one_run_however_often_it_is_replayed() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, hook_opts());
    let dir = tempfile::tempdir().unwrap();
    let (status, v) = d
        .post(
            "/v1/workflows",
            json!({"name": "on-deploy", "projectPath": dir.path().display().to_string(),
             "permissionMode": "bypassPermissions",
             "inputs": {"payload": {"type": "object"}},
             "steps": [{"id": "note", "tool": "write_file",
                        "arguments": {"path": "{{ inputs.payload.ref }}.txt",
                                      "content": "{{ inputs.payload.sha }}"}}]}),
        )
        .await;
    assert_eq!(status, 201, "{v}");
    let body = br#"{"ref": "main", "sha": "abc123"}"#;

    // Unsigned, or signed under a wrong key: the same answer for a hook that exists and for
    // one that does not.
    for headers in [vec![], standard_headers(b"wrong", "msg_1", now(), body)] {
        let known = deliver(&d, "deploy", &headers, body).await;
        let unknown = deliver(&d, "nobody", &headers, body).await;
        assert_eq!(known.0, 401, "{}", known.1);
        assert_eq!(known, unknown, "an unknown name answers as a known one");
        assert!(
            known.1["error"]["message"]
                .as_str()
                .unwrap()
                .contains("nothing started"),
            "{}",
            known.1
        );
    }
    // Signed, but ten minutes ago (or ahead): refused whoever signed it.
    for at in [now() - 600, now() + 600] {
        let (status, e) = deliver(
            &d,
            "deploy",
            &standard_headers(DEPLOY_KEY, "msg_old", at, body),
            body,
        )
        .await;
        assert_eq!(status, 401, "{e}");
        assert!(e.to_string().contains("webhook-timestamp"), "{e}");
    }
    // A body-only signature replays forever: refused unless the hook allows it.
    let (status, e) = deliver(
        &d,
        "deploy",
        &[("x-elfgate-signature-256", body_signature(DEPLOY_KEY, body))],
        body,
    )
    .await;
    assert_eq!(status, 401, "{e}");
    assert_eq!(sessions(&d).await, 0, "nothing started");

    let signed = standard_headers(DEPLOY_KEY, "msg_2Wz", now(), body);
    let (status, started) = deliver(&d, "deploy", &signed, body).await;
    assert_eq!(status, 201, "{started}");
    for _ in 0..4 {
        let (status, e) = deliver(&d, "deploy", &signed, body).await;
        assert_eq!(status, 409, "{e}");
        assert!(e.to_string().contains("msg_2Wz"), "{e}");
    }
    assert_eq!(sessions(&d).await, 1, "five sends, one run");
    let sid = started["sessionId"].as_str().unwrap();
    let run = started["runId"].as_str().unwrap();
    d.all_events_until_complete_of(sid, run).await;
    assert_eq!(
        std::fs::read_to_string(dir.path().join("main.txt")).unwrap(),
        "abc123"
    );

    // A delivery whose run cannot start (the workflow takes no payload) leaves its id free:
    // the sender's retry is answered the same, not as a replay.
    let (status, v) = d
        .post(
            "/v1/workflows",
            json!({"name": "takes-nothing", "projectPath": dir.path().display().to_string(),
             "steps": [{"id": "look", "tool": "glob", "arguments": {"pattern": "*"}}]}),
        )
        .await;
    assert_eq!(status, 201, "{v}");
    let refused = standard_headers(DEPLOY_KEY, "msg_strict", now(), body);
    for _ in 0..2 {
        let (status, e) = deliver(&d, "strict", &refused, body).await;
        assert_eq!(status, 422, "{e}");
    }

    let (status, e) = deliver(
        &d,
        "github",
        &[("x-hub-signature-256", body_signature(b"s3cret", body))],
        body,
    )
    .await;
    assert_eq!(status, 201, "{e}");
}

/// On a fleet, the ids of received deliveries are shared through the database: a delivery one
/// node took is refused by another.
#[tokio::test]
async fn a_hook_delivery_taken_by_one_node_is_refused_by_every_other() {
    let Some((database, nats)) = fleet_services().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    // The run ends go to a target as well: the per-target queue on PostgreSQL.
    let ops = receiver(0).await;
    let node = |id: &str| {
        let dir = tempfile::tempdir().unwrap().keep();
        let hooks = hook_opts();
        let keys = format!(
            "{}[webhooks]\nallow_private_addresses = true\n[[webhooks.targets]]\nname = \"ops\"\n\
             url = \"{}\"\nsecret_env = \"GITHUB_HOOK_SECRET\"\n",
            hooks.extra_toml, ops.url
        );
        let mut opts = crate::suite::fleet::node_opts(&dir, &database, &nats, id, &keys);
        opts.env.extend(hooks.env);
        Daemon::start_in(dir, &mock, opts)
    };
    let a = node("a");
    let b = node("b");
    let dir = tempfile::tempdir().unwrap();
    let (status, v) = a
        .post(
            "/v1/workflows",
            json!({"name": "on-deploy", "projectPath": dir.path().display().to_string(),
             "inputs": {"payload": {"type": "object"}},
             "steps": [{"id": "look", "tool": "glob", "arguments": {"pattern": "*"}}]}),
        )
        .await;
    assert_eq!(status, 201, "{v}");
    let body = br#"{"ref": "main"}"#;
    let signed = standard_headers(DEPLOY_KEY, "msg_fleet", now(), body);
    let (status, v) = deliver(&a, "deploy", &signed, body).await;
    assert_eq!(status, 201, "{v}");
    let (status, v) = deliver(&b, "deploy", &signed, body).await;
    assert_eq!(status, 409, "{v}");
    let seen = wait_for(&ops.seen, 1).await;
    let sent: Value = serde_json::from_str(&seen[0].1).unwrap();
    assert_eq!(sent["engine"], "workflow", "{sent}");
}

/// A hook's secret variable set to nothing would accept an HMAC under the empty key: the daemon
/// refuses to start, as for a blank token; so for a target's secret.
#[tokio::test]
async fn a_hook_or_target_secret_set_but_blank_is_refused_at_start() {
    let mock = MockServer::start().await.unwrap();
    for (toml, variable) in [
        (
            "[workflow_hooks.deploy]\nworkflow = \"w\"\nsecret_env = \"DEPLOY_HOOK_SECRET\"\n",
            "DEPLOY_HOOK_SECRET",
        ),
        (
            "[[webhooks.targets]]\nname = \"ops\"\nurl = \"https://ops.example.com/x\"\nsecret_env = \"OPS_SECRET\"\n",
            "OPS_SECRET",
        ),
        (
            "[webhooks]\nnotify_secret_env = \"NOTIFY_SECRET\"\n",
            "NOTIFY_SECRET",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let err = Daemon::start_refused(
            dir.path(),
            &mock,
            Opts {
                extra_toml: toml.to_string(),
                env: vec![(variable.to_string(), " ".to_string())],
                ..Opts::default()
            },
        );
        assert!(
            err.contains(&format!("{variable} is set but blank")),
            "{toml}: {err}"
        );
    }
}

/// A delivery over the body limit is 413 in the API's JSON error shape, like every other route.
#[tokio::test]
async fn a_hook_delivery_over_the_body_limit_is_413_in_the_json_error_shape() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, hook_opts());
    let big = vec![b'x'; 70_000];
    let (status, e) = deliver(
        &d,
        "deploy",
        &standard_headers(DEPLOY_KEY, "msg_big", now(), &big),
        &big,
    )
    .await;
    assert_eq!(status, 413, "{e}");
    assert_eq!(e["error"]["code"], "payload_too_large", "{e}");
}

/// Run-end deliveries carry Standard Webhooks' headers (`webhook-id` the delivery's id, the same
/// for every attempt), signed with the decoded key of a `whsec_` secret, besides Elfgate's own.
#[tokio::test]
async fn run_end_deliveries_are_signed_with_standard_webhooks_headers() {
    let mock = MockServer::start().await.unwrap();
    let r = receiver(1).await;
    let key = b"the ops target's key";
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: format!(
                "[webhooks]\nbackoff_ms = 20\nallow_private_addresses = true\n[[webhooks.targets]]\n\
                 name = \"ops\"\nurl = \"{}\"\nsecret_env = \"OPS_WEBHOOK_SECRET\"\n",
                r.url
            ),
            env: vec![(
                "OPS_WEBHOOK_SECRET".to_string(),
                format!("whsec_{}", BASE64.encode(key)),
            )],
            ..Opts::default()
        },
    );
    let (sid, run) = d.create(common::chat("hi", "mock:tokens=2")).await;
    d.all_events_until_complete_of(&sid, &run).await;
    let seen = wait_for(&r.seen, 2).await;
    let (_, list) = d.get("/v1/webhooks/deliveries").await;
    let id = list["deliveries"][0]["id"].as_str().unwrap().to_string();
    for (headers, body) in &seen {
        assert_eq!(
            headers["webhook-id"],
            id.as_str(),
            "one id for every attempt"
        );
        let ts: i64 = headers["webhook-timestamp"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((ts - now()).abs() < 300, "{ts}");
        let want = standard_signature(key, &id, ts, body.as_bytes());
        let sent = headers["webhook-signature"].to_str().unwrap();
        assert!(sent.split(' ').any(|s| s == want), "{sent} holds no {want}");
        assert_eq!(headers["x-elfgate-webhook-id"], id.as_str());
    }
}

type Seen = std::sync::Arc<std::sync::Mutex<Vec<(axum::http::HeaderMap, String)>>>;

/// Waits until `seen` holds `n` requests; returns them.
async fn wait_for(seen: &Seen, n: usize) -> Vec<(axum::http::HeaderMap, String)> {
    common::poll_until(&format!("{n} webhook requests"), || {
        let seen = seen.lock().unwrap();
        (seen.len() >= n).then(|| seen.clone())
    })
    .await
}

/// A target that accepts connections and never answers.
async fn dead_target() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    url
}

/// A target that never answers holds up no other: the healthy target gets every run's end while
/// the dead one's attempts wait out their (long) timeout, and the dead target's queue bound
/// drops only its own deliveries.
#[tokio::test]
async fn a_dead_webhook_target_holds_up_no_other() {
    let mock = MockServer::start().await.unwrap();
    let healthy = receiver(0).await;
    let dead = dead_target().await;
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: format!(
                "[webhooks]\nallow_private_addresses = true\ntimeout_secs = 600\nmax_pending = 2\n\
                 [[webhooks.targets]]\nname = \"dead\"\nurl = \"{dead}\"\nsecret_env = \"HOOK_SECRET\"\n\
                 [[webhooks.targets]]\nname = \"healthy\"\nurl = \"{}\"\nsecret_env = \"HOOK_SECRET\"\n",
                healthy.url
            ),
            env: vec![("HOOK_SECRET".to_string(), "hush".to_string())],
            ..Opts::default()
        },
    );
    let mut runs = Vec::new();
    let mut seen = Vec::new();
    // One run after the other, each delivered to the healthy target before the next ends
    // (while the dead target's attempts are all still waiting for an answer).
    for n in 1..=3 {
        let (sid, run) = d.create(common::chat("hi", "mock:tokens=2")).await;
        d.all_events_until_complete_of(&sid, &run).await;
        runs.push(run);
        seen = wait_for(&healthy.seen, n).await;
    }
    let mut delivered: Vec<String> = seen
        .iter()
        .map(|(_, body)| {
            let body: Value = serde_json::from_str(body).unwrap();
            body["run"]["id"].as_str().unwrap().to_string()
        })
        .collect();
    delivered.sort();
    runs.sort();
    assert_eq!(delivered, runs, "the healthy target got every run's end");
    let (_, list) = d.get("/v1/webhooks/deliveries").await;
    let to_dead: Vec<&Value> = list["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["target"] == "dead")
        .collect();
    assert_eq!(
        to_dead.len(),
        2,
        "the dead target's queue holds two: {list}"
    );
    assert!(to_dead.iter().all(|d| d["status"] == "pending"), "{list}");
}

/// A target whose address embeds a private IPv4 address in an IPv6 form, or is in a
/// special-purpose range, is refused as a plain private address is: the attempt fails saying so.
#[tokio::test]
async fn a_webhook_target_at_a_disguised_private_address_is_refused() {
    let mock = MockServer::start().await.unwrap();
    let hosts = [
        "[::127.0.0.1]",
        "[::ffff:0:127.0.0.1]",
        "[64:ff9b::127.0.0.1]",
        "[2002:7f00:1::1]",
        "[fec0::1]",
        "[100::1]",
        "224.0.0.1",
        "192.0.0.8",
    ];
    let mut toml = "[webhooks]\nmax_attempts = 1\ntimeout_secs = 5\n".to_string();
    for (i, host) in hosts.iter().enumerate() {
        toml.push_str(&format!(
            "[[webhooks.targets]]\nname = \"t{i}\"\nurl = \"http://{host}:9/hook\"\nsecret_env = \"HOOK_SECRET\"\n"
        ));
    }
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: toml,
            env: vec![("HOOK_SECRET".to_string(), "hush".to_string())],
            ..Opts::default()
        },
    );
    let (sid, run) = d.create(common::chat("hi", "mock:tokens=2")).await;
    d.all_events_until_complete_of(&sid, &run).await;
    let deadline = std::time::Instant::now() + common::GUARD;
    let list = loop {
        let (_, list) = d.get("/v1/webhooks/deliveries").await;
        let all = list["deliveries"].as_array().unwrap();
        if all.len() == hosts.len() && all.iter().all(|d| d["status"] != "pending") {
            break list;
        }
        assert!(std::time::Instant::now() < deadline, "{list}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let refused = list["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| {
            d["status"] == "failed"
                && d["lastError"]
                    .as_str()
                    .is_some_and(|e| e.contains("non-public address"))
        })
        .count();
    assert_eq!(refused, hosts.len(), "each refused as non-public: {list}");
}
