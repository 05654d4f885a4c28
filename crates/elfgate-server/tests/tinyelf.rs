//! The tinyelf engine end to end through the HTTP API, against scripted tool calls from
//! elfgate-mockllm, in temporary project directories.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod scripted;

use common::{Daemon, Ev, GUARD, Opts, allow, text_of, types};
use elfgate_mockllm::MockServer;
use scripted::{call, ends_by_id, finish_of, of, run, script, session};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn project() -> PathBuf {
    let dir = tempfile::tempdir().unwrap().keep();
    std::fs::write(dir.join("a.txt"), "hello world\nsecond line\nthird line\n").unwrap();
    dir
}

fn ends(evs: &[Ev]) -> Vec<(String, String)> {
    of(evs, "toolCallEnd")
        .iter()
        .map(|e| {
            (
                e.data["status"].as_str().unwrap().to_string(),
                e.data["block"]["content"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

async fn stored(d: &Daemon, sid: &str) -> Vec<Value> {
    let (s, v) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    assert_eq!(s, 200);
    v["messages"].as_array().unwrap().clone()
}

fn roles(msgs: &[Value]) -> Vec<&str> {
    msgs.iter().map(|m| m["role"].as_str().unwrap()).collect()
}

fn bodies_for(mock: &MockServer, model: &str) -> Vec<Value> {
    mock.requests()
        .into_iter()
        .filter(|r| r.model == model)
        .map(|r| r.body)
        .collect()
}

/// Waits (bounded) for a file the tool under test writes; a marker, not a timing assumption.
async fn wait_for_file(path: &Path, min_lines: usize) -> String {
    let deadline = Instant::now() + GUARD;
    loop {
        if let Ok(s) = std::fs::read_to_string(path)
            && s.lines().filter(|l| !l.trim().is_empty()).count() >= min_lines
        {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Processes of a process group that are still alive (not zombies).
fn live_in_group(pgid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp ...
        let Some(rest) = stat.rsplit_once(") ").map(|(_, r)| r) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() > 2 && f[2] == pgid.to_string() && f[0] != "Z" && f[0] != "X" {
            out.push(pid);
        }
    }
    out
}

/// Waits (bounded) until `check` finds no live process. SIGKILL is delivered asynchronously, so a
/// process killed a moment ago may still show as running on a loaded machine.
async fn until_dead(check: impl Fn() -> Vec<i32>) -> Vec<i32> {
    let mut left = check();
    for _ in 0..500 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        left = check();
    }
    left
}

/// Processes of these pids that are still alive (not zombies).
fn alive(pids: &[i32]) -> Vec<i32> {
    pids.iter()
        .copied()
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| s.rsplit_once(") ").map(|(_, r)| r.chars().next()))
                .flatten()
                .is_some_and(|c| c != 'Z' && c != 'X')
        })
        .collect()
}

/// A PreToolUse hook that makes read_file and grep wait for each other: each marks its start,
/// then waits (bounded) until the other has started. Both are allowed only if their pipelines
/// overlapped; run one after the other, the first would be denied with "no overlap".
fn barrier_hook(marks: &Path) -> String {
    format!(
        r#"
[[engines.tinyelf.hooks]]
event = "PreToolUse"
matcher = "read_file|grep"
timeout_secs = 20
command = '''
in=$(cat)
t=$(printf %s "$in" | grep -o '"toolName":"[^"]*"' | cut -d'"' -f4)
s=$(printf %s "$in" | grep -o '"sessionId":"[^"]*"' | cut -d'"' -f4)
d="{marks}/$s"; mkdir -p "$d"; touch "$d/$t"
other=grep; [ "$t" = grep ] && other=read_file
for i in $(seq 1 600); do
  if [ -e "$d/$other" ]; then echo '{{"decision":"allow"}}'; exit 0; fi
  sleep 0.025
done
echo '{{"decision":"deny","reason":"no overlap"}}'
'''
"#,
        marks = marks.display()
    )
}

async fn two_iterations_on(d: &Daemon, mock: &MockServer, provider: &str, name: &str) {
    let dir = project();
    let model = format!("mock:script={name}");
    script(
        mock,
        name,
        json!([
            {"text": "Let me look.", "toolCalls": [
                call("c1", "read_file", json!({"path": "a.txt"})),
                call("c2", "grep", json!({"pattern": "second"}))
            ]},
            {"text": "The file says hello."},
            {"text": "Resumed."}
        ]),
    );
    let (sid, run1, evs) = run(
        d,
        session(
            "what is in a.txt?",
            &model,
            &dir,
            json!({"providerId": provider}),
        ),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop", "{:?}", types(&evs));
    // Both calls started before either ended (the hook barrier needs both in flight at once).
    let t = types(&evs);
    let first_end = t.iter().position(|x| *x == "toolCallEnd").unwrap();
    assert_eq!(
        t[..first_end]
            .iter()
            .filter(|x| **x == "toolCallStart")
            .count(),
        2
    );
    // toolCallEnd events come in completion order; the transcript keeps the calls' order.
    let e = ends_by_id(&evs);
    assert_eq!(e.len(), 2);
    assert_eq!(e["c1"].0, "success", "{e:?}");
    assert!(e["c1"].1.contains("hello world"), "{e:?}");
    assert_eq!(e["c2"].0, "success", "{e:?}");
    assert!(e["c2"].1.contains("a.txt:2: second line"), "{e:?}");
    let result = of(&evs, "result")[0];
    assert_eq!(result.data["stats"]["iterations"], 2);
    assert_eq!(of(&evs, "assistantMessage").len(), 2);

    // Stored: user, assistant (text + 2 tool_use), tool (2 tool_result in call order), assistant.
    let msgs = stored(d, &sid).await;
    assert_eq!(roles(&msgs), ["user", "assistant", "tool", "assistant"]);
    let a = msgs[1]["blocks"].as_array().unwrap();
    assert_eq!(a[0]["type"], "text");
    assert_eq!(a[1]["type"], "tool_use");
    assert_eq!(a[1]["name"], "read_file");
    assert_eq!(a[1]["input"], json!({"path": "a.txt"}));
    assert_eq!(a[2]["name"], "grep");
    let r = msgs[2]["blocks"].as_array().unwrap();
    let ids: Vec<&str> = r
        .iter()
        .map(|b| b["tool_use_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["c1", "c2"]);
    assert_eq!(msgs[3]["blocks"][0]["text"], "The file says hello.");

    // Resume: the history goes upstream with the tool exchange.
    let run2 = d
        .send(&sid, json!({"prompt": "and now?", "model": model}))
        .await;
    let mut sse = d.events(&sid, None).await;
    let evs2 = sse.until_complete(&run2).await;
    assert_ne!(run1, run2);
    assert_eq!(finish_of(&evs2), "stop");
    let bodies = bodies_for(mock, &model);
    assert_eq!(bodies.len(), 3);
    let m = bodies[2]["messages"].as_array().unwrap();
    if provider == "mock" {
        let r: Vec<&str> = m.iter().map(|x| x["role"].as_str().unwrap()).collect();
        assert_eq!(
            r,
            [
                "system",
                "user",
                "assistant",
                "tool",
                "tool",
                "assistant",
                "user"
            ]
        );
        let tc = m[2]["tool_calls"].as_array().unwrap();
        assert_eq!(tc[0]["id"], "c1");
        assert_eq!(tc[0]["function"]["name"], "read_file");
        let args: Value =
            serde_json::from_str(tc[0]["function"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(args, json!({"path": "a.txt"}));
        assert_eq!(m[3]["tool_call_id"], "c1");
        assert!(m[3]["content"].as_str().unwrap().contains("hello world"));
        assert_eq!(m[4]["tool_call_id"], "c2");
        assert_eq!(m[6]["content"], "and now?");
        // The tools were offered.
        let names: Vec<&str> = bodies[0]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"read_file") && names.contains(&"shell"));
    } else {
        let r: Vec<&str> = m.iter().map(|x| x["role"].as_str().unwrap()).collect();
        assert_eq!(r, ["user", "assistant", "user", "assistant", "user"]);
        let blocks = m[1]["content"].as_array().unwrap();
        let uses: Vec<&Value> = blocks.iter().filter(|b| b["type"] == "tool_use").collect();
        assert_eq!(uses.len(), 2);
        assert_eq!(uses[0]["id"], "c1");
        assert_eq!(uses[0]["input"], json!({"path": "a.txt"}));
        let results = m[2]["content"].as_array().unwrap();
        assert_eq!(results[0]["type"], "tool_result");
        assert_eq!(results[0]["tool_use_id"], "c1");
        assert_eq!(results[1]["tool_use_id"], "c2");
        assert!(bodies[0]["system"].is_string() || bodies[0]["system"].is_array());
    }
}

#[tokio::test]
async fn two_iterations_with_concurrent_tools_and_resume_in_both_formats() {
    let mock = MockServer::start().await.unwrap();
    let marks = tempfile::tempdir().unwrap();
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: barrier_hook(marks.path()),
            ..Opts::default()
        },
    );
    two_iterations_on(&d, &mock, "mock", "two-openai").await;
    two_iterations_on(&d, &mock, "mock-anthropic", "two-anthropic").await;
}

#[tokio::test]
async fn max_iterations_and_think_stripping() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();
    script(
        &mock,
        "forever",
        json!([{"toolCalls": [call("x", "list_dir", json!({}))]}]),
    );
    let (_, _, evs) = run(
        &d,
        session(
            "loop",
            "mock:script=forever",
            &dir,
            json!({"engineConfig": {"maxIterations": 3}}),
        ),
    )
    .await;
    assert_eq!(finish_of(&evs), "max_iterations");
    assert_eq!(of(&evs, "result")[0].data["stats"]["iterations"], 3);
    assert_eq!(bodies_for(&mock, "mock:script=forever").len(), 3);
    assert_eq!(of(&evs, "toolCallEnd").len(), 3);

    script(
        &mock,
        "think",
        json!([{"text": "<think>secret plan</think>\n\nThe answer is 42."}]),
    );
    let (sid, _, evs) = run(&d, session("q", "mock:script=think", &dir, json!({}))).await;
    assert_eq!(finish_of(&evs), "stop");
    assert_eq!(text_of(&evs), "The answer is 42.");
    let thinking: String = of(&evs, "streamDelta")
        .iter()
        .filter(|e| e.data["delta"]["kind"] == "thinking")
        .map(|e| e.data["delta"]["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(thinking, "secret plan");
    let msgs = stored(&d, &sid).await;
    let blocks = &msgs[1]["blocks"];
    assert_eq!(
        blocks[0],
        json!({"type": "thinking", "thinking": "secret plan"})
    );
    assert_eq!(
        blocks[1],
        json!({"type": "text", "text": "The answer is 42."})
    );
}

#[tokio::test]
async fn interrupting_a_shell_kills_its_process_group_and_resume_works() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();
    script(
        &mock,
        "sleepy",
        json!([
            {"toolCalls": [call("s1", "shell", json!({"command": "sleep 600 & echo $! > child.pid; echo $$ > sh.pid; wait"}))]},
            {"text": "Resumed after the interrupt."}
        ]),
    );
    let (sid, run1) = d
        .create(session(
            "sleep",
            "mock:script=sleepy",
            &dir,
            json!({"permissionMode": "bypassPermissions"}),
        ))
        .await;
    let mut sse = d.events(&sid, None).await;
    wait_for_file(&dir.join("sh.pid"), 1).await;
    let child: i32 = wait_for_file(&dir.join("child.pid"), 1)
        .await
        .trim()
        .parse()
        .unwrap();
    let sh: i32 = std::fs::read_to_string(dir.join("sh.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(alive(&[sh, child]).len(), 2);
    let t0 = Instant::now();
    let (s, v) = d
        .post(
            &format!("/v1/sessions/{sid}/interrupt"),
            json!({"wait": true}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["interrupted"], true);
    let evs = sse.until_complete(&run1).await;
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "interrupt took {:?}",
        t0.elapsed()
    );
    assert_eq!(finish_of(&evs), "interrupted");
    let e = ends(&evs);
    assert_eq!(e[0].0, "interrupted");
    // No process of the group survives.
    let left = until_dead(|| live_in_group(sh)).await;
    assert!(left.is_empty(), "{left:?}");
    assert!(until_dead(|| alive(&[sh, child])).await.is_empty());
    // The transcript holds a synthetic interrupted result.
    let msgs = stored(&d, &sid).await;
    assert_eq!(roles(&msgs), ["user", "assistant", "tool"]);
    let r = &msgs[2]["blocks"][0];
    assert_eq!(r["tool_use_id"], "s1");
    assert_eq!(r["is_error"], true);
    assert!(r["content"].as_str().unwrap().contains("interrupted"));
    // Resume works and sends the interrupted exchange upstream.
    let run2 = d.send(&sid, json!({"prompt": "go on"})).await;
    let evs2 = sse.until_complete(&run2).await;
    assert_eq!(finish_of(&evs2), "stop");
    assert_eq!(text_of(&evs2), "Resumed after the interrupt.");
    let bodies = bodies_for(&mock, "mock:script=sleepy");
    let m = bodies[1]["messages"].as_array().unwrap();
    let r: Vec<&str> = m.iter().map(|x| x["role"].as_str().unwrap()).collect();
    assert_eq!(r, ["system", "user", "assistant", "tool", "user"]);
    assert!(m[3]["content"].as_str().unwrap().contains("interrupted"));
}

#[tokio::test]
async fn timeout_truncation_and_firewall_denials() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();
    let bypass = |extra: Value| {
        let mut v = json!({"permissionMode": "bypassPermissions"});
        if let Value::Object(m) = extra {
            for (k, x) in m {
                v[k] = x;
            }
        }
        v
    };

    // Tool timeout.
    script(
        &mock,
        "slow",
        json!([{"toolCalls": [call("t1", "shell", json!({"command": "echo $$ > slow.pid; exec sleep 60"}))]}, {"text": "ok"}]),
    );
    let (_, _, evs) = run(
        &d,
        session(
            "slow",
            "mock:script=slow",
            &dir,
            bypass(json!({"engineConfig": {"toolExecutionTimeout": 500}})),
        ),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop");
    let e = ends(&evs);
    assert_eq!(e[0].0, "timeout", "{e:?}");
    assert!(e[0].1.contains("timed out"));
    let pid: i32 = std::fs::read_to_string(dir.join("slow.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(until_dead(|| alive(&[pid])).await.is_empty());

    // Truncation with a visible marker.
    std::fs::write(dir.join("big.txt"), "x".repeat(5000)).unwrap();
    script(
        &mock,
        "big",
        json!([{"toolCalls": [call("b1", "read_file", json!({"path": "big.txt"}))]}, {"text": "ok"}]),
    );
    let (_, _, evs) = run(
        &d,
        session(
            "big",
            "mock:script=big",
            &dir,
            json!({"engineConfig": {"toolResultMaxChars": 100}}),
        ),
    )
    .await;
    let e = ends(&evs);
    assert_eq!(e[0].0, "success");
    assert!(e[0].1.starts_with(&"x".repeat(100)));
    assert!(
        e[0].1
            .contains("output truncated: showing 100 of 5000 characters"),
        "{}",
        e[0].1
    );
    assert!(e[0].1.len() < 300);

    // Firewall: .. traversal, a symlink out of the project, a denied command, the daemon's data dir.
    let outside = tempfile::tempdir().unwrap().keep();
    std::fs::write(outside.join("secret.txt"), "s3cret").unwrap();
    let rel = format!(
        "../{}/secret.txt",
        outside.file_name().unwrap().to_string_lossy()
    );
    std::os::unix::fs::symlink(&outside, dir.join("link")).unwrap();
    script(
        &mock,
        "fw",
        json!([{"toolCalls": [
            call("f1", "read_file", json!({"path": rel})),
            call("f2", "read_file", json!({"path": "link/secret.txt"})),
            call("f3", "shell", json!({"command": "rm -rf /"})),
            call("f4", "read_file", json!({"path": d.dir.join("elfgate.db").display().to_string()})),
            call("f5", "write_file", json!({"path": "link/new.txt", "content": "x"}))
        ]}, {"text": "ok"}]),
    );
    let (_, _, evs) = run(&d, session("fw", "mock:script=fw", &dir, bypass(json!({})))).await;
    assert_eq!(finish_of(&evs), "stop");
    let e = ends_by_id(&evs);
    assert_eq!(e.len(), 5);
    for (status, content) in e.values() {
        assert_eq!(status, "denied", "{e:?}");
        assert!(content.contains("firewall"), "{content}");
        assert!(!content.contains("s3cret"));
    }
    assert!(e["f1"].1.contains("outside the project"));
    assert!(e["f2"].1.contains("outside the project"));
    assert!(e["f3"].1.contains("command denied"));
    assert!(e["f4"].1.contains("protected location"));
    assert!(!outside.join("new.txt").exists());
}

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
timeout_secs = 10
"#;
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: extra.into(),
            ..Opts::default()
        },
    );
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

async fn next_of(sse: &mut common::Sse, kind: &str) -> Ev {
    loop {
        let ev = sse.next().await.expect("stream ended");
        if ev.event == kind {
            return ev;
        }
    }
}

#[tokio::test]
async fn permission_round_trips() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();

    // Allowed (and confirm_once asks only once: two write_file iterations, one request).
    script(
        &mock,
        "perm-allow",
        json!([
            {"toolCalls": [call("p1", "write_file", json!({"path": "one.txt", "content": "1"}))]},
            {"toolCalls": [call("p2", "write_file", json!({"path": "two.txt", "content": "2"}))]},
            {"text": "written"}
        ]),
    );
    let (sid, run1) = d
        .create(session("write", "mock:script=perm-allow", &dir, json!({})))
        .await;
    let mut sse = d.events(&sid, None).await;
    let req = next_of(&mut sse, "permissionRequest").await;
    assert_eq!(req.data["toolName"], "write_file");
    assert_eq!(req.data["tier"], "confirm_once");
    assert_eq!(
        req.data["input"],
        json!({"path": "one.txt", "content": "1"})
    );
    assert!(req.data["expiresAt"].is_string());
    let rid = req.data["requestId"].as_str().unwrap().to_string();
    assert!(!dir.join("one.txt").exists());
    // A client that reconnects past the request gets it again.
    let mut again = d.events(&sid, Some(req.seq())).await;
    let re = again.next().await.unwrap();
    assert_eq!(re.event, "permissionRequest");
    assert_eq!(re.data["requestId"], rid.as_str());
    assert_eq!(re.id, None);
    drop(again);
    // Bad bodies and unknown ids.
    let path = format!("/v1/sessions/{sid}/permissions/{rid}");
    let (s, _) = d.post(&path, json!({"decision": "maybe"})).await;
    assert_eq!(s, 400);
    let (s, _) = d
        .post(
            &format!("/v1/sessions/{sid}/permissions/nope"),
            json!({"decision": "allow"}),
        )
        .await;
    assert_eq!(s, 404);
    let (s, v) = d.post(&path, json!({"decision": "allow"})).await;
    assert_eq!(s, 200, "{v}");
    let (s, _) = d.post(&path, json!({"decision": "deny"})).await;
    assert_eq!(s, 409);
    let evs = sse.until_complete(&run1).await;
    assert_eq!(finish_of(&evs), "stop");
    let resolved = of(&evs, "permissionResolved");
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0].data["decision"], "allow");
    // confirm_once: the second write_file ran without a second request.
    assert!(of(&evs, "permissionRequest").is_empty());
    let e = ends(&evs);
    assert_eq!(e.len(), 2);
    assert_eq!(e[0].0, "success");
    assert_eq!(e[1].0, "success");
    assert_eq!(std::fs::read_to_string(dir.join("one.txt")).unwrap(), "1");
    assert_eq!(std::fs::read_to_string(dir.join("two.txt")).unwrap(), "2");

    // Two concurrent calls of one confirm_once tool: the client is asked once.
    script(
        &mock,
        "perm-pair",
        json!([{"toolCalls": [
            call("x1", "write_file", json!({"path": "x1.txt", "content": "1"})),
            call("x2", "write_file", json!({"path": "x2.txt", "content": "2"}))
        ]}, {"text": "ok"}]),
    );
    let (sid, run_pair) = d
        .create(session("pair", "mock:script=perm-pair", &dir, json!({})))
        .await;
    let mut sse = d.events(&sid, None).await;
    let req = next_of(&mut sse, "permissionRequest").await;
    let rid = req.data["requestId"].as_str().unwrap();
    let (s, _) = d
        .post(
            &format!("/v1/sessions/{sid}/permissions/{rid}"),
            json!({"decision": "allow"}),
        )
        .await;
    assert_eq!(s, 200);
    let evs = sse.until_complete(&run_pair).await;
    assert!(of(&evs, "permissionRequest").is_empty());
    let e = ends_by_id(&evs);
    assert_eq!(e["x1"].0, "success");
    assert_eq!(e["x2"].0, "success");

    // Denied, with a message the model sees.
    script(
        &mock,
        "perm-deny",
        json!([{"toolCalls": [call("d1", "shell", json!({"command": "touch denied.txt"}))]}, {"text": "ok"}]),
    );
    let (sid, run2) = d
        .create(session("deny", "mock:script=perm-deny", &dir, json!({})))
        .await;
    let mut sse = d.events(&sid, None).await;
    let req = next_of(&mut sse, "permissionRequest").await;
    assert_eq!(req.data["tier"], "always_confirm");
    let rid = req.data["requestId"].as_str().unwrap();
    let (s, _) = d
        .post(
            &format!("/v1/sessions/{sid}/permissions/{rid}"),
            json!({"decision": "deny", "message": "not on the main branch"}),
        )
        .await;
    assert_eq!(s, 200);
    let evs = sse.until_complete(&run2).await;
    let e = ends(&evs);
    assert_eq!(e[0].0, "denied");
    assert!(e[0].1.contains("not on the main branch"));
    assert!(!dir.join("denied.txt").exists());
    assert_eq!(of(&evs, "permissionResolved")[0].data["decision"], "deny");
    let bodies = bodies_for(&mock, "mock:script=perm-deny");
    assert!(bodies[1].to_string().contains("not on the main branch"));

    // Timed out with a short configured timeout: denied.
    script(
        &mock,
        "perm-timeout",
        json!([{"toolCalls": [call("t1", "shell", json!({"command": "touch late.txt"}))]}, {"text": "ok"}]),
    );
    let (sid, _, evs) = run(
        &d,
        session(
            "late",
            "mock:script=perm-timeout",
            &dir,
            json!({"engineConfig": {"permissionTimeout": 300}}),
        ),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop");
    let e = ends(&evs);
    assert_eq!(e[0].0, "denied");
    assert!(e[0].1.contains("nobody answered"), "{}", e[0].1);
    assert!(!dir.join("late.txt").exists());
    let req = of(&evs, "permissionRequest")[0];
    assert_eq!(of(&evs, "permissionResolved")[0].data["decision"], "deny");
    let rid = req.data["requestId"].as_str().unwrap();
    let (s, _) = d
        .post(
            &format!("/v1/sessions/{sid}/permissions/{rid}"),
            json!({"decision": "allow"}),
        )
        .await;
    assert_eq!(s, 409);
}

#[tokio::test]
async fn background_and_foreground_sub_agents() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();

    // Background: its result is drained into the parent after the parent's plain answer.
    script(&mock, "sub-bg", json!([{"text": "seven"}]));
    script(
        &mock,
        "parent-bg",
        json!([
            {"toolCalls": [call("sp1", "spawn", json!({"task": "count the lines", "label": "counter", "background": true}))]},
            {"text": "Waiting for the counter."},
            {"text": "The counter said seven."}
        ]),
    );
    let (sid, _, evs) = run(
        &d,
        session(
            "count",
            "mock:script=parent-bg",
            &dir,
            json!({"engineConfig": {"subAgentModel": "mock:script=sub-bg"}}),
        ),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop", "{:?}", types(&evs));
    let e = ends(&evs);
    assert_eq!(e[0].0, "success");
    assert!(e[0].1.contains("Background agent \"counter\" started"));
    let msgs = stored(&d, &sid).await;
    assert_eq!(
        roles(&msgs),
        [
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
            "assistant"
        ]
    );
    let drained = msgs[4]["blocks"][0]["text"].as_str().unwrap();
    assert!(
        drained.starts_with("[Background agent \"counter\" ("),
        "{drained}"
    );
    assert!(drained.contains(") stop]\nseven"), "{drained}");
    assert_eq!(msgs[5]["blocks"][0]["text"], "The counter said seven.");
    let bodies = bodies_for(&mock, "mock:script=parent-bg");
    assert_eq!(bodies.len(), 3);
    assert!(
        bodies[2]
            .to_string()
            .contains("[Background agent \\\"counter\\\"")
    );
    // The drain did not use an iteration budget slot but every call is counted.
    assert_eq!(of(&evs, "result")[0].data["stats"]["iterations"], 3);

    // Foreground: the sub-agent's answer is the tool result; sub-agents get no spawn tool.
    script(&mock, "sub-fg", json!([{"text": "sub answer"}]));
    script(
        &mock,
        "parent-fg",
        json!([
            {"toolCalls": [call("sp2", "spawn", json!({"task": "answer", "label": "helper"}))]},
            {"text": "done"}
        ]),
    );
    let (_, _, evs) = run(
        &d,
        session(
            "fg",
            "mock:script=parent-fg",
            &dir,
            json!({"engineConfig": {"subAgentModel": "mock:script=sub-fg"}}),
        ),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop");
    let e = ends(&evs);
    assert_eq!(e[0], ("success".to_string(), "sub answer".to_string()));
    let sub = bodies_for(&mock, "mock:script=sub-fg");
    let tools: Vec<&str> = sub[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(!tools.contains(&"spawn"));
    assert!(tools.contains(&"read_file"));
}

#[tokio::test]
async fn interrupting_the_parent_stops_its_sub_agents() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();
    script(
        &mock,
        "sub-sleep",
        json!([{"toolCalls": [call("z", "shell", json!({"command": "echo $$ >> pids; exec sleep 600"}))]}]),
    );
    script(
        &mock,
        "parent-both",
        json!([{"toolCalls": [
            call("b", "spawn", json!({"task": "sleep", "label": "bg", "background": true})),
            call("f", "spawn", json!({"task": "sleep", "label": "fg"}))
        ]}]),
    );
    let (sid, run1) = d
        .create(session(
            "both",
            "mock:script=parent-both",
            &dir,
            json!({"permissionMode": "bypassPermissions",
                   "engineConfig": {"subAgentModel": "mock:script=sub-sleep"}}),
        ))
        .await;
    let mut sse = d.events(&sid, None).await;
    let pids: Vec<i32> = wait_for_file(&dir.join("pids"), 2)
        .await
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(alive(&pids).len(), 2);
    let (s, _) = d
        .post(
            &format!("/v1/sessions/{sid}/interrupt"),
            json!({"wait": true}),
        )
        .await;
    assert_eq!(s, 200);
    let evs = sse.until_complete(&run1).await;
    assert_eq!(finish_of(&evs), "interrupted");
    let left = until_dead(|| alive(&pids)).await;
    assert!(left.is_empty(), "{left:?}");
    let e = ends_by_id(&evs);
    // The background spawn had returned at once; the foreground one was interrupted.
    assert_eq!(e["b"].0, "success");
    assert_eq!(e["f"].0, "interrupted");
}

#[tokio::test]
async fn malformed_tool_arguments_become_a_correctable_error() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();
    script(
        &mock,
        "bad-args",
        json!([
            {"toolCalls": [
                {"id": "m1", "name": "read_file", "arguments": "{\"path\": \"a.txt\""},
                {"id": "m2", "name": "read_file", "arguments": "[1,2]"},
                {"id": "m3", "name": "read_file", "arguments": "{\"file\": 3}"},
                {"id": "m4", "name": "no_such_tool", "arguments": "{}"}
            ]},
            {"toolCalls": [call("m5", "read_file", json!({"path": "a.txt"}))]},
            {"text": "fixed"}
        ]),
    );
    let (sid, _, evs) = run(&d, session("bad", "mock:script=bad-args", &dir, json!({}))).await;
    assert_eq!(finish_of(&evs), "stop");
    let e = ends_by_id(&evs);
    assert_eq!(e.len(), 5);
    assert_eq!(e["m1"].0, "error");
    assert!(e["m1"].1.contains("not valid JSON"), "{}", e["m1"].1);
    assert!(
        e["m1"].1.contains("\"path\""),
        "the schema is shown: {}",
        e["m1"].1
    );
    assert!(e["m2"].1.contains("must be a JSON object"));
    assert_eq!(e["m3"].0, "error");
    assert!(e["m3"].1.contains("invalid input"), "{}", e["m3"].1);
    assert!(e["m4"].1.contains("unknown tool"));
    assert_eq!(e["m5"].0, "success");
    // The raw arguments are kept and sent back as the model wrote them.
    let msgs = stored(&d, &sid).await;
    assert_eq!(msgs[1]["blocks"][0]["input"], "{\"path\": \"a.txt\"");
    let bodies = bodies_for(&mock, "mock:script=bad-args");
    let m = bodies[1]["messages"].as_array().unwrap();
    assert_eq!(
        m[2]["tool_calls"][0]["function"]["arguments"],
        "{\"path\": \"a.txt\""
    );
}

#[tokio::test]
async fn llm_retries_then_error_after_the_last() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();
    script(&mock, "flaky", json!([{"text": "finally"}]));
    let cfg = json!({"engineConfig": {"llmRetryDelayMs": 5}});
    let (_, _, evs) = run(
        &d,
        session("r", "mock:script=flaky,fail=500x2", &dir, cfg.clone()),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop");
    let retries = of(&evs, "retry");
    assert_eq!(retries.len(), 2);
    assert_eq!(retries[0].data["retry"]["attempt"], 1);
    assert_eq!(retries[1].data["retry"]["delayMs"], 10);
    assert_eq!(text_of(&evs), "finally");

    let (_, _, evs) = run(&d, session("r", "mock:script=flaky,fail=503", &dir, cfg)).await;
    assert_eq!(finish_of(&evs), "error");
    assert_eq!(of(&evs, "retry").len(), 2);
    assert_eq!(of(&evs, "error").len(), 1);
}

#[tokio::test]
async fn session_tools_web_fetch_and_session_hooks() {
    let mock = MockServer::start().await.unwrap();
    let marks = tempfile::tempdir().unwrap();
    let extra = format!(
        r#"
[[engines.tinyelf.hooks]]
event = "SessionStart"
command = "cat >> {m}/start.jsonl; echo >> {m}/start.jsonl"

[[engines.tinyelf.hooks]]
event = "SessionEnd"
command = "cat >> {m}/end.jsonl; echo >> {m}/end.jsonl"
"#,
        m = marks.path().display()
    );
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: extra,
            ..Opts::default()
        },
    );
    let dir = project();
    script(&mock, "hello", json!([{"text": "hi there"}]));
    let (other, _, _) = run(
        &d,
        session("remember 17", "mock:script=hello", &dir, json!({})),
    )
    .await;
    let health = format!("{}/healthz", mock.base_url());
    script(
        &mock,
        "tools",
        json!([{"toolCalls": [
            call("l1", "list_sessions", json!({})),
            call("r1", "read_session_messages", json!({"session_id": other})),
            call("w1", "web_fetch", json!({"url": health}))
        ]}, {"text": "ok"}]),
    );
    let (_, _, evs) = run(
        &d,
        session(
            "look",
            "mock:script=tools",
            &dir,
            json!({"permissionMode": "bypassPermissions"}),
        ),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop");
    let e = ends_by_id(&evs);
    assert_eq!(e["l1"].0, "success");
    assert!(e["l1"].1.contains(&other));
    assert!(e["l1"].1.contains("(this session)"));
    assert_eq!(e["r1"].0, "success");
    assert!(e["r1"].1.contains("[user] remember 17"), "{}", e["r1"].1);
    assert!(e["r1"].1.contains("[assistant] hi there"));
    // The mock listens on loopback: refused by default.
    assert_eq!(e["w1"].0, "error");
    assert!(e["w1"].1.contains("non-public address"), "{}", e["w1"].1);
    // SessionStart and SessionEnd ran once per run with the run's description.
    let start = wait_for_file(&marks.path().join("start.jsonl"), 2).await;
    assert!(start.contains("\"event\":\"SessionStart\""));
    let end = wait_for_file(&marks.path().join("end.jsonl"), 2).await;
    assert!(end.contains("\"finishReason\":\"stop\""));
}

#[tokio::test]
async fn web_fetch_reaches_private_addresses_only_when_allowed() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml:
                "[engines.tinyelf]\nweb_fetch_allow_private = true\nweb_fetch_max_bytes = 1\n"
                    .into(),
            ..Opts::default()
        },
    );
    let dir = project();
    let health = format!("{}/healthz", mock.base_url());
    script(
        &mock,
        "fetch",
        json!([{"toolCalls": [call("w1", "web_fetch", json!({"url": health}))]}, {"text": "ok"}]),
    );
    let (_, _, evs) = run(
        &d,
        session(
            "get",
            "mock:script=fetch",
            &dir,
            json!({"permissionMode": "bypassPermissions"}),
        ),
    )
    .await;
    let e = ends_by_id(&evs);
    assert_eq!(e["w1"].0, "success", "{e:?}");
    assert!(e["w1"].1.starts_with('o'), "{}", e["w1"].1);
    assert!(e["w1"].1.contains("body cut at 1 bytes"), "{}", e["w1"].1);
}

