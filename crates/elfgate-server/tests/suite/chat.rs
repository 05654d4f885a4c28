//! Chat, st-chat and api sessions end to end: streaming order, history, interrupt, reconnect,
//! upstream retries and failures.

use crate::common;

use crate::scripted::user_prompts;
use common::{Daemon, Opts, chat, poll_until, text_of, types};
use elfgate_mockllm::{MockServer, Outcome};
use serde_json::json;

/// Asserts that `want` appears in `got` in this order (other events may sit between).
fn assert_in_order(got: &[&str], want: &[&str]) {
    let mut it = got.iter();
    for w in want {
        assert!(
            it.any(|g| g == w),
            "expected {want:?} in order, got {got:?}"
        );
    }
}

fn assert_contiguous(evs: &[common::Ev], from: u64) {
    for (i, e) in evs.iter().enumerate() {
        assert_eq!(e.seq(), from + i as u64, "gap or duplicate at {i}: {evs:?}");
        assert_eq!(e.id, Some(e.seq()));
    }
}

#[tokio::test]
async fn chat_streams_in_order_and_resume_sends_history() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let (sid, run1) = d
        .create(
            json!({"engine": "chat", "prompt": "first question", "model": "mock:tokens=4",
                       "systemPrompt": "be brief"}),
        )
        .await;
    let mut sse = d.events(&sid, None).await;
    let evs = sse.until_complete(&run1).await;
    assert_in_order(
        &types(&evs),
        &[
            "sessionCreated",
            "userMessage",
            "streamDelta",
            "assistantMessage",
            "result",
            "complete",
        ],
    );
    assert_eq!(types(&evs).iter().filter(|t| **t == "complete").count(), 1);
    assert_eq!(text_of(&evs), "tok0 tok1 tok2 tok3 ");
    assert_contiguous(&evs, 1);
    let complete = evs.last().unwrap();
    assert_eq!(complete.data["finishReason"], "stop");
    let result = &evs[evs.len() - 2];
    assert_eq!(result.event, "result");
    assert_eq!(result.data["stats"]["outputTokens"], 4);

    // Resume: the second request upstream carries the first turn.
    let run2 = d
        .send(
            &sid,
            json!({"prompt": "second question", "model": "mock:tokens=2"}),
        )
        .await;
    let evs2 = sse.until_complete(&run2).await;
    assert_eq!(text_of(&evs2), "tok0 tok1 ");
    assert_contiguous(&evs2, evs.len() as u64 + 1);
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 2);
    let msgs = reqs[1].body["messages"].as_array().unwrap();
    let roles: Vec<&str> = msgs.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
    assert_eq!(msgs[0]["content"], "be brief");
    assert_eq!(msgs[1]["content"], "first question");
    assert_eq!(msgs[2]["content"], "tok0 tok1 tok2 tok3 ");
    assert_eq!(msgs[3]["content"], "second question");

    // Both turns are stored.
    let (status, v) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    assert_eq!(status, 200);
    let stored = v["messages"].as_array().unwrap();
    assert_eq!(stored.len(), 4);
    assert_eq!(stored[0]["role"], "user");
    assert_eq!(stored[1]["role"], "assistant");
    assert_eq!(stored[1]["blocks"][0]["text"], "tok0 tok1 tok2 tok3 ");
    assert_eq!(stored[1]["outputTokens"], 4);
    assert_eq!(stored[3]["blocks"][0]["text"], "tok0 tok1 ");
    assert_eq!(stored[2]["parentId"], stored[1]["id"]);

    // The run row has its figures.
    let (status, run) = d.get(&format!("/v1/sessions/{sid}/runs/{run2}")).await;
    assert_eq!(status, 200);
    assert_eq!(run["status"], "completed");
    assert_eq!(run["finishReason"], "stop");
    assert_eq!(run["outputTokens"], 2);
}

