//! Tool runs outside turns: POST /v1/sessions/{id}/tools/{name} runs one tool in the session's
//! project without a model call, through the same gates (a shell call asks for permission and runs
//! once allowed), records the call and its result in the history the next turn sends upstream,
//! and refuses what it cannot do with the right status.

use crate::common;
use crate::scripted;

use common::{allow, chat};
use elfgate_mockllm::MockServer;
use scripted::{
    bodies_for, daemon_with, finish_of, project, resume, run, session, stored, tool_run as tool,
};
use serde_json::{Value, json};

#[tokio::test]
async fn tools_run_outside_turns_through_the_same_gates_and_land_in_the_history() {
    let mock = MockServer::start().await.unwrap();
    let d = daemon_with(&mock, "");
    let dir = project();
    let (sid, _, evs) = run(&d, session("hi", "mock:tokens=2", &dir, json!({}))).await;
    assert_eq!(finish_of(&evs), "stop");

    // read_file is read_only: it answers at once.
    let (st, r) = tool(&d, &sid, "read_file", json!({"path": "a.txt"})).await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["status"], "success");
    assert_eq!(r["isError"], false);
    assert!(r["content"].as_str().unwrap().starts_with("hello world"));
    let read_id = r["toolUseId"].as_str().unwrap().to_string();

    // shell is always_confirm: the POST waits for the permission the client gives.
    let mut sse = d.events(&sid, None).await;
    let base = d.base.clone();
    let client = d.http.clone();
    let sid2 = sid.clone();
    let post = tokio::spawn(async move {
        let resp = client
            .post(format!("{base}/v1/sessions/{sid2}/tools/shell"))
            .json(&json!({"arguments": {"command": "echo ran > out.txt && echo done"}}))
            .send()
            .await
            .unwrap();
        (resp.status().as_u16(), resp.json::<Value>().await.unwrap())
    });
    let evs = sse.until_n("permissionRequest", 1).await;
    let req = evs.last().unwrap();
    assert_eq!(req.data["toolName"], "shell");
    assert!(!dir.join("out.txt").exists(), "ran before it was allowed");
    allow(&d, &sid, req.data["requestId"].as_str().unwrap()).await;
    let (st, r) = post.await.unwrap();
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["status"], "success", "{r}");
    assert!(r["content"].as_str().unwrap().contains("done"), "{r}");
    assert_eq!(
        std::fs::read_to_string(dir.join("out.txt")).unwrap(),
        "ran\n"
    );
    // Its run went through the stream like any other: start, end, complete.
    let run_id = r["runId"].as_str().unwrap();
    let evs = d.events(&sid, None).await.until_complete(run_id).await;
    let kinds: Vec<&str> = evs
        .iter()
        .filter(|e| e.run() == run_id)
        .map(|e| e.event.as_str())
        .collect();
    for k in [
        "toolCallStart",
        "permissionRequest",
        "permissionResolved",
        "toolCallEnd",
        "assistantMessage",
        "complete",
    ] {
        assert!(kinds.contains(&k), "{k} missing: {kinds:?}");
    }

    // Both calls are in the history, each tool_use followed by its result.
    let msgs = stored(&d, &sid).await;
    let blocks: Vec<&Value> = msgs
        .iter()
        .flat_map(|m| m["blocks"].as_array().unwrap())
        .collect();
    for (name, id) in [
        ("read_file", read_id.as_str()),
        ("shell", r["toolUseId"].as_str().unwrap()),
    ] {
        assert!(
            blocks
                .iter()
                .any(|b| b["type"] == "tool_use" && b["name"] == name && b["id"] == id),
            "{name}"
        );
        assert!(
            blocks
                .iter()
                .any(|b| b["type"] == "tool_result" && b["tool_use_id"] == id)
        );
    }
    // The next turn sends them upstream as ordinary tool calls and results.
    let model = "mock:tokens=2,id=after";
    let (_, evs) = resume(&d, &sid, json!({"prompt": "and now?", "model": model})).await;
    assert_eq!(finish_of(&evs), "stop");
    let body = &bodies_for(&mock, model)[0];
    let sent = body["messages"].to_string();
    assert!(
        sent.contains(&read_id) && sent.contains("hello world"),
        "{sent}"
    );
}

#[tokio::test]
async fn tool_runs_refuse_what_they_cannot_do() {
    let mock = MockServer::start().await.unwrap();
    let d = daemon_with(&mock, "");
    let dir = project();
    let (sid, _, _) = run(&d, session("hi", "mock:tokens=2", &dir, json!({}))).await;

    let (st, e) = tool(&d, &sid, "no_such_tool", json!({})).await;
    assert_eq!(st, 404, "{e}");
    let (st, e) = tool(&d, &sid, "read_file", json!({})).await;
    assert_eq!(st, 422, "{e}");
    assert!(
        e.to_string().contains("missing required argument 'path'"),
        "{e}"
    );
    let (st, e) = tool(&d, &sid, "read_file", json!({"path": 3})).await;
    assert_eq!(st, 422, "{e}");
    let (st, _) = tool(
        &d,
        "0193a1b2-0000-7000-8000-000000000000",
        "read_file",
        json!({"path": "a.txt"}),
    )
    .await;
    assert_eq!(st, 404);
    let (chat_sid, _) = d.create(chat("hi", "mock:tokens=2")).await;
    let (st, e) = tool(&d, &chat_sid, "read_file", json!({"path": "a.txt"})).await;
    assert_eq!(st, 422, "{e}");

    // While a run is going on: 409.
    let run = d
        .send(
            &sid,
            json!({"prompt": "wait", "model": "mock:tokens=5,stall_after=1"}),
        )
        .await;
    let mut sse = d.events(&sid, None).await;
    sse.until_text("tok0").await;
    let (st, e) = tool(&d, &sid, "read_file", json!({"path": "a.txt"})).await;
    assert_eq!(st, 409, "{e}");
    assert_eq!(e["activeRunId"], run, "{e}");
    let (st, _) = d
        .post(
            &format!("/v1/sessions/{sid}/interrupt"),
            json!({"wait": true}),
        )
        .await;
    assert_eq!(st, 200);
    // Nothing was recorded by the refused calls.
    let msgs = stored(&d, &sid).await;
    assert!(!msgs.iter().any(|m| m.to_string().contains("toolu_api_")));
}
