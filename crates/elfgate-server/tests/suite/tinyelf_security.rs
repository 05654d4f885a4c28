//! tinyelf's hooks and guardian end to end: PreToolUse denials, the guardian's verdicts and its
//! fail-closed timeout, and PostToolUse hooks that run after the fact.

use crate::common;
use crate::scripted;

use common::Daemon;
use elfgate_mockllm::MockServer;
use scripted::{
    bodies_for, call, daemon_with, ends, ends_by_id, finish_of, project, run, script, session,
    stored, wait_for_file,
};
use serde_json::{Value, json};
use std::path::Path;

#[tokio::test]
async fn hook_and_guardian_denials() {
    let mock = MockServer::start().await.unwrap();
    let extra = r#"
[[engines.tinyelf.hooks]]
event = "PreToolUse"
matcher = "write_file"
command = '''cat > /dev/null; echo '{"decision":"deny","reason":"no writes on fridays"}' '''

[engines.tinyelf.guardian]
enabled = true
provider = "mock"
model = "mock:script=guardian"
timeout_secs = 30
"#;
    let d = daemon_with(&mock, extra);
    script(
        &mock,
        "guardian",
        json!([{"text": "UNSAFE: it rewrites the whole file"}]),
    );
    let dir = project();
    script(
        &mock,
        "hooked",
        json!([{"toolCalls": [call("w1", "write_file", json!({"path": "b.txt", "content": "x"}))]}, {"text": "ok"}]),
    );
    let (_, _, evs) = run(
        &d,
        session(
            "w",
            "mock:script=hooked",
            &dir,
            json!({"permissionMode": "bypassPermissions"}),
        ),
    )
    .await;
    let e = ends(&evs);
    assert_eq!(e[0].0, "denied");
    assert!(e[0].1.contains("no writes on fridays"), "{}", e[0].1);
    assert!(!dir.join("b.txt").exists());
    // The guardian was not asked: the hook came first.
    assert!(bodies_for(&mock, "mock:script=guardian").is_empty());

    script(
        &mock,
        "guarded",
        json!([{"toolCalls": [
            call("e1", "edit_file", json!({"path": "a.txt", "old_string": "hello", "new_string": "bye"})),
            call("r1", "read_file", json!({"path": "a.txt"}))
        ]}, {"text": "ok"}]),
    );
    let (_, _, evs) = run(
        &d,
        session(
            "e",
            "mock:script=guarded",
            &dir,
            json!({"permissionMode": "bypassPermissions"}),
        ),
    )
    .await;
    let e = ends_by_id(&evs);
    assert_eq!(e["e1"].0, "denied");
    assert!(
        e["e1"]
            .1
            .contains("guardian judged the call unsafe: it rewrites the whole file"),
        "{}",
        e["e1"].1
    );
    // read_only tools are not reviewed.
    assert_eq!(e["r1"].0, "success");
    assert!(
        std::fs::read_to_string(dir.join("a.txt"))
            .unwrap()
            .contains("hello")
    );
    let g = bodies_for(&mock, "mock:script=guardian");
    assert_eq!(g.len(), 1);
    assert!(g[0].to_string().contains("edit_file"));
    // The model sees the denial and can act on it.
    let next = bodies_for(&mock, "mock:script=guarded");
    assert!(
        next[1]
            .to_string()
            .contains("guardian judged the call unsafe")
    );
}

/// A daemon whose guardian is the mock script `name`, given `timeout_secs` to answer.
fn guardian_daemon(mock: &MockServer, name: &str, timeout_secs: &str) -> Daemon {
    daemon_with(
        mock,
        &format!(
            "[engines.tinyelf.guardian]\nenabled = true\nmodel = \"mock:script={name}\"\n\
             timeout_secs = {timeout_secs}\n"
        ),
    )
}