#[tokio::test]
async fn chat_over_anthropic_with_thinking_and_branching() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let (sid, run1) = d
        .create(
            json!({"engine": "chat", "prompt": "one", "providerId": "mock-anthropic",
                       "model": "mock:tokens=2,think=2", "thinkingLevel": "low"}),
        )
        .await;
    let mut sse = d.events(&sid, None).await;
    let evs = sse.until_complete(&run1).await;
    let thinking: String = evs
        .iter()
        .filter(|e| e.event == "streamDelta" && e.data["delta"]["kind"] == "thinking")
        .map(|e| e.data["delta"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(thinking, "think0 think1 ");
    let (_, v) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    let first_user = v["messages"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(v["messages"][1]["blocks"][0]["type"], "thinking");
    assert!(mock.requests()[0].body["thinking"]["budget_tokens"].is_number());

    // Branch from the first user message: the first answer is not part of the branch.
    let run2 = d
        .send(
            &sid,
            json!({"prompt": "two", "parentId": first_user, "providerId": "mock-anthropic",
                           "model": "mock:tokens=1"}),
        )
        .await;
    sse.until_complete(&run2).await;
    let req = &mock.requests()[1].body;
    let msgs = req["messages"].as_array().unwrap();
    // Anthropic needs alternating roles: the two user turns are merged, with no answer between.
    assert_eq!(msgs.len(), 1, "{req}");
    assert_eq!(msgs[0]["role"], "user");
    let texts: Vec<&str> = msgs[0]["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["one", "two"]);
}

#[tokio::test]
async fn st_chat_sends_no_history_and_api_leaves_nothing_active() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let (sid, run1) = d
        .create(json!({"engine": "st-chat", "prompt": "alpha", "model": "mock:tokens=2"}))
        .await;
    let mut sse = d.events(&sid, None).await;
    sse.until_complete(&run1).await;
    let run2 = d.send(&sid, json!({"prompt": "beta"})).await;
    sse.until_complete(&run2).await;
    let body = &mock.requests()[1].body;
    let msgs = body["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 1, "st-chat sent history: {body}");
    assert_eq!(msgs[0]["content"], "beta");
    // st-chat still stores both turns.
    let (_, v) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    assert_eq!(v["messages"].as_array().unwrap().len(), 4);

    let (sid, run) = d
        .create(json!({"engine": "api", "prompt": "gamma", "model": "mock:tokens=3"}))
        .await;
    let evs = d.events(&sid, None).await.until_complete(&run).await;
    assert_eq!(text_of(&evs), "tok0 tok1 tok2 ");
    let (_, s) = d.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(s["status"], "idle");
    assert!(s.get("activeRunId").is_none());
    let (_, engines) = d.get("/v1/engines").await;
    for e in engines["engines"].as_array().unwrap() {
        assert_eq!(e["activeSessions"], 0, "{e}");
    }
    let names: Vec<&str> = engines["engines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "api",
            "chat",
            "claude-sdk",
            "cli",
            "st-chat",
            "tinyelf",
            "workflow"
        ]
    );
}

#[tokio::test]
async fn interrupt_stops_the_upstream_stream_and_keeps_partial_text() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let (sid, run) = d
        .create(chat(
            "tell me a long story",
            "mock:tokens=100,stall_after=3",
        ))
        .await;
    let mut sse = d.events(&sid, None).await;
    // The mock streams 3 tokens, then stalls: the run is mid-stream.
    sse.until_text("tok0 tok1 tok2 ").await;
    let (status, v) = d
        .post(
            &format!("/v1/sessions/{sid}/interrupt"),
            json!({"wait": true}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(v["interrupted"], true);
    assert_eq!(v["runId"], run.as_str());
    assert_eq!(v["status"], "interrupted");
    let rest = sse.until_complete(&run).await;
    let t = types(&rest);
    assert_in_order(&t, &["assistantMessage", "result", "complete"]);
    assert_eq!(t.iter().filter(|x| **x == "complete").count(), 1);
    assert_eq!(rest.last().unwrap().data["finishReason"], "interrupted");

    // Partial text stored; the session is idle; the upstream connection was closed by us.
    let (_, msgs) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    assert_eq!(msgs["messages"][1]["blocks"][0]["text"], "tok0 tok1 tok2 ");
    let (_, s) = d.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(s["status"], "idle");
    let (_, r) = d.get(&format!("/v1/sessions/{sid}/runs/{run}")).await;
    assert_eq!(r["status"], "interrupted");
    assert_eq!(r["finishReason"], "interrupted");
    // The mock records the disconnect when its response body is dropped; poll until it has.
    poll_until("the mock's record of the disconnect", || {
        (mock.requests()[0].outcome == Outcome::ClientDisconnected).then_some(())
    })
    .await;

    // Idempotent.
    let (status, v) = d
        .post(&format!("/v1/sessions/{sid}/interrupt"), json!({}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(v["interrupted"], false);
    assert_eq!(v["status"], "idle");
}

#[tokio::test]
async fn reconnect_with_last_event_id_gets_every_missed_event_once() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let (sid, run) = d.create(chat("count", "mock:tokens=30,delay_ms=5")).await;
    let mut first = d.events(&sid, None).await;
    let seen = first.until_text("tok0 tok1 tok2 tok3 tok4 ").await;
    let last_id = seen.last().unwrap().id.unwrap();
    drop(first);
    // Reconnect mid-run with the cursor.
    let mut second = d.events(&sid, Some(last_id)).await;
    let rest = second.until_complete(&run).await;
    assert_eq!(rest[0].seq(), last_id + 1);
    assert_contiguous(&rest, last_id + 1);
    let mut all = seen.clone();
    all.extend(rest);
    assert_eq!(
        text_of(&all),
        (0..30).map(|i| format!("tok{i} ")).collect::<String>()
    );
    // The same through ?afterSeq.
    let r = d
        .http
        .get(d.url(&format!("/v1/sessions/{sid}/events?afterSeq={last_id}")))
        .send()
        .await
        .unwrap();
    let mut third = common::Sse::new(r);
    let again = third.until_complete(&run).await;
    assert_eq!(again.len(), all.len() - seen.len());
    assert_eq!(again[0].seq(), last_id + 1);
}

#[tokio::test]
async fn upstream_500_twice_then_success_gives_two_retries() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let (sid, run) = d
        .create(chat("hi", "mock:tokens=2,fail=500x2,id=retry-ok"))
        .await;
    let evs = d.events(&sid, None).await.until_complete(&run).await;
    let t = types(&evs);
    assert_in_order(
        &t,
        &[
            "retry",
            "retry",
            "streamDelta",
            "assistantMessage",
            "complete",
        ],
    );
    assert_eq!(t.iter().filter(|x| **x == "retry").count(), 2);
    let retry = evs.iter().find(|e| e.event == "retry").unwrap();
    assert_eq!(retry.data["retry"]["attempt"], 1);
    assert_eq!(retry.data["retry"]["maxAttempts"], 2);
    assert!(!t.contains(&"error"));
    assert_eq!(evs.last().unwrap().data["finishReason"], "stop");
    assert_eq!(mock.requests().len(), 3);
}

#[tokio::test]
async fn upstream_that_keeps_failing_ends_with_error() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let (sid, run) = d.create(chat("hi", "mock:fail=503,id=always")).await;
    let evs = d.events(&sid, None).await.until_complete(&run).await;
    let t = types(&evs);
    assert_in_order(&t, &["retry", "retry", "error", "result", "complete"]);
    let err = evs.iter().find(|e| e.event == "error").unwrap();
    assert_eq!(err.data["error"]["code"], "upstream_status");
    assert_eq!(evs.last().unwrap().data["finishReason"], "error");
    let (_, r) = d.get(&format!("/v1/sessions/{sid}/runs/{run}")).await;
    assert_eq!(r["status"], "failed");
    assert!(r["error"].as_str().unwrap().contains("503"), "{r}");

    // A stream dropped mid-way is an error too, and the text before it is kept.
    let (sid, run) = d.create(chat("hi", "mock:tokens=10,drop_after=2")).await;
    let evs = d.events(&sid, None).await.until_complete(&run).await;
    assert_in_order(
        &types(&evs),
        &["streamDelta", "error", "assistantMessage", "complete"],
    );
    assert_eq!(evs.last().unwrap().data["finishReason"], "error");
    let (_, msgs) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    assert_eq!(msgs["messages"][1]["blocks"][0]["text"], "tok0 tok1 ");
}

#[tokio::test]
async fn busy_session_rejects_enqueues_or_interrupts() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let (sid, run1) = d
        .create(chat("first", "mock:tokens=50,stall_after=1"))
        .await;
    let mut sse = d.events(&sid, None).await;
    sse.until_text("tok0 ").await;

    let (status, v) = d
        .post(
            &format!("/v1/sessions/{sid}/messages"),
            json!({"prompt": "second"}),
        )
        .await;
    assert_eq!(status, 409);
    assert_eq!(v["error"]["code"], "busy");
    assert_eq!(v["activeRunId"], run1.as_str());

    let (status, v) = d
        .post(
            &format!("/v1/sessions/{sid}/messages"),
            json!({"prompt": "queued one", "onBusy": "enqueue", "model": "mock:tokens=1"}),
        )
        .await;
    assert_eq!(status, 202);
    assert_eq!(v["status"], "queued");
    let queued = v["runId"].as_str().unwrap().to_string();

    // onBusy=interrupt stops the first run, drops the queue, then runs.
    let (status, v) = d
        .post(
            &format!("/v1/sessions/{sid}/messages"),
            json!({"prompt": "now", "onBusy": "interrupt", "model": "mock:tokens=2"}),
        )
        .await;
    assert_eq!(status, 202);
    let third = v["runId"].as_str().unwrap().to_string();
    let evs = sse.until_complete(&third).await;
    let completes: Vec<(&str, &str)> = evs
        .iter()
        .filter(|e| e.event == "complete")
        .map(|e| (e.run(), e.data["finishReason"].as_str().unwrap()))
        .collect();
    // Runs end in the order they were admitted: the dropped queued run ends, without running,
    // between the interrupted run and the new one.
    assert_eq!(
        completes,
        [
            (run1.as_str(), "interrupted"),
            (queued.as_str(), "interrupted"),
            (third.as_str(), "stop")
        ]
    );
    // Each run ends once, and the new run's events come after the old run's complete.
    assert_eq!(completes.len(), 3);
    let pos_first_complete = evs
        .iter()
        .position(|e| e.event == "complete" && e.run() == run1)
        .unwrap();
    let pos_third_start = evs.iter().position(|e| e.run() == third).unwrap();
    assert!(pos_first_complete < pos_third_start);
    let (_, r) = d.get(&format!("/v1/sessions/{sid}/runs/{queued}")).await;
    assert_eq!(r["status"], "interrupted");

    // Enqueue runs in order after the current run.
    let a = d
        .send(
            &sid,
            json!({"prompt": "a", "model": "mock:tokens=1,delay_ms=20"}),
        )
        .await;
    let b = d
        .send(
            &sid,
            json!({"prompt": "b", "onBusy": "enqueue", "model": "mock:tokens=1"}),
        )
        .await;
    let evs = sse.until_complete(&b).await;
    let order: Vec<&str> = evs
        .iter()
        .filter(|e| e.event == "complete")
        .map(super::super::common::Ev::run)
        .collect();
    assert_eq!(order, [a.as_str(), b.as_str()]);
}

fn enqueue(prompt: &str) -> serde_json::Value {
    json!({"prompt": prompt, "onBusy": "enqueue", "model": "mock:tokens=1"})
}

#[tokio::test]
async fn a_full_queue_refuses_the_next_enqueued_prompt_and_stores_nothing_for_it() {
    let mock = MockServer::start().await.unwrap();
    let max_queued = 2;
    let d = Daemon::start(
        &mock,
        Opts {
            env: vec![(
                "ELFGATE_SERVER__MAX_QUEUED_PROMPTS_PER_SESSION".into(),
                max_queued.to_string(),
            )],
            ..Opts::default()
        },
    );
    let (sid, first) = d.create(chat("first", "mock:stall_after=1")).await;
    let mut sse = d.events(&sid, None).await;
    sse.until_text("tok0 ").await;

    let mut queued = Vec::new();
    for i in 0..max_queued {
        let (status, v) = d
            .post(
                &format!("/v1/sessions/{sid}/messages"),
                enqueue(&format!("queued {i}")),
            )
            .await;
        assert_eq!(status, 202, "{v}");
        assert_eq!(v["status"], "queued");
        queued.push(v["runId"].as_str().unwrap().to_string());
    }
    let (status, v) = d
        .post(
            &format!("/v1/sessions/{sid}/messages"),
            enqueue("one too many"),
        )
        .await;
    assert_eq!(status, 429, "{v}");
    assert_eq!(v["error"]["code"], "too_many_queued");
    assert!(v["error"]["message"].as_str().unwrap().contains('2'));
    assert!(v.get("runId").is_none());
    let (_, view) = d.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(view["queuedRuns"], max_queued);

    // The interrupt ends the stalled run and drops the queue: every accepted run ends, in order.
    let (status, _) = d
        .post(&format!("/v1/sessions/{sid}/interrupt"), json!({}))
        .await;
    assert_eq!(status, 200);
    let evs = sse.until_complete(queued.last().unwrap()).await;
    let completes: Vec<(&str, &str)> = evs
        .iter()
        .filter(|e| e.event == "complete")
        .map(|e| (e.run(), e.data["finishReason"].as_str().unwrap()))
        .collect();
    let mut want = vec![(first.as_str(), "interrupted")];
    want.extend(queued.iter().map(|r| (r.as_str(), "interrupted")));
    assert_eq!(completes, want);
    for run in &queued {
        let (_, r) = d.get(&format!("/v1/sessions/{sid}/runs/{run}")).await;
        assert_eq!(r["status"], "interrupted");
    }
    let (_, view) = d.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(
        (&view["status"], &view["queuedRuns"]),
        (&json!("idle"), &json!(0))
    );

    // The queue takes prompts again.
    let (status, v) = d
        .post(&format!("/v1/sessions/{sid}/messages"), enqueue("after"))
        .await;
    assert_eq!(status, 202, "{v}");
    assert_eq!(v["status"], "running");
    sse.until_complete(v["runId"].as_str().unwrap()).await;
    let (_, msgs) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    let prompts: Vec<&str> = msgs["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["blocks"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(prompts, ["first", "after"]);
    assert!(
        mock.requests()
            .iter()
            .all(|r| !r.body.to_string().contains("one too many")),
        "the refused prompt reached the provider"
    );
}

#[tokio::test]
async fn client_msg_id_makes_retried_prompts_idempotent() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let create = json!({"engine": "chat", "prompt": "once", "model": "mock:tokens=1",
                        "clientMsgId": "c-1"});
    let (s1, first) = d.post("/v1/sessions", create.clone()).await;
    assert_eq!(s1, 201);
    let (s2, again) = d.post("/v1/sessions", create).await;
    assert_eq!(s2, 200, "{again}");
    assert_eq!(again["duplicate"], true);
    assert_eq!(again["sessionId"], first["sessionId"]);
    assert_eq!(again["runId"], first["runId"]);
    assert!(first.get("duplicate").is_none());
    let sid = first["sessionId"].as_str().unwrap().to_string();
    let mut sse = d.events(&sid, None).await;
    sse.until_complete(first["runId"].as_str().unwrap()).await;

    let prompt = json!({"prompt": "twice?", "clientMsgId": "c-2", "model": "mock:tokens=1"});
    let (s1, r1) = d
        .post(&format!("/v1/sessions/{sid}/messages"), prompt.clone())
        .await;
    assert_eq!(s1, 202);
    let run = r1["runId"].as_str().unwrap().to_string();
    sse.until_complete(&run).await;
    let (s2, r2) = d
        .post(&format!("/v1/sessions/{sid}/messages"), prompt)
        .await;
    assert_eq!(s2, 200, "{r2}");
    assert_eq!(r2["duplicate"], true);
    assert_eq!(r2["runId"], run.as_str());
    assert_eq!(r2["status"], "completed");
    // The same key in another session is another prompt.
    let (other, other_run) = d.create(chat("elsewhere", "mock:tokens=1")).await;
    d.events(&other, None)
        .await
        .until_complete(&other_run)
        .await;
    let (s3, r3) = d
        .post(
            &format!("/v1/sessions/{other}/messages"),
            json!({"prompt": "x", "clientMsgId": "c-2", "model": "mock:tokens=1"}),
        )
        .await;
    assert_eq!(s3, 202, "{r3}");

    // Only one upstream call per distinct prompt; the history holds each prompt once.
    assert_eq!(user_prompts(&d, &sid).await, ["once", "twice?"]);
}

#[tokio::test]
async fn racing_retries_with_one_client_msg_id_start_one_session_and_one_run() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    // Eight copies of one creation at once (a client retrying on a timeout, say).
    let create = json!({"engine": "chat", "prompt": "once", "model": "mock:tokens=1",
                        "clientMsgId": "race-1"});
    let answers =
        futures_util::future::join_all((0..8).map(|_| d.post("/v1/sessions", create.clone())))
            .await;
    let created: Vec<_> = answers.iter().filter(|(s, _)| *s == 201).collect();
    assert_eq!(created.len(), 1, "{answers:?}");
    let first = &created[0].1;
    for (s, v) in &answers {
        assert!(
            *s == 201 || (*s == 200 && v["duplicate"] == true),
            "{s} {v}"
        );
        assert_eq!(v["sessionId"], first["sessionId"]);
        assert_eq!(v["runId"], first["runId"]);
    }
    let (_, list) = d.get("/v1/sessions").await;
    assert_eq!(list["sessions"].as_array().unwrap().len(), 1, "{list}");
    let sid = first["sessionId"].as_str().unwrap().to_string();
    let mut sse = d.events(&sid, None).await;
    sse.until_complete(first["runId"].as_str().unwrap()).await;

    // Eight copies of one prompt at once, its run still going when the copies arrive: every copy
    // is told it is a duplicate of that run, none is refused as busy because of it.
    let prompt = json!({"prompt": "twice?", "clientMsgId": "race-2",
                        "model": "mock:stall_after=1"});
    let path = format!("/v1/sessions/{sid}/messages");
    let answers =
        futures_util::future::join_all((0..8).map(|_| d.post(&path, prompt.clone()))).await;
    let started: Vec<_> = answers.iter().filter(|(s, _)| *s == 202).collect();
    assert_eq!(started.len(), 1, "{answers:?}");
    let run = started[0].1["runId"].as_str().unwrap().to_string();
    for (s, v) in &answers {
        assert!(
            *s == 202 || (*s == 200 && v["duplicate"] == true),
            "{s} {v}"
        );
        assert_eq!(v["runId"], run.as_str());
    }
    // Its one token has streamed (so its upstream call was made) before it is interrupted.
    let streamed = sse.until_n("streamDelta", 1).await;
    assert_eq!(streamed.last().unwrap().run(), run);
    let (s, _) = d
        .post(&format!("/v1/sessions/{sid}/interrupt"), json!({}))
        .await;
    assert_eq!(s, 200);
    let evs = sse.until_complete(&run).await;
    assert_eq!(evs.last().unwrap().data["finishReason"], "interrupted");

    // One upstream call per distinct prompt; the history holds each prompt once.
    assert_eq!(mock.requests().len(), 2);
    assert_eq!(user_prompts(&d, &sid).await, ["once", "twice?"]);
}

