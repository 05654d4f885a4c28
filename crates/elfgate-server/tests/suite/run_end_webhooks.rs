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
    opts.log_file = Some(dir.join("node.log"));
    Daemon::start_in(dir, mock, opts)
}

/// Waits for one request per run of `runs` at `r`; checks that each is signed and tells of its
/// run's end with `reason`; returns their delivery ids.
async fn signed_deliveries(r: &Receiver, runs: &[&str], reason: &str) -> Vec<String> {
    let seen = common::poll_until("the run-end webhooks", || {
        let seen = r.seen.lock().unwrap();
        (seen.len() >= runs.len()).then(|| seen.clone())
    })
    .await;
    let mut told = Vec::new();
    let mut ids = Vec::new();
    for (headers, body) in &seen {
        let ts = headers["x-elfgate-webhook-timestamp"].to_str().unwrap();
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
        mac.update(format!("{ts}.{body}").as_bytes());
        let want = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
        assert_eq!(headers["x-elfgate-signature-256"], want.as_str());
        let body: Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["type"], "run.ended", "{body}");
        assert_eq!(body["run"]["finishReason"], reason, "{body}");
        told.push(body["run"]["id"].as_str().unwrap().to_string());
        ids.push(body["id"].as_str().unwrap().to_string());
    }
    told.sort();
    let mut want: Vec<String> = runs.iter().map(ToString::to_string).collect();
    want.sort();
    assert_eq!(told, want, "one delivery per run");
    ids
}

/// Waits until none of the deliveries `d` lists is pending; asserts that they are `ids`, each
/// delivered.
async fn exactly_delivered(d: &Daemon, ids: &[String]) {
    let deadline = std::time::Instant::now() + common::GUARD;
    loop {
        let (status, list) = d.get("/v1/webhooks/deliveries").await;
        assert_eq!(status, 200, "{list}");
        let all = list["deliveries"].as_array().unwrap();
        if all.iter().all(|x| x["status"] != "pending") {
            let mut listed: Vec<&str> = all.iter().map(|x| x["id"].as_str().unwrap()).collect();
            listed.sort();
            let mut want: Vec<&str> = ids.iter().map(String::as_str).collect();
            want.sort();
            assert_eq!(listed, want, "{list}");
            assert!(all.iter().all(|x| x["status"] == "delivered"), "{list}");
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

/// Each run that a stopping node's drain ends (`node_shutdown`) is told once, by the node left.
#[tokio::test]
async fn runs_ended_by_a_nodes_drain_are_each_delivered_once() {
    let Some(mut f) = two_nodes_with_a_run_on_a("drain_secs = 1").await else {
        return;
    };
    // A second run on A: each run the drain ends is told, not only the first.
    let (sid2, run2) =
        f.a.create(chat("long too", "mock:tokens=5000,delay_ms=10"))
            .await;
    f.a.events(&sid2, None).await.until_text("tok0 ").await;
    let status = f.a.terminate();
    assert!(status.success(), "{status:?}");
    let ids = signed_deliveries(&f.r, &[&f.run, &run2], "node_shutdown").await;
    exactly_delivered(&f.b, &ids).await;
    assert_eq!(f.r.seen.lock().unwrap().len(), 2);
    // The drain's ends of the runs say nothing of a full queue: none was.
    let log = std::fs::read_to_string(f.a.dir.join("node.log")).unwrap();
    assert!(!log.contains("queue is full"), "{log}");
}

/// A run that another node ends because its own node died (`node_lost`) is told once.
#[tokio::test]
async fn a_run_ended_by_adoption_is_delivered_once() {
    let Some(mut f) = two_nodes_with_a_run_on_a("").await else {
        return;
    };
    f.a.kill();
    let ids = signed_deliveries(&f.r, &[&f.run], "node_lost").await;
    exactly_delivered(&f.b, &ids).await;
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
    let ids = signed_deliveries(&r, &[&run], "daemon_restart").await;
    exactly_delivered(&d, &ids).await;
    assert_eq!(r.seen.lock().unwrap().len(), 1);
}