#[tokio::test]
async fn engine_config_overrides_reach_the_request() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();
    script(
        &mock,
        "cfg",
        json!([{"toolCalls": [call("s1", "shell", json!({"command": "true"}))]}, {"text": "ok"}]),
    );
    let (_, _, evs) = run(
        &d,
        session(
            "cfg",
            "mock:script=cfg",
            &dir,
            json!({"engineConfig": {"enabledTools": ["read_file", "grep"], "temperature": 0.7,
                                    "maxTokens": 123, "maxTurns": 5, "thinkingLevel": "high"}}),
        ),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop");
    // A tool that is not enabled is not run.
    let e = ends_by_id(&evs);
    assert_eq!(e["s1"].0, "error");
    assert!(e["s1"].1.contains("unknown tool 'shell'"));
    let b = &bodies_for(&mock, "mock:script=cfg")[0];
    let names: Vec<&str> = b["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["grep", "read_file"]);
    assert!((b["temperature"].as_f64().unwrap() - 0.7).abs() < 1e-6);
    assert_eq!(b["reasoning_effort"], "high");
    let init = of(&evs, "init")[0];
    assert_eq!(init.data["systemInfo"]["maxIterations"], 5);
    // The final answer carries the run's token totals.
    let result = &of(&evs, "result")[0].data["stats"];
    let last = of(&evs, "assistantMessage").last().unwrap().data["message"].clone();
    assert_eq!(last["inputTokens"], result["inputTokens"]);
    assert_eq!(last["outputTokens"], result["outputTokens"]);
    assert!(result["outputTokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn plan_mode_manual_only_and_channel_permissions() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: "[engines.tinyelf.tool_tiers]\nlist_dir = \"manual_only\"\n".into(),
            ..Opts::default()
        },
    );
    let dir = project();
    script(
        &mock,
        "plan",
        json!([{"toolCalls": [
            call("w", "write_file", json!({"path": "p.txt", "content": "x"})),
            call("r", "read_file", json!({"path": "a.txt"})),
            call("l", "list_dir", json!({}))
        ]}, {"text": "ok"}]),
    );
    let (_, _, evs) = run(
        &d,
        session(
            "plan",
            "mock:script=plan",
            &dir,
            json!({"permissionMode": "plan"}),
        ),
    )
    .await;
    let e = ends_by_id(&evs);
    assert_eq!(e["w"].0, "denied");
    assert!(e["w"].1.contains("plan"));
    assert_eq!(e["r"].0, "success");
    assert_eq!(e["l"].0, "denied");
    assert!(e["l"].1.contains("manual_only"));
    assert!(!dir.join("p.txt").exists());

    script(
        &mock,
        "chan",
        json!([{"toolCalls": [call("r", "read_file", json!({"path": "a.txt"}))]}, {"text": "ok"}]),
    );
    let (_, _, evs) = run(
        &d,
        session(
            "chan",
            "mock:script=chan",
            &dir,
            json!({"permissionMode": "bypassPermissions", "channelPermissions": {"canUseTool": false}}),
        ),
    )
    .await;
    let e = ends_by_id(&evs);
    assert_eq!(e["r"].0, "denied");
    assert!(e["r"].1.contains("canUseTool"));

    // requireConfirmation asks even for a read-only tool; acceptEdits lets edits through.
    script(
        &mock,
        "confirm",
        json!([{"toolCalls": [call("r", "read_file", json!({"path": "a.txt"}))]},
               {"toolCalls": [call("w", "write_file", json!({"path": "q.txt", "content": "q"}))]},
               {"text": "ok"}]),
    );
    let (sid, run1) = d
        .create(session(
            "confirm",
            "mock:script=confirm",
            &dir,
            json!({"permissionMode": "acceptEdits",
                   "channelPermissions": {"canUseTool": true, "requireConfirmation": true}}),
        ))
        .await;
    let mut sse = d.events(&sid, None).await;
    for _ in 0..2 {
        let req = next_of(&mut sse, "permissionRequest").await;
        let rid = req.data["requestId"].as_str().unwrap();
        let (s, _) = d
            .post(
                &format!("/v1/sessions/{sid}/permissions/{rid}"),
                json!({"decision": "allow"}),
            )
            .await;
        assert_eq!(s, 200);
    }
    let evs = sse.until_complete(&run1).await;
    assert_eq!(finish_of(&evs), "stop");
    assert!(dir.join("q.txt").exists());
}

#[tokio::test]
async fn guardian_fails_closed_on_timeout_and_unclear_answers() {
    let mock = MockServer::start().await.unwrap();
    let extra = r#"
[engines.tinyelf.guardian]
enabled = true
model = "mock:script=gstall"
timeout_secs = 0.3
"#;
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: extra.into(),
            ..Opts::default()
        },
    );
    let dir = project();
    script(&mock, "gstall", json!([{"text": "SA", "stall": true}]));
    script(
        &mock,
        "gt",
        json!([{"toolCalls": [call("w", "write_file", json!({"path": "g.txt", "content": "x"}))]}, {"text": "ok"}]),
    );
    let (_, _, evs) = run(
        &d,
        session(
            "g",
            "mock:script=gt",
            &dir,
            json!({"permissionMode": "bypassPermissions"}),
        ),
    )
    .await;
    let e = ends_by_id(&evs);
    assert_eq!(e["w"].0, "denied");
    assert!(e["w"].1.contains("did not answer within"), "{}", e["w"].1);

    script(&mock, "gstall", json!([{"text": "Hmm, it depends."}]));
    script(
        &mock,
        "gt",
        json!([{"toolCalls": [call("w", "write_file", json!({"path": "g.txt", "content": "x"}))]}, {"text": "ok"}]),
    );
    let (_, _, evs) = run(
        &d,
        session(
            "g",
            "mock:script=gt",
            &dir,
            json!({"permissionMode": "bypassPermissions"}),
        ),
    )
    .await;
    let e = ends_by_id(&evs);
    assert_eq!(e["w"].0, "denied");
    assert!(e["w"].1.contains("unclear"), "{}", e["w"].1);
    assert!(!dir.join("g.txt").exists());

    script(&mock, "gstall", json!([{"text": "SAFE"}]));
    script(
        &mock,
        "gt",
        json!([{"toolCalls": [call("w", "write_file", json!({"path": "g.txt", "content": "x"}))]}, {"text": "ok"}]),
    );
    let (_, _, evs) = run(
        &d,
        session(
            "g",
            "mock:script=gt",
            &dir,
            json!({"permissionMode": "bypassPermissions"}),
        ),
    )
    .await;
    assert_eq!(ends_by_id(&evs)["w"].0, "success");
    assert!(dir.join("g.txt").exists());
}