/// One write_file call of a bypassPermissions session, which only the guardian reviews; returns
/// its (status, content).
async fn guarded_write(d: &Daemon, mock: &MockServer, dir: &Path) -> (String, String) {
    script(
        mock,
        "gt",
        json!([{"toolCalls": [call("w", "write_file", json!({"path": "g.txt", "content": "x"}))]}, {"text": "ok"}]),
    );
    let (_, _, evs) = run(
        d,
        session(
            "g",
            "mock:script=gt",
            dir,
            json!({"permissionMode": "bypassPermissions"}),
        ),
    )
    .await;
    ends_by_id(&evs).remove("w").unwrap()
}

#[tokio::test]
async fn guardian_fails_closed_on_timeout_and_unclear_answers() {
    let mock = MockServer::start().await.unwrap();
    let dir = project();
    // A guardian that never answers: the short timeout denies the call, on any machine.
    script(&mock, "gstall", json!([{"text": "SA", "stall": true}]));
    let stalled = guardian_daemon(&mock, "gstall", "0.3");
    let (status, content) = guarded_write(&stalled, &mock, &dir).await;
    assert_eq!(status, "denied");
    assert!(content.contains("did not answer within"), "{content}");

    // Guardians that answer, with all the time they need.
    let judging = guardian_daemon(&mock, "gjudge", "30");
    script(&mock, "gjudge", json!([{"text": "Hmm, it depends."}]));
    let (status, content) = guarded_write(&judging, &mock, &dir).await;
    assert_eq!(status, "denied");
    assert!(content.contains("unclear"), "{content}");
    assert!(!dir.join("g.txt").exists());

    script(&mock, "gjudge", json!([{"text": "SAFE"}]));
    let (status, _) = guarded_write(&judging, &mock, &dir).await;
    assert_eq!(status, "success");
    assert!(dir.join("g.txt").exists());
}

#[tokio::test]
async fn post_tool_use_hooks_fire_after_execution_without_holding_up_the_run() {
    let mock = MockServer::start().await.unwrap();
    let marks = tempfile::tempdir().unwrap();
    // The hook waits (bounded) for a gate the test opens only after the run completed, then
    // records its input. Its deny answer must be ignored.
    let extra = format!(
        r#"
# Hooks are confined like commands: they write their marks here.
[sandbox]
hook_writable_paths = ["{m}"]

[[engines.tinyelf.hooks]]
event = "PostToolUse"
matcher = "read_file"
timeout_secs = 60
command = '''
in=$(cat)
for i in $(seq 1 1200); do [ -e "{m}/gate" ] && break; sleep 0.025; done
printf '%s\n' "$in" >> "{m}/post.jsonl"
echo '{{"decision":"deny","reason":"too late"}}'
'''
"#,
        m = marks.path().display()
    );
    let d = daemon_with(&mock, &extra);
    let dir = project();
    script(
        &mock,
        "post",
        json!([{"toolCalls": [
            call("p1", "read_file", json!({"path": "a.txt"})),
            call("p2", "read_file", json!({"path": "missing.txt"})),
            call("p3", "list_dir", json!({}))
        ]}, {"text": "ok"}]),
    );
    let (sid, run1, evs) = run(&d, session("post", "mock:script=post", &dir, json!({}))).await;
    assert_eq!(finish_of(&evs), "stop");
    let e = ends_by_id(&evs);
    assert_eq!(e["p1"].0, "success");
    assert_eq!(e["p2"].0, "error");
    // The run completed while both hooks were still waiting for the gate: fire-and-forget.
    assert!(!marks.path().join("post.jsonl").exists());
    std::fs::write(marks.path().join("gate"), "").unwrap();
    let out = wait_for_file(&marks.path().join("post.jsonl"), 2).await;
    let got: std::collections::BTreeMap<String, Value> = out
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|v| (v["toolUseId"].as_str().unwrap().to_string(), v))
        .collect();
    // The matcher kept list_dir out.
    assert_eq!(got.keys().collect::<Vec<_>>(), ["p1", "p2"]);
    let p1 = &got["p1"];
    assert_eq!(p1["event"], "PostToolUse");
    assert_eq!(p1["toolName"], "read_file");
    assert_eq!(p1["sessionId"], sid.as_str());
    assert_eq!(p1["runId"], run1.as_str());
    assert_eq!(p1["input"], json!({"path": "a.txt"}));
    assert_eq!(p1["status"], "success");
    assert_eq!(p1["result"].as_str().unwrap(), e["p1"].1);
    assert!(p1["result"].as_str().unwrap().contains("hello world"));
    assert_eq!(got["p2"]["status"], "error");
    assert_eq!(got["p2"]["result"].as_str().unwrap(), e["p2"].1);
    // The hook's deny changed nothing: the stored result is the tool's.
    let msgs = stored(&d, &sid).await;
    assert_eq!(msgs[2]["blocks"][0]["content"].as_str().unwrap(), e["p1"].1);
}