/// Reads a stream to its end; panics if it does not end within the guard time.
async fn read_to_end(d: &Daemon, path: &str) -> Vec<common::Ev> {
    let r = d.http.get(d.url(path)).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let mut sse = common::Sse::new(r);
    let mut evs = Vec::new();
    while let Some(e) = sse.next().await {
        evs.push(e);
    }
    evs
}

#[tokio::test]
async fn until_complete_ends_the_stream_after_one_run() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let (sid, run1) = d.create(chat("one", "mock:tokens=20,delay_ms=5")).await;
    // Followed live: the response ends by itself right after the run's `complete`.
    let live = read_to_end(&d, &format!("/v1/sessions/{sid}/events?until=complete")).await;
    assert_contiguous(&live, 1);
    let last = live.last().unwrap();
    assert_eq!(
        (last.event.as_str(), last.run()),
        ("complete", run1.as_str())
    );
    assert_eq!(types(&live).iter().filter(|t| **t == "complete").count(), 1);
    assert_eq!(
        text_of(&live),
        (0..20).map(|i| format!("tok{i} ")).collect::<String>()
    );

    // A second run, followed from the first one's end: only its events, then the end.
    let run2 = d
        .send(&sid, json!({"prompt": "two", "model": "mock:tokens=3"}))
        .await;
    let after = last.seq();
    let second = read_to_end(
        &d,
        &format!("/v1/sessions/{sid}/events?afterSeq={after}&until=complete"),
    )
    .await;
    assert_contiguous(&second, after + 1);
    assert!(second.iter().all(|e| e.run() == run2), "{second:?}");
    assert_eq!(second.last().unwrap().event, "complete");

    // Replayed from the start, the stream ends at the first `complete`, not the latest.
    let replay = read_to_end(&d, &format!("/v1/sessions/{sid}/events?until=complete")).await;
    assert_eq!(replay.len(), live.len());
    assert_eq!(replay.last().unwrap().run(), run1);

    // Anything else is refused with a JSON error.
    let (status, body) = d
        .get(&format!("/v1/sessions/{sid}/events?until=forever"))
        .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "bad_request", "{body}");
}