#[tokio::test]
async fn a_yielding_tool_stops_the_run_until_the_user_answers() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();
    script(
        &mock,
        "ask",
        json!([
            {"text": "One question first.", "toolCalls": [call("q1", "ask_user", json!({"question": "Which file?"}))]},
            {"text": "Thanks, using a.txt."}
        ]),
    );
    let (sid, _, evs) = run(&d, session("edit it", "mock:script=ask", &dir, json!({}))).await;
    assert_eq!(finish_of(&evs), "stop");
    assert_eq!(of(&evs, "result")[0].data["stats"]["iterations"], 1);
    assert_eq!(bodies_for(&mock, "mock:script=ask").len(), 1);
    let msgs = stored(&d, &sid).await;
    assert_eq!(roles(&msgs), ["user", "assistant", "tool"]);
    let run2 = d.send(&sid, json!({"prompt": "a.txt"})).await;
    let evs2 = d.events(&sid, None).await.until_complete(&run2).await;
    assert_eq!(finish_of(&evs2), "stop");
    let this_run: Vec<Ev> = evs2.into_iter().filter(|e| e.run() == run2).collect();
    assert_eq!(text_of(&this_run), "Thanks, using a.txt.");
}

fn spawn_bg(id: &str, label: &str) -> Value {
    call(
        id,
        "spawn",
        json!({"task": format!("job {label}"), "label": label, "background": true}),
    )
}

