//! What tinyelf sends upstream when a session is resumed: the history bound, dangling tool calls
//! and thinking signatures, in both provider formats.

use crate::common;
use crate::scripted;

use common::{Daemon, Opts, poll_until};
use elfgate_mockllm::MockServer;
use scripted::transcript::{anthropic_blocks, assert_valid_anthropic, assert_valid_openai};
use scripted::{bodies_for, call, finish_of, project, resume, run, script, session, stored};
use serde_json::{Value, json};

/// Resumes `sid` with `body`, expects that run to stop, and returns the body of the last request
/// the mock got for `model`: what the resume sent upstream.
async fn resumed_upstream(
    d: &Daemon,
    mock: &MockServer,
    sid: &str,
    model: &str,
    body: Value,
) -> Value {
    let (_, evs) = resume(d, sid, body).await;
    assert_eq!(finish_of(&evs), "stop");
    bodies_for(mock, model).pop().unwrap()
}

/// The id of the session's stored message 101 (the long run's answer).
async fn msgs_final_id(d: &Daemon, sid: &str) -> String {
    let msgs = stored(d, sid).await;
    assert_eq!(msgs[101]["blocks"][0]["text"], "Listed fifty times.");
    msgs[101]["id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn resume_loads_at_most_max_history_messages_without_splitting_tool_exchanges() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();
    // 50 tool iterations and an answer: 1 + 100 + 1 = 102 stored messages.
    let mut responses: Vec<Value> = (1..=50)
        .map(|i| json!({"toolCalls": [call(&format!("h{i}"), "list_dir", json!({}))]}))
        .collect();
    responses.push(json!({"text": "Listed fifty times."}));
    responses.push(json!({"text": "Resumed."}));
    script(&mock, "long", Value::Array(responses));
    let model = "mock:script=long";
    let (sid, _, evs) = run(
        &d,
        session(
            "list",
            model,
            &dir,
            json!({"engineConfig": {"maxIterations": 60}}),
        ),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop");
    assert_eq!(stored(&d, &sid).await.len(), 102);
    let answer = msgs_final_id(&d, &sid).await;

    // Default: the last 100 messages. They start with the result of h1, whose call was cut
    // off: it is dropped, and a note stands in for the omitted start.
    let body = resumed_upstream(
        &d,
        &mock,
        &sid,
        model,
        json!({"prompt": "again", "parentId": answer}),
    )
    .await;
    let m = body["messages"].as_array().unwrap();
    assert_valid_openai(m);
    let ids: Vec<&str> = m
        .iter()
        .filter_map(|x| x["tool_calls"][0]["id"].as_str())
        .collect();
    let want: Vec<String> = (2..=50).map(|i| format!("h{i}")).collect();
    assert_eq!(ids, want);
    // system, note, 49 x (assistant, tool), final answer, new prompt.
    assert_eq!(m.len(), 1 + 1 + 98 + 1 + 1);
    assert!(
        m[1]["content"].as_str().unwrap().contains("omitted"),
        "{}",
        m[1]
    );
    assert_eq!(m[100]["content"], "Listed fifty times.");
    assert_eq!(m[101]["content"], "again");

    // Overridden by engineConfig, branching from the same answer: maxHistory 5 keeps the
    // exchanges of h49 and h50; maxHistory 4 cuts h49's call off, so its result goes too.
    for (limit, want) in [(5, vec!["h49", "h50"]), (4, vec!["h50"])] {
        let body = resumed_upstream(
            &d,
            &mock,
            &sid,
            model,
            json!({"prompt": format!("limit {limit}"), "parentId": answer,
                   "engineConfig": {"maxHistory": limit}}),
        )
        .await;
        let m = body["messages"].as_array().unwrap();
        assert_valid_openai(m);
        let calls: Vec<&str> = m
            .iter()
            .filter_map(|x| x["tool_calls"][0]["id"].as_str())
            .collect();
        assert_eq!(calls, want, "{m:?}");
        // system, note, the calls' exchanges, the answer, the new prompt.
        assert_eq!(m.len(), 1 + 1 + 2 * want.len() + 1 + 1, "{m:?}");
        assert!(m[1]["content"].as_str().unwrap().contains("omitted"));
        assert_eq!(m[m.len() - 2]["content"], "Listed fifty times.");
        assert_eq!(m.last().unwrap()["content"], format!("limit {limit}"));
    }
    // The same cut in the Anthropic format: it starts with a user message and h50's tool_use is
    // answered in the user message right after it.
    let body = resumed_upstream(
        &d,
        &mock,
        &sid,
        model,
        json!({"prompt": "limit 4 anthropic", "parentId": answer,
               "providerId": "mock-anthropic", "engineConfig": {"maxHistory": 4}}),
    )
    .await;
    let m = body["messages"].as_array().unwrap();
    assert_valid_anthropic(m);
    let uses: Vec<String> = m
        .iter()
        .flat_map(anthropic_blocks)
        .filter(|b| b["type"] == "tool_use")
        .map(|b| b["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(uses, ["h50"]);
}

/// A dangling tool call on resume, in one provider format: (1) a daemon killed while a tool runs,
/// restarted, resumed; (2) after the restart, a resume that branches from an assistant message
/// whose tool_use has no result in the branch.
async fn dangling_on(mock: &MockServer, provider: &str) {
    let d = Daemon::start(mock, Opts::default());
    let dir = project();
    let valid = |m: &[Value]| {
        if provider == "mock" {
            assert_valid_openai(m);
        } else {
            assert_valid_anthropic(m);
        }
    };
    let done_model = format!("mock:script=dg-done-{provider}");
    script(
        mock,
        &format!("dg-done-{provider}"),
        json!([
            {"text": "Checking.", "toolCalls": [call("c1", "list_dir", json!({}))]},
            {"text": "Listed."},
            {"text": "Resumed."}
        ]),
    );
    let (done_sid, _, evs) = run(
        &d,
        session("list", &done_model, &dir, json!({"providerId": provider})),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop");

    let crash_model = format!("mock:script=dg-crash-{provider}");
    script(
        mock,
        &format!("dg-crash-{provider}"),
        json!([
            {"text": "Running.", "toolCalls": [call("k1", "shell", json!({"command": "echo $$ > crash.pid; exec sleep 600"}))]},
            {"text": "Recovered."}
        ]),
    );
    let (crash_sid, _) = d
        .create(session(
            "crash",
            &crash_model,
            &dir,
            json!({"providerId": provider, "permissionMode": "bypassPermissions"}),
        ))
        .await;
    // Its process group as this test sees it (the command runs in a pid namespace of its own).
    let pid = poll_until("the command started", || {
        scripted::procs::read_pid(&dir.join("crash.pid")).and_then(scripted::procs::pgid_of)
    })
    .await;
    let data = d.dir.clone();
    let mut d = d;
    d.kill();
    // The tool's process group outlives a SIGKILLed daemon; end it here.
    std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{pid}")])
        .status()
        .unwrap();
    let d = Daemon::start_in(data, mock, Opts::default());

    let body = resumed_upstream(
        &d,
        mock,
        &crash_sid,
        &crash_model,
        json!({"prompt": "go on"}),
    )
    .await;
    valid(body["messages"].as_array().unwrap());

    let msgs = stored(&d, &done_sid).await;
    assert_eq!(msgs[1]["blocks"][1]["type"], "tool_use");
    let parent = msgs[1]["id"].as_str().unwrap();
    let body = resumed_upstream(
        &d,
        mock,
        &done_sid,
        &done_model,
        json!({"prompt": "from the call", "parentId": parent}),
    )
    .await;
    let m = body["messages"].as_array().unwrap();
    valid(m);
    // The call got a synthetic error result.
    let text = body.to_string();
    assert!(text.contains("no result was recorded"), "{text}");
    assert!(
        !text.contains("Listed."),
        "the branch ends at the call: {text}"
    );
}

#[tokio::test]
async fn resume_after_a_dangling_tool_call_sends_a_valid_transcript_in_both_formats() {
    let mock = MockServer::start().await.unwrap();
    dangling_on(&mock, "mock").await;
    dangling_on(&mock, "mock-anthropic").await;
}

#[tokio::test]
async fn anthropic_thinking_signatures_go_back_unchanged() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();
    script(
        &mock,
        "sig",
        json!([
            {"thinking": "I should list.", "text": "Listing.", "toolCalls": [call("s1", "list_dir", json!({}))]},
            {"thinking": "Now answer.", "text": "Done."},
            {"text": "Resumed."}
        ]),
    );
    let (sid, _, evs) = run(
        &d,
        session(
            "sig",
            "mock:script=sig",
            &dir,
            json!({"providerId": "mock-anthropic"}),
        ),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop");
    let msgs = stored(&d, &sid).await;
    assert_eq!(
        msgs[1]["blocks"][0],
        json!({"type": "thinking", "thinking": "I should list.", "signature": "sig-mock"})
    );
    assert_eq!(msgs[3]["blocks"][0]["signature"], "sig-mock");
    let first = json!({"type": "thinking", "thinking": "I should list.", "signature": "sig-mock"});
    let second = json!({"type": "thinking", "thinking": "Now answer.", "signature": "sig-mock"});
    // Within the run: the tool iteration's thinking goes back with its signature.
    let bodies = bodies_for(&mock, "mock:script=sig");
    let m = bodies[1]["messages"].as_array().unwrap();
    assert_eq!(anthropic_blocks(&m[1])[0], first);
    // On resume: both thinking blocks, unchanged.
    let body = resumed_upstream(
        &d,
        &mock,
        &sid,
        "mock:script=sig",
        json!({"prompt": "more"}),
    )
    .await;
    let m = body["messages"].as_array().unwrap();
    assert_valid_anthropic(m);
    let r: Vec<&str> = m.iter().map(|x| x["role"].as_str().unwrap()).collect();
    assert_eq!(r, ["user", "assistant", "user", "assistant", "user"]);
    assert_eq!(anthropic_blocks(&m[1])[0], first);
    assert_eq!(anthropic_blocks(&m[3])[0], second);
}

#[tokio::test]
async fn a_resumed_prompt_is_stored_and_announced_before_init_as_a_first_one_is() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();
    let (sid, run1) = d
        .create(session("first", "mock:tokens=2", &dir, json!({})))
        .await;
    let mut sse = d.events(&sid, None).await;
    let first = sse.until_complete(&run1).await;
    let order = |evs: &[common::Ev], run: &str| -> Vec<String> {
        evs.iter()
            .filter(|e| e.run() == run && (e.event == "init" || e.event == "userMessage"))
            .map(|e| e.event.clone())
            .collect()
    };
    assert_eq!(order(&first, &run1), ["userMessage", "init"]);
    let run2 = d
        .send(&sid, json!({"prompt": "second", "model": "mock:tokens=2"}))
        .await;
    let second = sse.until_complete(&run2).await;
    assert_eq!(order(&second, &run2), ["userMessage", "init"]);
    let msgs = stored(&d, &sid).await;
    assert_eq!(msgs[2]["blocks"][0]["text"], "second");
}
