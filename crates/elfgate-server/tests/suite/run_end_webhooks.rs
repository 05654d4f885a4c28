//! Run-end webhooks whatever ends the run: a fleet node's drain (`node_shutdown`), another node's
//! adoption of a dead node's sessions (`node_lost`) and a restart's recovery (`daemon_restart`)
//! each queue the run's deliveries with its end, so that exactly one signed delivery arrives.

use crate::common;
use crate::suite::fleet::node_opts;
use crate::suite::workflows::{Receiver, receiver};

use common::{Daemon, Opts, chat};
use elfgate_mockllm::MockServer;
use elfgate_test_support::services::fleet_services;
use hmac::{KeyInit, Mac};
use serde_json::Value;

const SECRET: &str = "run-end-secret";

/// `[webhooks]` with one target, `ops`, at `url`.
fn webhooks_toml(url: &str) -> String {
    format!(
        "\n[webhooks]\nbackoff_ms = 20\nallow_private_addresses = true\n[[webhooks.targets]]\n\
         name = \"ops\"\nurl = \"{url}\"\nsecret_env = \"OPS_WEBHOOK_SECRET\"\n"
    )
}

/// A fleet node `id` that sends run ends to `url`, with more `[cluster]` keys.
fn webhook_node(
    mock: &MockServer,
    database: &str,
    nats: &str,
    id: &str,
    keys: &str,
    url: &str,
) -> Daemon {
    let dir = tempfile::tempdir().unwrap().keep();
    let mut opts = node_opts(&dir, database, nats, id, keys);
    opts.extra_toml.push_str(&webhooks_toml(url));
    opts.env
        .push(("OPS_WEBHOOK_SECRET".to_string(), SECRET.to_string()));
    Daemon::start_in(dir, mock, opts)
}

/// Waits for the first request `r` receives; checks its signature and that it tells of `run`'s
/// end with `reason`; returns its delivery id.
async fn one_signed_delivery(r: &Receiver, run: &str, reason: &str) -> String {
    let (headers, body) = common::poll_until("a run-end webhook", || {
        r.seen.lock().unwrap().first().cloned()
    })
    .await;
    let ts = headers["x-elfgate-webhook-timestamp"].to_str().unwrap();
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(format!("{ts}.{body}").as_bytes());
    let want = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
    assert_eq!(headers["x-elfgate-signature-256"], want.as_str());
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["type"], "run.ended", "{body}");
    assert_eq!(body["run"]["id"], run, "{body}");
    assert_eq!(body["run"]["finishReason"], reason, "{body}");
    body["id"].as_str().unwrap().to_string()
}

/// The deliveries `d` lists, once none is pending; asserts that they are the one delivery `id`.
async fn exactly_one_delivered(d: &Daemon, id: &str) {
    let deadline = std::time::Instant::now() + common::GUARD;
    loop {
        let (status, list) = d.get("/v1/webhooks/deliveries").await;
        assert_eq!(status, 200, "{list}");
        let all = list["deliveries"].as_array().unwrap();
        if all.iter().all(|x| x["status"] != "pending") {
            assert_eq!(all.len(), 1, "{list}");
            assert_eq!(all[0]["id"], id, "{list}");
            assert_eq!(all[0]["status"], "delivered", "{list}");
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{list}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Two fleet nodes sending run ends to one receiver, and a long run on A that B follows.
struct TwoNodes {
    _mock: MockServer,
    r: Receiver,
    a: Daemon,
    b: Daemon,
    run: String,
    _through_b: common::Sse,
}

/// [`TwoNodes`], A with more `[cluster]` keys `a_keys`; None without the fleet's services.
async fn two_nodes_with_a_run_on_a(a_keys: &str) -> Option<TwoNodes> {
    let (database, nats) = fleet_services().await?;
    let mock = MockServer::start().await.unwrap();
    let r = receiver(0).await;
    let a = webhook_node(&mock, &database, &nats, "a", a_keys, &r.url);
    let b = webhook_node(&mock, &database, &nats, "b", "", &r.url);
    let (sid, run) = a.create(chat("long", "mock:tokens=5000,delay_ms=10")).await;
    let mut through_b = b.events(&sid, None).await;
    through_b.until_text("tok0 tok1 ").await;
    Some(TwoNodes {
        _mock: mock,
        r,
        a,
        b,
        run,
        _through_b: through_b,
    })
}

/// A run that a stopping node's drain ends (`node_shutdown`) is told once, by the node left.
#[tokio::test]
async fn a_run_ended_by_a_nodes_drain_is_delivered_once() {
    let Some(mut f) = two_nodes_with_a_run_on_a("drain_secs = 1").await else {
        return;
    };
    let status = f.a.terminate();
    assert!(status.success(), "{status:?}");
    let id = one_signed_delivery(&f.r, &f.run, "node_shutdown").await;
    exactly_one_delivered(&f.b, &id).await;
    assert_eq!(f.r.seen.lock().unwrap().len(), 1);
}

/// A run that another node ends because its own node died (`node_lost`) is told once.
#[tokio::test]
async fn a_run_ended_by_adoption_is_delivered_once() {
    let Some(mut f) = two_nodes_with_a_run_on_a("").await else {
        return;
    };
    f.a.kill();
    let id = one_signed_delivery(&f.r, &f.run, "node_lost").await;
    exactly_one_delivered(&f.b, &id).await;
    assert_eq!(f.r.seen.lock().unwrap().len(), 1);
}
/// A run that a restart finds unfinished and ends (`daemon_restart`) is told once.
#[tokio::test]
async fn a_run_ended_by_a_restart_is_delivered_once() {
    let mock = MockServer::start().await.unwrap();
    let r = receiver(0).await;
    let opts = || Opts {
        extra_toml: webhooks_toml(&r.url),
        env: vec![("OPS_WEBHOOK_SECRET".to_string(), SECRET.to_string())],
        ..Opts::default()
    };
    let mut d = Daemon::start(&mock, opts());
    let (sid, run) = d.create(chat("go", "mock:tokens=50,stall_after=2")).await;
    let mut sse = d.events(&sid, None).await;
    sse.until_text("tok0 tok1 ").await;
    d.kill();
    drop(sse);

    let d = Daemon::start_in(d.dir.clone(), &mock, opts());
    let id = one_signed_delivery(&r, &run, "daemon_restart").await;
    exactly_one_delivered(&d, &id).await;
    assert_eq!(r.seen.lock().unwrap().len(), 1);
}
