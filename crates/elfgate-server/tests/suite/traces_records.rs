//! A run's trace beyond its spans (docs/observability.md): the trace id kept in the run's record,
//! and the run-end deliveries (a `[webhooks]` target, a session's `notifyUrl`) that carry it in
//! their `traceparent`.

use crate::common;
use crate::scripted;
use crate::suite::traces::{named, telemetry_toml, trace_id_of, traced_daemon};
use crate::suite::workflows::receiver;

use common::{Daemon, Opts};
use elfgate_mockllm::MockServer;
use elfgate_test_support::phoenix::{Phoenix, span};
use scripted::run;
use serde_json::json;

#[tokio::test]
async fn the_run_record_keeps_the_trace_id_of_its_init_event_and_spans() {
    let Some(store) = Phoenix::shared().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let d = traced_daemon(&mock, &store);
    let (sid, run_id, evs) = run(&d, common::chat("hello", "mock:tokens=3")).await;
    let trace_id = trace_id_of(&evs);
    assert_eq!(trace_id.len(), 32, "{trace_id}");

    let (status, record) = d.get(&format!("/v1/sessions/{sid}/runs/{run_id}")).await;
    assert_eq!(status, 200, "{record}");
    assert_eq!(record["traceId"], trace_id.as_str(), "{record}");

    let spans = store
        .spans_until("the chat run's spans", Some(&trace_id), |s| {
            named(s, "invoke_agent chat").len() == 1
        })
        .await;
    let root = span(&spans, "invoke_agent chat");
    assert_eq!(root.trace_id, trace_id);
    assert_eq!(root.attr_str("elfgate.run.id"), Some(run_id.as_str()));
}

#[tokio::test]
async fn an_untraced_run_has_no_trace_id_in_its_record() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let (sid, run_id, evs) = run(&d, common::chat("hello", "mock:tokens=3")).await;
    assert!(
        scripted::of(&evs, "init")[0].data["systemInfo"]
            .get("traceId")
            .is_none()
    );
    let (status, record) = d.get(&format!("/v1/sessions/{sid}/runs/{run_id}")).await;
    assert_eq!(status, 200, "{record}");
    assert!(record.get("traceId").is_none(), "{record}");
}

#[tokio::test]
async fn run_end_deliveries_carry_the_runs_trace_in_their_traceparent() {
    let Some(store) = Phoenix::shared().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let hook = receiver(0).await;
    let notify = receiver(0).await;
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: format!(
                "{}\n[webhooks]\nbackoff_ms = 20\nallow_private_addresses = true\n\
                 notify_secret_env = \"NOTIFY_SECRET\"\n[[webhooks.targets]]\nname = \"ops\"\n\
                 url = \"{}\"\nsecret_env = \"OPS_WEBHOOK_SECRET\"\n",
                telemetry_toml(&store),
                hook.url
            ),
            env: vec![
                ("OPS_WEBHOOK_SECRET".to_string(), "hush".to_string()),
                ("NOTIFY_SECRET".to_string(), "psst".to_string()),
            ],
            ..Opts::default()
        },
    );
    let mut body = common::chat("hello", "mock:tokens=3");
    body["engineConfig"] = json!({"notifyUrl": notify.url});
    let (_, _, evs) = run(&d, body).await;
    let trace_id = trace_id_of(&evs);

    let mut sent = Vec::new();
    for (what, r) in [("the webhook", &hook), ("the notifyUrl POST", &notify)] {
        let headers = common::poll_until(what, || {
            r.seen.lock().unwrap().first().map(|(h, _)| h.clone())
        })
        .await;
        let tp = headers["traceparent"].to_str().unwrap().to_string();
        let parts: Vec<&str> = tp.split('-').collect();
        assert_eq!(parts.len(), 4, "{tp}");
        assert_eq!(parts[1], trace_id, "{what}: {tp}");
        sent.push(parts[2].to_string());
    }

    // Each delivery is a `POST` client span of the run's trace, the one its header names.
    let spans = store
        .spans_until("the deliveries' spans", Some(&trace_id), |s| {
            named(s, "POST").len() == 2
        })
        .await;
    let mut targets: Vec<&str> = named(&spans, "POST")
        .iter()
        .map(|s| {
            assert!(sent.contains(&s.span_id), "{:?} not in {sent:?}", s.span_id);
            assert_eq!(s.attr_u64("http.response.status_code"), Some(204));
            s.attr_str("elfgate.webhook.target").unwrap()
        })
        .collect();
    targets.sort_unstable();
    assert_eq!(targets, ["notifyUrl", "ops"]);
}