#[tokio::test]
async fn a_new_sessions_first_run_is_stored_as_running() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let (sid, run) = d.create(chat("slow", "mock:tokens=1000,delay_ms=20")).await;
    // Stored as running with the session, before the POST was answered.
    let (status, r) = d.get(&format!("/v1/sessions/{sid}/runs/{run}")).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["status"], "running", "{r}");
    let (_, v) = d
        .post(
            &format!("/v1/sessions/{sid}/interrupt"),
            json!({"wait": true}),
        )
        .await;
    assert_eq!(v["interrupted"], true, "{v}");
    let (_, r) = d.get(&format!("/v1/sessions/{sid}/runs/{run}")).await;
    assert_eq!(r["status"], "interrupted", "{r}");
    assert_eq!(r["finishReason"], "interrupted", "{r}");
}

#[tokio::test]
async fn create_with_accept_event_stream_answers_with_the_first_runs_events() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let resp = d
        .http
        .post(d.url("/v1/sessions"))
        .header("Accept", "text/event-stream")
        .json(&chat("hi", "mock:tokens=4,delay_ms=5"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let sid = resp.headers()["x-session-id"].to_str().unwrap().to_string();
    let run = resp.headers()["x-run-id"].to_str().unwrap().to_string();
    let mut sse = common::Sse::new(resp);
    let mut evs = Vec::new();
    // The response ends by itself after the run's `complete`.
    while let Some(e) = sse.next().await {
        evs.push(e);
    }
    assert_contiguous(&evs, 1);
    assert_in_order(
        &types(&evs),
        &[
            "sessionCreated",
            "userMessage",
            "init",
            "streamDelta",
            "assistantMessage",
            "result",
            "complete",
        ],
    );
    let last = evs.last().unwrap();
    assert_eq!(
        (last.event.as_str(), last.run()),
        ("complete", run.as_str())
    );
    assert!(evs.iter().all(|e| e.data["sessionId"] == sid.as_str()));
    assert_eq!(text_of(&evs), "tok0 tok1 tok2 tok3 ");
    // The same session, stored as usual.
    let (status, m) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    assert_eq!(status, 200);
    assert_eq!(m["messages"].as_array().unwrap().len(), 2, "{m}");
    // Bad input still gets its JSON error, not a stream.
    let bad = d
        .http
        .post(d.url("/v1/sessions"))
        .header("Accept", "text/event-stream")
        .json(&json!({"engine": "nope", "prompt": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status().as_u16(), 422);
    let body: serde_json::Value = bad.json().await.unwrap();
    assert!(body["error"]["code"].is_string(), "{body}");
}

/// Sessions with a run going on, over every engine.
async fn active_sessions(d: &Daemon) -> u64 {
    let (_, engines) = d.get("/v1/engines").await;
    engines["engines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["activeSessions"].as_u64().unwrap())
        .sum()
}

/// Whether any upstream request the mock received carries `text`.
fn upstream_saw(mock: &MockServer, text: &str) -> bool {
    mock.requests()
        .iter()
        .any(|r| r.body.to_string().contains(text))
}

#[tokio::test]
async fn a_prompt_after_delete_is_404_and_starts_nothing() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let (sid, run) = d.create(chat("hi", "mock:tokens=1")).await;
    d.events(&sid, None).await.until_complete(&run).await;
    assert_eq!(d.delete(&format!("/v1/sessions/{sid}")).await, 204);
    let (s, v) = d
        .post(
            &format!("/v1/sessions/{sid}/messages"),
            json!({"prompt": "after the delete", "onBusy": "enqueue"}),
        )
        .await;
    assert_eq!((s, v["error"]["code"].as_str()), (404, Some("not_found")));
    for path in [
        format!("/v1/sessions/{sid}"),
        format!("/v1/sessions/{sid}/events"),
        format!("/v1/sessions/{sid}/messages"),
    ] {
        assert_eq!(d.get(&path).await.0, 404, "{path}");
    }
    assert!(!upstream_saw(&mock, "after the delete"));
    assert_eq!(active_sessions(&d).await, 0);
}

/// DELETE and prompts sent at the same moment: each prompt either comes first (202; its run is
/// stopped and deleted with the session before DELETE answers) or after (404 or 409); once all
/// have answered, nothing of the session is left and nothing runs.
#[tokio::test]
async fn delete_racing_prompts_leaves_no_run_on_a_deleted_session() {
    use futures_util::future::join_all;
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    for round in 0..30 {
        let (sid, run) = d.create(chat("hi", "mock:tokens=1")).await;
        d.events(&sid, None).await.until_complete(&run).await;
        let path = format!("/v1/sessions/{sid}/messages");
        // A slow answer: a run admitted after the delete would still be going when checked.
        let prompts = join_all((0..4).map(|k| {
            d.post(
                &path,
                json!({"prompt": format!("round {round} prompt {k}"), "onBusy": "enqueue",
                       "model": "mock:tokens=100,delay_ms=50"}),
            )
        }));
        let session = format!("/v1/sessions/{sid}");
        let (answers, deleted) = tokio::join!(prompts, d.delete(&session));
        assert_eq!(deleted, 204, "round {round}");
        let mut accepted = Vec::new();
        for (s, v) in answers {
            assert!(matches!(s, 202 | 404 | 409), "round {round}: {s} {v}");
            if s == 202 {
                accepted.push(v["runId"].as_str().unwrap().to_string());
            }
        }
        assert_eq!(d.get(&session).await.0, 404);
        for run in accepted {
            let (s, v) = d.get(&format!("/v1/sessions/{sid}/runs/{run}")).await;
            assert_eq!(s, 404, "round {round}: run {run} outlived its session: {v}");
        }
        assert_eq!(
            active_sessions(&d).await,
            0,
            "round {round}: a run goes on in a deleted session"
        );
    }
}

/// Waits (bounded) until the mock has seen the client close the request for `model`.
async fn until_disconnected(mock: &MockServer, model: &str) -> Vec<Outcome> {
    let deadline = tokio::time::Instant::now() + common::GUARD;
    loop {
        let outcomes: Vec<Outcome> = mock
            .requests()
            .iter()
            .filter(|r| r.model == model)
            .map(|r| r.outcome)
            .collect();
        if outcomes.contains(&Outcome::ClientDisconnected) || tokio::time::Instant::now() > deadline
        {
            return outcomes;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// An upstream that accepts the call and then sends nothing: the provider's first-token deadline
/// (1 s here, against an idle timeout of 30 s and retries left) ends the call once for all its
/// attempts: one `error`, no `retry`, a run that completes with `error`, the upstream closed.
#[tokio::test]
async fn a_stall_before_the_first_token_ends_the_run_at_the_call_deadline() {
    let mock = MockServer::start().await.unwrap();
    let extra = format!(
        r#"
[providers.stalling]
kind = "openai"
base_url = "{}/v1"
idle_timeout_secs = 30
request_timeout_secs = 10
first_token_timeout_secs = 1
"#,
        mock.base_url()
    );
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: extra,
            ..Opts::default()
        },
    );
    let project = tempfile::tempdir().unwrap();
    for engine in ["chat", "tinyelf"] {
        let model = format!("mock:stall_after=0,id={engine}");
        let (sid, run) = d
            .create(
                json!({"engine": engine, "prompt": "hello?", "providerId": "stalling",
                           "model": model,
                           "projectPath": project.path().display().to_string()}),
            )
            .await;
        let evs = d.all_events_until_complete_of(&sid, &run).await;
        let t = types(&evs);
        assert!(!t.contains(&"retry"), "{engine}: {t:?}");
        let errors: Vec<&common::Ev> = evs.iter().filter(|e| e.event == "error").collect();
        assert_eq!(errors.len(), 1, "{engine}: {t:?}");
        assert_eq!(errors[0].data["error"]["code"], "first_token_timeout");
        assert_in_order(&t, &["userMessage", "error", "result", "complete"]);
        assert_eq!(evs.last().unwrap().data["finishReason"], "error");
        let (_, r) = d.get(&format!("/v1/sessions/{sid}/runs/{run}")).await;
        assert_eq!(r["status"], "failed", "{r}");
        assert_eq!(
            until_disconnected(&mock, &model).await,
            [Outcome::ClientDisconnected],
            "{engine}: one upstream request, closed by the daemon"
        );
    }
}

/// engineConfig searchOrchestration on a chat session: the prompt is searched for before the
/// call, the results are in the request (not in the stored prompt), a processing event says
/// so; a failing search answers without results and says why; without a backend it is 422.
#[tokio::test]
async fn search_orchestration_searches_before_answering() {
    let mock = MockServer::start().await.unwrap();
    let base = mock.base_url();
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: format!(
                "[tools.web_search]\nbackend = \"searxng\"\nurl = \"{base}\"\nmax_results = 2\n"
            ),
            ..Default::default()
        },
    );
    let mut body = chat("rust async", "mock:tokens=2");
    body["engineConfig"] = json!({"searchOrchestration": true});
    let (sid, run) = d.create(body).await;
    let evs = d.all_events_until_complete_of(&sid, &run).await;
    assert_eq!(evs.last().unwrap().data["finishReason"], "stop");
    let notes: Vec<&str> = evs
        .iter()
        .filter(|e| e.event == "processing")
        .map(|e| e.data["message"].as_str().unwrap())
        .collect();
    assert!(
        notes.contains(&"searched the web for the prompt: 2 results"),
        "{notes:?}"
    );
    let sent = mock
        .requests()
        .into_iter()
        .find(|r| r.path.ends_with("/chat/completions"))
        .unwrap();
    let last = sent.body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .to_string();
    assert!(last.contains("Result 1 for rust async"), "{last}");
    assert!(
        last.contains("https://example.com/search/2?q=rust async"),
        "{last}"
    );
    assert_eq!(user_prompts(&d, &sid).await, ["rust async"]);

    // A search that fails: the answer comes without results, and says why.
    let mut body = chat("fail", "mock:tokens=2");
    body["engineConfig"] = json!({"searchOrchestration": true});
    let (sid, run) = d.create(body).await;
    let evs = d.all_events_until_complete_of(&sid, &run).await;
    assert_eq!(evs.last().unwrap().data["finishReason"], "stop");
    assert!(
        evs.iter().any(|e| e.event == "processing"
            && e.data["message"]
                .as_str()
                .unwrap()
                .starts_with("searchOrchestration: the search failed")),
        "{:?}",
        types(&evs)
    );

    // No backend configured: refused by name.
    let plain = Daemon::start(&mock, Opts::default());
    let mut body = chat("rust", "mock:tokens=2");
    body["engineConfig"] = json!({"searchOrchestration": true});
    let (s, v) = plain.post("/v1/sessions", body).await;
    assert_eq!(s, 422, "{v}");
    assert!(
        v.to_string().contains("engineConfig.searchOrchestration"),
        "{v}"
    );
}
