//! What a client of the fleet's NATS can and cannot do: every message a node sends is signed with
//! the fleet's secret, so a client without it forges nothing (no event reaches a follower, no
//! control request or answer is taken, no recent history is given out), a node that does not own
//! a session cannot speak for it, no credential travels on the bus, a captured request replayed
//! is not carried out again, and one whose wait ended (503) is never carried out later.

use crate::common;
use crate::suite::fleet::{metric, node_on, node_opts, signal};
use common::{Daemon, assert_contiguous, chat, text_of};
use elfgate_mockllm::MockServer;
use elfgate_test_support::services::{FLEET_SECRET, fleet_services};
use futures_util::StreamExt;
use hmac::{KeyInit, Mac};
use serde_json::json;
use std::time::Duration;

/// The dropped-messages counter of `reason` on `d`.
async fn dropped(d: &Daemon, reason: &str) -> f64 {
    // A connection of its own each time: one kept from before a node was paused may be closed
    // under the request when the node comes back.
    let text = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
        .get(d.url("/metrics"))
        .bearer_auth("fleet-token")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let name = format!("elfgate_fleet_messages_dropped_total{{reason=\"{reason}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&name)?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

/// Waits until `d`'s dropped-messages counter of `reason` passes `above`.
async fn until_dropped(d: &Daemon, reason: &str, above: f64) {
    let deadline = tokio::time::Instant::now() + common::GUARD;
    while dropped(d, reason).await <= above {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{reason} messages were not dropped"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Headers signing `payload` as `node` would, with `secret`: what a holder of the secret (or a
/// forger guessing it) sends.
fn signed_as(
    secret: &str,
    subject: &str,
    reply: Option<&str>,
    node: &str,
    payload: &[u8],
) -> async_nats::HeaderMap {
    let sent = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        .to_string();
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    for part in [subject, reply.unwrap_or(""), node, &sent] {
        mac.update(&(part.len() as u32).to_be_bytes());
        mac.update(part.as_bytes());
    }
    mac.update(payload);
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Elfgate-Node", node);
    headers.insert("Elfgate-Sent", sent.as_str());
    headers.insert(
        "Elfgate-Signature",
        hex::encode(mac.finalize().into_bytes()).as_str(),
    );
    headers
}

/// An SSE frame as the bus carries it.
fn frame(seq: u64, kind: &str, data: serde_json::Value) -> bytes::Bytes {
    bytes::Bytes::from(format!("id: {seq}\nevent: {kind}\ndata: {data}\n\n"))
}

/// The next message of `sub` whose subject ends with `suffix`.
/// The next message on `sub` whose subject ends with `suffix` and which is about `session` (in
/// its subject or its payload): the suite's other fleet tests share the NATS server, and their
/// nodes have the same names.
async fn message_ending(
    sub: &mut async_nats::Subscriber,
    suffix: &str,
    session: &str,
) -> async_nats::Message {
    tokio::time::timeout(common::GUARD, async {
        loop {
            let m = sub.next().await.expect("the subscription ended");
            let about =
                m.subject.contains(session) || contains_bytes(&m.payload, session.as_bytes());
            if m.subject.ends_with(suffix) && about {
                return m;
            }
        }
    })
    .await
    .expect("no such message on the bus")
}

/// Whether `needle` occurs in `haystack`.
fn contains_bytes(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test]
async fn a_bus_client_without_the_secret_forges_no_event_and_a_non_owner_none_either() {
    let Some((database, nats)) = fleet_services().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let a = node_on(&mock, &database, &nats, "a");
    let b = node_on(&mock, &database, &nats, "b");
    let bus = async_nats::connect(&nats).await.unwrap();
    let mut everything = bus.subscribe("elfgate.>").await.unwrap();

    let (sid, run) = a.create(chat("long", "mock:tokens=150,delay_ms=20")).await;
    let mut through_b = b.events(&sid, None).await;
    let mut seen = through_b.until_text("tok0 tok1 tok2 ").await;
    // The session's subject, as a node publishes on it.
    let subject = message_ending(&mut everything, &format!(".events.{sid}"), &sid)
        .await
        .subject
        .to_string();
    let next = seen.last().unwrap().seq() + 1;
    let forged_delta = |seq: u64, text: &str| {
        frame(
            seq,
            "streamDelta",
            json!({"seq": seq, "sessionId": sid, "runId": run, "type": "streamDelta",
                   "delta": {"kind": "text", "text": text}}),
        )
    };
    let forged_complete = |seq: u64| {
        frame(
            seq,
            "complete",
            json!({"seq": seq, "sessionId": sid, "runId": run, "type": "complete",
                   "finishReason": "stop"}),
        )
    };
    let (unsigned, bad, not_owner) = (
        dropped(&b, "unsigned").await,
        dropped(&b, "bad_signature").await,
        dropped(&b, "not_owner").await,
    );
    // Unsigned: the next seq, a seq far ahead (which would make a follower skip real events),
    // and a complete that would end the stream early.
    for payload in [
        forged_delta(next, "FORGED"),
        forged_delta(next + 50, "FORGED"),
        forged_complete(next + 1),
    ] {
        bus.publish(subject.clone(), payload).await.unwrap();
    }
    // Signed with another secret, as if by the owner.
    let wrong = "not-the-fleet-secret-0123456789abcdef0123456789";
    let payload = forged_delta(next, "FORGED");
    bus.publish_with_headers(
        subject.clone(),
        signed_as(wrong, &subject, None, "a", &payload),
        payload,
    )
    .await
    .unwrap();
    // Signed with the fleet's secret by a node that does not own the session.
    let payload = forged_complete(next);
    bus.publish_with_headers(
        subject.clone(),
        signed_as(FLEET_SECRET, &subject, None, "c", &payload),
        payload,
    )
    .await
    .unwrap();
    bus.flush().await.unwrap();
    until_dropped(&b, "unsigned", unsigned + 2.0).await;
    until_dropped(&b, "bad_signature", bad).await;
    until_dropped(&b, "not_owner", not_owner).await;

    // The follower saw the run as the owner ran it: every token, in order, one complete.
    seen.extend(through_b.until_complete(&run).await);
    assert_contiguous(&seen);
    let text = text_of(&seen);
    assert!(!text.contains("FORGED"), "{text}");
    assert!(text.ends_with("tok149 "), "{text}");
    let completes: Vec<_> = seen.iter().filter(|e| e.event == "complete").collect();
    assert_eq!(completes.len(), 1);
    assert_eq!(completes[0].data["finishReason"], "stop");
}

#[tokio::test]
async fn a_bus_client_gets_no_answer_from_a_node_and_cannot_answer_in_its_place() {
    let Some((database, nats)) = fleet_services().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let a = node_on(&mock, &database, &nats, "a");
    let b = node_on(&mock, &database, &nats, "b");
    let bus = async_nats::connect(&nats).await.unwrap();
    let mut everything = bus.subscribe("elfgate.>").await.unwrap();
    let (sid, run) = a.create(chat("long", "mock:tokens=2000,delay_ms=10")).await;
    let subject = message_ending(&mut everything, &format!(".events.{sid}"), &sid)
        .await
        .subject
        .to_string();
    let fleet = subject.split('.').nth(1).unwrap().to_string();

    // A's memory of the session, asked without the secret: A drops the question unanswered.
    let before = dropped(&a, "unsigned").await;
    let inbox = bus.new_inbox();
    let mut answers = bus.subscribe(inbox.clone()).await.unwrap();
    bus.publish_with_reply(
        format!("elfgate.{fleet}.recent.{sid}"),
        inbox.clone(),
        "0".into(),
    )
    .await
    .unwrap();
    // A control request straight onto A's subject, with the daemon's token as a forwarding node
    // once sent it: dropped unanswered too, and the run goes on.
    let envelope = json!({
        "method": "POST",
        "uri": format!("/v1/sessions/{sid}/interrupt"),
        "headers": [["authorization", "Bearer fleet-token"], ["content-type", "application/json"]],
        "body": "{}",
    });
    bus.publish_with_reply(
        format!("elfgate.{fleet}.node.a.http"),
        inbox.clone(),
        serde_json::to_vec(&envelope).unwrap().into(),
    )
    .await
    .unwrap();
    bus.flush().await.unwrap();
    until_dropped(&a, "unsigned", before + 1.0).await;
    let (_, s) = a.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(s["status"], "running", "{s}");

    // A client that answers every request for A before A does, unsigned and signed by another
    // node: B takes A's answer only.
    let mut a_requests = bus
        .subscribe(format!("elfgate.{fleet}.node.a.http"))
        .await
        .unwrap();
    let impostor = bus.clone();
    let answering = tokio::spawn(async move {
        while let Some(m) = a_requests.next().await {
            let Some(reply) = m.reply else { continue };
            let forged = bytes::Bytes::from_static(b"\0\0\0\x0f{\"status\":200}{\"forged\":true}");
            let _ = impostor.publish(reply.clone(), forged.clone()).await;
            let headers = signed_as(FLEET_SECRET, &reply, None, "c", &forged);
            let _ = impostor.publish_with_headers(reply, headers, forged).await;
            let _ = impostor.flush().await;
        }
    });
    let (status, s) = b.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(status, 200, "{s}");
    assert_eq!(s["status"], "running", "{s}");
    assert!(s.get("forged").is_none(), "{s}");
    let (status, body) = b
        .post(
            &format!("/v1/sessions/{sid}/interrupt"),
            json!({"wait": true}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["interrupted"], true, "{body}");
    answering.abort();
    let events = b.all_events_until_complete_of(&sid, &run).await;
    assert_eq!(events.last().unwrap().data["finishReason"], "interrupted");
    // Nothing ever came back to the client's own questions.
    assert!(
        tokio::time::timeout(Duration::from_millis(200), answers.next())
            .await
            .is_err(),
        "a node answered a client of the bus"
    );
}

#[tokio::test]
async fn no_credential_goes_on_the_bus_and_a_replayed_request_is_not_carried_out_again() {
    let Some((database, nats)) = fleet_services().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let a = node_on(&mock, &database, &nats, "a");
    let b = node_on(&mock, &database, &nats, "b");
    let bus = async_nats::connect(&nats).await.unwrap();
    let mut everything = bus.subscribe("elfgate.>").await.unwrap();
    let (sid, run1) = a.create(chat("long", "mock:tokens=2000,delay_ms=10")).await;
    a.events(&sid, None).await.until_text("tok0 ").await;

    // A prompt queued through B: forwarded to A, which owns the session.
    let (status, body) = b
        .post(
            &format!("/v1/sessions/{sid}/messages"),
            json!({"prompt": "queued once xyzzy", "onBusy": "enqueue", "model": "mock:tokens=2"}),
        )
        .await;
    assert!(status == 200 || status == 202, "{status} {body}");
    let queued_run = body["runId"].as_str().unwrap().to_string();
    let request = message_ending(&mut everything, ".node.a.http", &sid).await;
    // No credential on the bus: neither in the message nor in its headers.
    let mut seen = String::from_utf8_lossy(&request.payload).into_owned();
    for (k, v) in request.headers.iter().flat_map(|h| h.iter()) {
        seen.push_str(&format!("{k}: {v:?}\n"));
    }
    assert!(!seen.contains("fleet-token"), "{seen}");
    assert!(
        !seen.to_ascii_lowercase().contains("authorization"),
        "{seen}"
    );
    assert!(seen.contains("queued once xyzzy"), "{seen}");

    // The captured request, sent again as it was (signature and all): dropped as a replay.
    let before = dropped(&a, "replayed").await;
    bus.publish_with_reply_and_headers(
        request.subject.clone(),
        request.reply.clone().unwrap(),
        request.headers.clone().unwrap(),
        request.payload.clone(),
    )
    .await
    .unwrap();
    bus.flush().await.unwrap();
    until_dropped(&a, "replayed", before).await;
    // The prompt is queued once.
    let (_, state) = a.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(state["queuedRuns"], 1, "{state}");
    let (status, run) = a
        .get(&format!("/v1/sessions/{sid}/runs/{queued_run}"))
        .await;
    assert_eq!(status, 200, "{run}");

    // A client's x-elfgate-forwarded-by means nothing: the interrupt is still forwarded to A.
    let resp = b
        .http
        .post(b.url(&format!("/v1/sessions/{sid}/interrupt")))
        .bearer_auth("fleet-token")
        .header("x-elfgate-forwarded-by", "b")
        .json(&json!({"wait": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["interrupted"], true, "{body}");
    let first = a.all_events_until_complete_of(&sid, &run1).await;
    assert_eq!(first.last().unwrap().data["finishReason"], "interrupted");
}

#[tokio::test]
async fn a_request_whose_wait_ended_503_is_never_carried_out_when_its_owner_resumes() {
    let Some((database, nats)) = fleet_services().await else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    let a = node_on(&mock, &database, &nats, "a");
    let b = node_on(&mock, &database, &nats, "b");
    let (sid, run1) = a.create(chat("long", "mock:tokens=2000,delay_ms=10")).await;
    a.events(&sid, None).await.until_text("tok0 ").await;

    // A stalls; a prompt sent through B waits for it, in vain: 503.
    let before = dropped(&a, "replayed").await;
    signal(&a, "STOP");
    let (status, body) = b
        .post(
            &format!("/v1/sessions/{sid}/messages"),
            json!({"prompt": "late plugh", "onBusy": "enqueue", "model": "mock:tokens=2",
                   "clientMsgId": "late-1"}),
        )
        .await;
    assert_eq!(status, 503, "{body}");
    // Meanwhile the session was adopted (A's lease ran out) and the first run ended.
    let first = b.all_events_until_complete_of(&sid, &run1).await;
    assert_eq!(first.last().unwrap().data["finishReason"], "node_lost");

    // A comes back and finds the request past its deadline: dropped, never run. The client's
    // retry (the same clientMsgId) runs once.
    signal(&a, "CONT");
    until_dropped(&a, "replayed", before).await;
    let (status, body) = b
        .post(
            &format!("/v1/sessions/{sid}/messages"),
            json!({"prompt": "late plugh", "onBusy": "enqueue", "model": "mock:tokens=2",
                   "clientMsgId": "late-1"}),
        )
        .await;
    assert!(status == 200 || status == 202, "{status} {body}");
    let run2 = body["runId"].as_str().unwrap().to_string();
    b.all_events_until_complete_of(&sid, &run2).await;
    let (_, messages) = b.get(&format!("/v1/sessions/{sid}/messages")).await;
    let late = messages["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user" && m.to_string().contains("late plugh"))
        .count();
    assert_eq!(late, 1, "{messages}");
}

#[tokio::test]
async fn a_prompt_larger_than_a_nats_message_goes_through_another_node_whole() {
    let Some((database, _)) = fleet_services().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("nats.conf");
    std::fs::write(&conf, "max_payload: 65536\n").unwrap();
    let Some(nats) =
        elfgate_test_support::services::PrivateNats::start_with(&["-c", conf.to_str().unwrap()])
    else {
        return;
    };
    let mock = MockServer::start().await.unwrap();
    // The default body limit (1 MiB), not the suite's 64 KiB.
    let node = |id: &str| {
        let dir = tempfile::tempdir().unwrap().keep();
        let mut opts = node_opts(&dir, &database, &nats.url, id, "");
        opts.env
            .push(("ELFGATE_SERVER__BODY_LIMIT_BYTES".into(), "1048576".into()));
        Daemon::start_in(dir, &mock, opts)
    };
    let a = node("a");
    let b = node("b");
    let (sid, run1) = a.create(chat("long", "mock:tokens=2000,delay_ms=10")).await;
    a.events(&sid, None).await.until_text("tok0 ").await;
    // 900 KB of prompt, under the daemon's 1 MiB body limit, fourteen times NATS's.
    let prompt: String = (0..100_000)
        .map(|i| format!("w{i:07} "))
        .collect::<String>()[..900_000]
        .to_string();
    let (status, body) = b
        .post(
            &format!("/v1/sessions/{sid}/messages"),
            json!({"prompt": prompt, "onBusy": "interrupt", "model": "mock:tokens=2"}),
        )
        .await;
    assert!(status == 200 || status == 202, "{status} {body}");
    let run2 = body["runId"].as_str().unwrap().to_string();
    assert!(metric(&b, "elfgate_fleet_requests_forwarded_total").await >= 1.0);
    a.all_events_until_complete_of(&sid, &run1).await;
    let events = a.all_events_until_complete_of(&sid, &run2).await;
    assert_eq!(events.last().unwrap().data["finishReason"], "stop");
    let (_, messages) = a.get(&format!("/v1/sessions/{sid}/messages")).await;
    let whole = messages["messages"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["role"] == "user" && m.to_string().contains(&prompt));
    assert!(whole, "the prompt did not arrive whole");
}