/// The text of a `userMessage` event that drained background results, if it is one.
fn drained_text(ev: &Ev) -> Option<String> {
    if ev.event != "userMessage" {
        return None;
    }
    let t = ev.data["message"]["blocks"][0]["text"].as_str()?;
    t.starts_with("[Background agent \"").then(|| t.to_string())
}

/// Reads events until `n` permission requests were seen; returns their ids and every event read.
async fn until_requests(sse: &mut common::Sse, n: usize, seen: &mut Vec<Ev>) -> Vec<String> {
    let mut ids = Vec::new();
    while ids.len() < n {
        let ev = sse.next().await.expect("stream ended");
        if ev.event == "permissionRequest" {
            ids.push(ev.data["requestId"].as_str().unwrap().to_string());
        }
        seen.push(ev);
    }
    ids
}

/// Reads events until the next drain `userMessage`; returns its text.
async fn until_drain(sse: &mut common::Sse, seen: &mut Vec<Ev>) -> String {
    loop {
        let ev = sse.next().await.expect("stream ended");
        let t = drained_text(&ev);
        seen.push(ev);
        if let Some(t) = t {
            return t;
        }
    }
}

/// A sub-agent script for `n` gated sub-agents: each first asks to run a shell command (a
/// permission request the test answers, one at a time), then answers "sub done". The first `n`
/// requests are the sub-agents' first calls because the test waits for all `n` permission
/// requests before it answers any.
fn gated_sub_agents(mock: &MockServer, name: &str, n: usize) {
    let mut responses: Vec<Value> = (0..n)
        .map(
            |i| json!({"toolCalls": [call(&format!("g{i}"), "shell", json!({"command": "true"}))]}),
        )
        .collect();
    responses.push(json!({"text": "sub done"}));
    script(mock, name, Value::Array(responses));
}