/// UserPromptSubmit hooks see every prompt before anything of it is stored: a deny refuses it
/// (422 with the hook's reason; nothing stored, no session made), a `prompt` in the answer
/// rewrites it and `hookSpecificOutput.additionalContext` adds to it (what is stored and sent
/// is the result), for a first prompt and a later one, on tinyelf and on chat.
#[tokio::test]
async fn user_prompt_submit_hooks_block_and_rewrite_prompts() {
    let mock = MockServer::start().await.unwrap();
    let marks = tempfile::tempdir().unwrap();
    let extra = format!(
        r#"
# Hooks are confined like commands: they write their marks here.
[sandbox]
hook_writable_paths = ["{m}"]

[[engines.tinyelf.hooks]]
event = "UserPromptSubmit"
command = '''
in=$(cat)
printf '%s\n' "$in" >> "{m}/seen.jsonl"
case "$in" in
  *forbidden*) echo "no forbidden words" >&2; exit 2 ;;
  *"rewrite me"*) echo '{{"prompt": "the rewritten prompt"}}' ;;
  *"add context"*) echo '{{"hookSpecificOutput": {{"hookEventName": "UserPromptSubmit", "additionalContext": "Context from the hook."}}}}' ;;
esac
'''
"#,
        m = marks.path().display()
    );
    let d = daemon_with(&mock, &extra);
    let dir = project();
    script(
        &mock,
        "ps",
        json!([{"text": "one"}, {"text": "two"}, {"text": "three"}]),
    );

    // A first prompt rewritten: the rewritten one is stored and sent.
    let (sid, _, evs) = run(
        &d,
        session("please rewrite me", "mock:script=ps", &dir, json!({})),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop");
    assert_eq!(
        scripted::user_prompts(&d, &sid).await,
        ["the rewritten prompt"]
    );
    let sent = bodies_for(&mock, "mock:script=ps");
    let last = sent[0]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .to_string();
    assert!(last.contains("the rewritten prompt"), "{last}");
    assert!(!last.contains("please rewrite me"), "{last}");

    // A later prompt blocked: 422 with the hook's reason, nothing stored.
    let (s, v) = d
        .post(
            &format!("/v1/sessions/{sid}/messages"),
            json!({"prompt": "say forbidden things"}),
        )
        .await;
    assert_eq!(s, 422, "{v}");
    assert!(
        v.to_string()
            .contains("UserPromptSubmit hook: no forbidden words"),
        "{v}"
    );
    assert_eq!(scripted::user_prompts(&d, &sid).await.len(), 1);

    // A later prompt added to.
    let (_, evs) = scripted::resume(&d, &sid, json!({"prompt": "add context"})).await;
    assert_eq!(finish_of(&evs), "stop");
    assert_eq!(
        scripted::user_prompts(&d, &sid).await[1],
        "add context\n\nContext from the hook."
    );

    // A first prompt blocked makes no session, on chat as on tinyelf.
    let (_, before) = d.get("/v1/sessions").await;
    for engine in ["tinyelf", "chat"] {
        let mut body = session("forbidden fruit", "mock:script=ps", &dir, json!({}));
        body["engine"] = json!(engine);
        let (s, v) = d.post("/v1/sessions", body).await;
        assert_eq!(s, 422, "{engine}: {v}");
        assert!(v.to_string().contains("no forbidden words"), "{v}");
    }
    let (_, after) = d.get("/v1/sessions").await;
    assert_eq!(before["sessions"], after["sessions"]);

    // What the hook was given: the event, the engine, the session (none yet for a first
    // prompt) and the prompt.
    let seen: Vec<Value> = std::fs::read_to_string(marks.path().join("seen.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(seen[0]["event"], "UserPromptSubmit");
    assert_eq!(seen[0]["engine"], "tinyelf");
    assert_eq!(seen[0]["sessionId"], Value::Null);
    assert_eq!(seen[0]["prompt"], "please rewrite me");
    assert_eq!(seen[1]["sessionId"], sid.as_str());
    assert_eq!(seen.last().unwrap()["engine"], "chat");

    // Through a gateway door: the request the door built from the caller's messages is sent
    // with the rewritten prompt, not the caller's.
    let before = mock.requests().len();
    let (s, v) = d
        .post(
            "/v1/chat/completions",
            json!({"model": "mock/mock:tokens=2", "messages": [
                {"role": "user", "content": "door: please rewrite me"}]}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let sent = mock.requests()[before].body.to_string();
    assert!(sent.contains("the rewritten prompt"), "{sent}");
    assert!(!sent.contains("door: please rewrite me"), "{sent}");
}

/// channelSource, channelId and channelSenderId are the run's: stored on it (its record shows
/// them), handed to hooks and told to the guardian; a later prompt without them has none; an
/// empty or overlong one is 422 naming it.
#[tokio::test]
async fn channel_fields_reach_the_run_record_hooks_and_guardian() {
    let mock = MockServer::start().await.unwrap();
    let marks = tempfile::tempdir().unwrap();
    let extra = format!(
        r#"
# Hooks are confined like commands: they write their marks here.
[sandbox]
hook_writable_paths = ["{m}"]

[[engines.tinyelf.hooks]]
event = "PreToolUse"
command = '''cat >> "{m}/pre.jsonl"; echo >> "{m}/pre.jsonl"; echo '{{"decision": "allow"}}' '''

[engines.tinyelf.guardian]
enabled = true
provider = "mock"
model = "mock:script=chan-guard"
"#,
        m = marks.path().display()
    );
    let d = daemon_with(&mock, &extra);
    script(&mock, "chan-guard", json!([{"text": "SAFE"}]));
    script(
        &mock,
        "chan",
        json!([{"toolCalls": [call("w1", "write_file", json!({"path": "c.txt", "content": "x"}))]},
               {"text": "ok"}, {"text": "again"}]),
    );
    let dir = project();
    let (sid, run1, evs) = run(
        &d,
        session(
            "w",
            "mock:script=chan",
            &dir,
            json!({"permissionMode": "bypassPermissions", "channelSource": "slack",
                   "channelId": "C1", "channelSenderId": "U7"}),
        ),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop");
    assert_eq!(ends(&evs)[0].0, "success");
    let (_, r) = d.get(&format!("/v1/sessions/{sid}/runs/{run1}")).await;
    assert_eq!(
        (&r["channelSource"], &r["channelId"], &r["channelSenderId"]),
        (&json!("slack"), &json!("C1"), &json!("U7")),
        "{r}"
    );
    let pre: Value = serde_json::from_str(
        std::fs::read_to_string(marks.path().join("pre.jsonl"))
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(pre["channelSenderId"], "U7", "{pre}");
    assert_eq!(pre["channelSource"], "slack", "{pre}");
    let asked = bodies_for(&mock, "mock:script=chan-guard")[0].to_string();
    assert!(asked.contains("channelSenderId: U7"), "{asked}");

    // The next prompt came from nowhere in particular: its run has no channel.
    let (run2, _) = scripted::resume(&d, &sid, json!({"prompt": "more"})).await;
    let (_, r) = d.get(&format!("/v1/sessions/{sid}/runs/{run2}")).await;
    assert!(r.get("channelSenderId").is_none(), "{r}");

    for (field, value, why) in [
        ("channelId", json!(""), "channelId must not be empty"),
        (
            "channelSenderId",
            json!("x".repeat(300)),
            "channelSenderId is longer than 256 characters",
        ),
    ] {
        let mut body = session("w", "mock:script=chan", &dir, json!({}));
        body[field] = value;
        let (s, v) = d.post("/v1/sessions", body).await;
        assert_eq!(s, 422, "{v}");
        assert!(v.to_string().contains(why), "{v}");
    }
}

/// After `result`, a `postTurn` event says what the turn decided and used: its tool calls, the
/// blocked ones with the gate and the reason, its tokens and (prices configured) its cost; every
/// blocked call is in the session's audit (GET /v1/sessions/{id}/audit) with its input.
#[tokio::test]
async fn post_turn_records_and_the_audit_list_blocked_calls_by_gate() {
    let mock = MockServer::start().await.unwrap();
    let model = "mock:script=audited";
    let extra = format!(
        r#"
[[engines.tinyelf.hooks]]
event = "PreToolUse"
matcher = "write_file"
command = '''cat > /dev/null; echo '{{"decision":"deny","reason":"no writes today"}}' '''

[engines.tinyelf.tool_tiers]
list_dir = "manual_only"

[providers.mock.models."{model}"]
input_usd_per_mtok = 2.0
output_usd_per_mtok = 8.0
"#
    );
    let d = daemon_with(&mock, &extra);
    let dir = project();
    script(
        &mock,
        "audited",
        json!([
            {"toolCalls": [call("w", "write_file", json!({"path": "x.txt", "content": "x"}))]},
            {"toolCalls": [call("f", "read_file", json!({"path": "../../../etc/hostname"}))]},
            {"toolCalls": [call("l", "list_dir", json!({}))]},
            {"toolCalls": [call("r", "read_file", json!({"path": "a.txt"}))]},
            {"text": "done"}
        ]),
    );
    let (sid, _, evs) = run(
        &d,
        session(
            "go",
            model,
            &dir,
            json!({"permissionMode": "bypassPermissions"}),
        ),
    )
    .await;
    let t = common::types(&evs);
    assert_eq!(
        t[t.len() - 3..],
        ["result", "postTurn", "complete"],
        "{t:?}"
    );
    let result = &evs[evs.len() - 3].data["stats"];
    let turn = &evs[evs.len() - 2].data["turn"];
    let called: Vec<(&str, &str)> = turn["toolsCalled"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        called,
        [
            ("write_file", "denied"),
            ("read_file", "denied"),
            ("list_dir", "denied"),
            ("read_file", "success")
        ]
    );
    let gates: Vec<&str> = turn["denied"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["gate"].as_str().unwrap())
        .collect();
    assert_eq!(gates, ["hook", "firewall", "policy"]);
    assert!(
        turn["denied"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("no writes today")
    );
    assert_eq!(turn["inputTokens"], result["inputTokens"]);
    assert_eq!(turn["outputTokens"], result["outputTokens"]);
    assert_eq!(turn["finishReason"], "stop");
    let (input, output) = (
        result["inputTokens"].as_f64().unwrap(),
        result["outputTokens"].as_f64().unwrap(),
    );
    let cost = turn["costUsd"].as_f64().unwrap();
    assert!(
        (cost - (input * 2.0 + output * 8.0) / 1e6).abs() < 1e-12,
        "{cost}"
    );

    let (s, a) = d.get(&format!("/v1/sessions/{sid}/audit")).await;
    assert_eq!(s, 200, "{a}");
    let audit = a["audit"].as_array().unwrap();
    assert_eq!(
        audit
            .iter()
            .map(|r| r["gate"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["hook", "firewall", "policy"]
    );
    assert_eq!(audit[1]["toolName"], "read_file");
    assert_eq!(audit[1]["input"]["path"], "../../../etc/hostname");
    assert!(
        audit[1]["reason"].as_str().unwrap().contains("firewall"),
        "{}",
        audit[1]
    );
    assert_eq!(audit[2]["toolUseId"], "l");
    let (s, a) = d.get(&format!("/v1/sessions/{sid}/audit?limit=1")).await;
    assert_eq!(s, 200);
    assert_eq!(a["audit"][0]["gate"], "policy");
    let (s, _) = d
        .get("/v1/sessions/0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b/audit")
        .await;
    assert_eq!(s, 404);
}