#[tokio::test]
async fn background_drains_stop_after_three_in_a_row_without_spending_iterations() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();
    gated_sub_agents(&mock, "sub-gated", 4);
    // The parent spawns four background agents, then answers plainly forever.
    script(
        &mock,
        "parent-drain",
        json!([
            {"toolCalls": [spawn_bg("b1", "a1"), spawn_bg("b2", "a2"), spawn_bg("b3", "a3"), spawn_bg("b4", "a4")]},
            {"text": "Still waiting."}
        ]),
    );
    let (sid, run1) = d
        .create(session(
            "drain",
            "mock:script=parent-drain",
            &dir,
            // Two iterations: the spawn call and the first plain answer use them up; drains are free.
            json!({"engineConfig": {"subAgentModel": "mock:script=sub-gated", "maxIterations": 2}}),
        ))
        .await;
    let mut sse = d.events(&sid, None).await;
    let mut seen = Vec::new();
    let rids = until_requests(&mut sse, 4, &mut seen).await;
    // One result becomes ready per drain: the next sub-agent is let go only after the drain.
    let mut drains = Vec::new();
    for rid in &rids[..3] {
        allow(&d, &sid, rid).await;
        drains.push(until_drain(&mut sse, &mut seen).await);
    }
    seen.extend(sse.until_complete(&run1).await);
    // After three drains in a row the fourth plain answer ends the run, although the fourth
    // sub-agent is still going (it waits for its permission).
    assert_eq!(finish_of(&seen), "stop", "{:?}", types(&seen));
    let this_run: Vec<&Ev> = seen.iter().filter(|e| e.run() == run1).collect();
    let drained: Vec<String> = this_run.iter().filter_map(|e| drained_text(e)).collect();
    assert_eq!(drained, drains);
    assert_eq!(drained.len(), 3);
    for t in &drained {
        assert_eq!(t.matches("[Background agent \"").count(), 1, "{t}");
        assert!(t.contains(") stop]\nsub done"), "{t}");
    }
    // Each drain named a different agent.
    let labels: std::collections::BTreeSet<&str> = drained
        .iter()
        .map(|t| t.split('"').nth(1).unwrap())
        .collect();
    assert_eq!(labels.len(), 3);
    // The fourth sub-agent was stopped with the run: its request was withdrawn.
    let resolved: Vec<&&Ev> = this_run
        .iter()
        .filter(|e| e.event == "permissionResolved" && e.data["requestId"] == rids[3].as_str())
        .collect();
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0].data["decision"], "deny");

    let msgs = stored(&d, &sid).await;
    assert_eq!(
        roles(&msgs),
        [
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
            "assistant"
        ]
    );
    // Five model calls with maxIterations 2: the three drained calls spent no iteration, but
    // every call is counted in the stats.
    assert_eq!(bodies_for(&mock, "mock:script=parent-drain").len(), 5);
    assert_eq!(of(&seen, "result")[0].data["stats"]["iterations"], 5);
    // The last call saw all three drained results.
    let last = bodies_for(&mock, "mock:script=parent-drain").pop().unwrap();
    assert_eq!(
        last.to_string().matches("[Background agent \\\"").count(),
        3
    );
}

#[tokio::test]
async fn a_real_tool_call_resets_the_drain_counter() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();
    gated_sub_agents(&mock, "sub-reset", 3);
    script(
        &mock,
        "parent-reset",
        json!([
            {"toolCalls": [spawn_bg("b1", "a1"), spawn_bg("b2", "a2"), spawn_bg("b3", "a3")]},
            {"text": "First wait."},
            {"toolCalls": [call("l1", "list_dir", json!({}))]},
            {"text": "Second wait."},
            {"text": "Giving up."}
        ]),
    );
    // One drain in a row at most: without the reset, "Second wait." would end the run.
    let (sid, run1) = d
        .create(session(
            "reset",
            "mock:script=parent-reset",
            &dir,
            json!({"engineConfig": {"subAgentModel": "mock:script=sub-reset",
                                    "maxBackgroundDrainRounds": 1}}),
        ))
        .await;
    let mut sse = d.events(&sid, None).await;
    let mut seen = Vec::new();
    let rids = until_requests(&mut sse, 3, &mut seen).await;
    allow(&d, &sid, &rids[0]).await;
    until_drain(&mut sse, &mut seen).await;
    allow(&d, &sid, &rids[1]).await;
    until_drain(&mut sse, &mut seen).await;
    seen.extend(sse.until_complete(&run1).await);
    assert_eq!(finish_of(&seen), "stop", "{:?}", types(&seen));
    let msgs = stored(&d, &sid).await;
    assert_eq!(
        roles(&msgs),
        [
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
            "assistant"
        ]
    );
    assert_eq!(msgs[3]["blocks"][0]["text"], "First wait.");
    assert!(
        msgs[4]["blocks"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("[Background agent")
    );
    assert_eq!(msgs[5]["blocks"][0]["name"], "list_dir");
    assert_eq!(msgs[7]["blocks"][0]["text"], "Second wait.");
    assert!(
        msgs[8]["blocks"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("[Background agent")
    );
    // The limit still holds after the reset: the third agent is still going, but one drain in a
    // row was all that was allowed.
    assert_eq!(msgs[9]["blocks"][0]["text"], "Giving up.");
    assert_eq!(bodies_for(&mock, "mock:script=parent-reset").len(), 5);
}

/// Checks the messages of an OpenAI request: the first non-system message is a user message,
/// every assistant tool call is answered by the tool messages right after it, and every tool
/// message answers a call of the assistant message before it.
fn assert_valid_openai(all: &[Value]) {
    let m: Vec<&Value> = all.iter().filter(|x| x["role"] != "system").collect();
    assert_eq!(m[0]["role"], "user", "{all:?}");
    let mut i = 0;
    while i < m.len() {
        let x = m[i];
        assert_ne!(x["role"], "tool", "message {i} answers no call: {all:?}");
        i += 1;
        if let Some(calls) = x["tool_calls"].as_array() {
            let mut want: std::collections::BTreeSet<&str> =
                calls.iter().map(|c| c["id"].as_str().unwrap()).collect();
            while i < m.len() && m[i]["role"] == "tool" {
                let id = m[i]["tool_call_id"].as_str().unwrap();
                assert!(
                    want.remove(id),
                    "result {id} answers no pending call: {all:?}"
                );
                i += 1;
            }
            assert!(want.is_empty(), "calls without a result {want:?}: {all:?}");
        }
    }
    assert_eq!(m.last().unwrap()["role"], "user");
}

fn anthropic_blocks(x: &Value) -> Vec<Value> {
    match &x["content"] {
        Value::String(s) => vec![json!({"type": "text", "text": s})],
        Value::Array(a) => a.clone(),
        other => panic!("bad content {other}"),
    }
}

/// Checks the messages of an Anthropic request: it starts with a user message, every assistant
/// tool_use is answered by a tool_result in the user message right after it, and every
/// tool_result answers a tool_use of the assistant message right before it.
fn assert_valid_anthropic(m: &[Value]) {
    assert_eq!(m[0]["role"], "user", "{m:?}");
    let mut pending: std::collections::BTreeSet<String> = Default::default();
    for x in m {
        let blocks = anthropic_blocks(x);
        let ids = |kind: &str, key: &str| -> std::collections::BTreeSet<String> {
            blocks
                .iter()
                .filter(|b| b["type"] == kind)
                .map(|b| b[key].as_str().unwrap().to_string())
                .collect()
        };
        if x["role"] == "user" {
            assert_eq!(ids("tool_result", "tool_use_id"), pending, "{m:?}");
            // Results come first in their message.
            let first_other = blocks.iter().position(|b| b["type"] != "tool_result");
            let last_result = blocks.iter().rposition(|b| b["type"] == "tool_result");
            if let (Some(o), Some(r)) = (first_other, last_result) {
                assert!(r < o, "{m:?}");
            }
            pending.clear();
        } else {
            assert_eq!(x["role"], "assistant");
            assert!(
                pending.is_empty(),
                "calls without a result {pending:?}: {m:?}"
            );
            pending = ids("tool_use", "id");
        }
    }
    assert!(pending.is_empty(), "{m:?}");
    assert_eq!(m.last().unwrap()["role"], "user");
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
    let run2 = d
        .send(&sid, json!({"prompt": "again", "parentId": answer}))
        .await;
    let evs2 = d.events(&sid, None).await.until_complete(&run2).await;
    assert_eq!(finish_of(&evs2), "stop");
    let body = bodies_for(&mock, model).pop().unwrap();
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
        let run = d
            .send(
                &sid,
                json!({"prompt": format!("limit {limit}"), "parentId": answer,
                       "engineConfig": {"maxHistory": limit}}),
            )
            .await;
        let evs = d.events(&sid, None).await.until_complete(&run).await;
        assert_eq!(finish_of(&evs), "stop");
        let body = bodies_for(&mock, model).pop().unwrap();
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
    let run = d
        .send(
            &sid,
            json!({"prompt": "limit 4 anthropic", "parentId": answer,
                   "providerId": "mock-anthropic", "engineConfig": {"maxHistory": 4}}),
        )
        .await;
    let evs = d.events(&sid, None).await.until_complete(&run).await;
    assert_eq!(finish_of(&evs), "stop");
    let body = bodies_for(&mock, model).pop().unwrap();
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

#[tokio::test]
async fn post_tool_use_hooks_fire_after_execution_without_holding_up_the_run() {
    let mock = MockServer::start().await.unwrap();
    let marks = tempfile::tempdir().unwrap();
    // The hook waits (bounded) for a gate the test opens only after the run completed, then
    // records its input. Its deny answer must be ignored.
    let extra = format!(
        r#"
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
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: extra,
            ..Opts::default()
        },
    );
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

/// A dangling tool call on resume, in one provider format: (1) a daemon killed while a tool runs,
/// restarted, resumed; (2) after the restart, a resume that branches from an assistant message
/// whose tool_use has no result in the branch.
async fn dangling_on(mock: &MockServer, provider: &str) {
    let d = Daemon::start(mock, Opts::default());
    let dir = project();
    let valid = |m: &[Value]| {
        if provider == "mock" {
            assert_valid_openai(m)
        } else {
            assert_valid_anthropic(m)
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
    let pid = wait_for_file(&dir.join("crash.pid"), 1).await;
    let data = d.dir.clone();
    let mut d = d;
    d.kill();
    // The tool's process group outlives a SIGKILLed daemon; end it here.
    std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", pid.trim())])
        .status()
        .unwrap();
    let d = Daemon::start_in(data, mock, Opts::default());

    let run2 = d.send(&crash_sid, json!({"prompt": "go on"})).await;
    let evs = d.events(&crash_sid, None).await.until_complete(&run2).await;
    assert_eq!(finish_of(&evs), "stop");
    let body = bodies_for(mock, &crash_model).pop().unwrap();
    valid(body["messages"].as_array().unwrap());

    let msgs = stored(&d, &done_sid).await;
    assert_eq!(msgs[1]["blocks"][1]["type"], "tool_use");
    let parent = msgs[1]["id"].as_str().unwrap();
    let run3 = d
        .send(
            &done_sid,
            json!({"prompt": "from the call", "parentId": parent}),
        )
        .await;
    let evs = d.events(&done_sid, None).await.until_complete(&run3).await;
    assert_eq!(finish_of(&evs), "stop");
    let body = bodies_for(mock, &done_model).pop().unwrap();
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
    let run2 = d.send(&sid, json!({"prompt": "more"})).await;
    let evs = d.events(&sid, None).await.until_complete(&run2).await;
    assert_eq!(finish_of(&evs), "stop");
    let body = bodies_for(&mock, "mock:script=sig").pop().unwrap();
    let m = body["messages"].as_array().unwrap();
    assert_valid_anthropic(m);
    let r: Vec<&str> = m.iter().map(|x| x["role"].as_str().unwrap()).collect();
    assert_eq!(r, ["user", "assistant", "user", "assistant", "user"]);
    assert_eq!(anthropic_blocks(&m[1])[0], first);
    assert_eq!(anthropic_blocks(&m[3])[0], second);
}

#[tokio::test]
async fn native_search_calls_are_skipped_before_hooks_and_permissions() {
    let mock = MockServer::start().await.unwrap();
    let extra = r#"
[[engines.tinyelf.hooks]]
event = "PreToolUse"
command = '''cat > /dev/null; echo '{"decision":"deny","reason":"hook says no"}' '''
"#;
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: extra.into(),
            ..Opts::default()
        },
    );
    let dir = project();
    script(
        &mock,
        "search",
        json!([{"toolCalls": [
            call("n1", "web_search", json!({"query": "rust"})),
            call("n2", "google_search", json!({"q": "rust"})),
            call("n3", "read_file", json!({"path": "a.txt"})),
            call("n4", "some_search", json!({}))
        ]}, {"text": "ok"}]),
    );
    let (_, _, evs) = run(&d, session("s", "mock:script=search", &dir, json!({}))).await;
    assert_eq!(finish_of(&evs), "stop");
    let e = ends_by_id(&evs);
    for id in ["n1", "n2"] {
        assert_eq!(e[id].0, "success", "{e:?}");
        assert!(
            e[id]
                .1
                .contains("run by the model provider itself; nothing was executed locally"),
            "{}",
            e[id].1
        );
    }
    // A local tool meets the hook; an unknown name is an error, not a skip.
    assert_eq!(e["n3"].0, "denied");
    assert!(e["n3"].1.contains("hook says no"));
    assert_eq!(e["n4"].0, "error");
    assert!(e["n4"].1.contains("unknown tool"));
    assert!(of(&evs, "permissionRequest").is_empty());
}
