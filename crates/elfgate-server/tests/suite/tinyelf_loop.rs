//! The tinyelf agent loop end to end: iterations with concurrent tools, the iteration limit,
//! thinking, LLM retries, per-session engine config, and a tool that yields the turn to the user.

use crate::common;
use crate::scripted;

use common::{Daemon, Ev, Opts, text_of, types};
use elfgate_mockllm::MockServer;
use scripted::{
    bodies_for, call, daemon_with, ends_by_id, finish_of, of, offered_tools, project, resume,
    roles, run, script, session, stored,
};
use serde_json::{Value, json};
use std::path::Path;

/// A PreToolUse hook that makes read_file and grep wait for each other: each marks its start,
/// then waits (for at most 30 s, a safety net) until the other has started. Both are allowed only
/// if their pipelines overlapped; run one after the other, the first would be denied with "no
/// overlap".
fn barrier_hook(marks: &Path) -> String {
    format!(
        r#"
# Hooks are confined like commands: they write their marks here.
[sandbox]
hook_writable_paths = ["{marks}"]

[[engines.tinyelf.hooks]]
event = "PreToolUse"
matcher = "read_file|grep"
timeout_secs = 40
command = '''
in=$(cat)
t=$(printf %s "$in" | grep -o '"toolName":"[^"]*"' | cut -d'"' -f4)
s=$(printf %s "$in" | grep -o '"sessionId":"[^"]*"' | cut -d'"' -f4)
d="{marks}/$s"; mkdir -p "$d"; touch "$d/$t"
other=grep; [ "$t" = grep ] && other=read_file
for i in $(seq 1 1200); do
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
    let (run2, evs2) = resume(d, &sid, json!({"prompt": "and now?", "model": model})).await;
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
        let names = offered_tools(&bodies[0]);
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
    let d = daemon_with(&mock, &barrier_hook(marks.path()));
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

/// A refusal no retry can change (a bad key, an unknown model) fails at once: no `retry` event, one
/// `error` naming the status, one upstream request.
#[tokio::test]
async fn permanent_refusals_are_not_retried() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();
    let cfg = json!({"engineConfig": {"llmRetryDelayMs": 5}});
    for status in [401, 404] {
        mock.clear_requests();
        let model = format!("mock:fail={status}");
        let (_, _, evs) = run(&d, session("r", &model, &dir, cfg.clone())).await;
        assert_eq!(finish_of(&evs), "error", "status {status}");
        assert!(of(&evs, "retry").is_empty(), "status {status} was retried");
        let errors = of(&evs, "error");
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].data["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(&status.to_string())),
            "{:?}",
            errors[0].data
        );
        assert_eq!(mock.requests().len(), 1, "status {status}");
    }
}

/// The retry schedule is configurable: exponential doubles the delay where linear adds to it, and
/// Retry-After-free failures get exactly the schedule when jitter is off.
#[tokio::test]
async fn llm_retries_follow_an_exponential_schedule_when_configured() {
    let mock = MockServer::start().await.unwrap();
    let d = daemon_with(
        &mock,
        "[engines.tinyelf]\nllm_retry_backoff = \"exponential\"\nllm_retry_jitter = \"none\"\n",
    );
    let dir = project();
    script(&mock, "flaky3", json!([{"text": "done"}]));
    let cfg = json!({"engineConfig": {"llmRetryDelayMs": 5, "maxLlmRetries": 3}});
    let (_, _, evs) = run(&d, session("r", "mock:script=flaky3,fail=500x3", &dir, cfg)).await;
    assert_eq!(finish_of(&evs), "stop");
    let delays: Vec<&Value> = of(&evs, "retry")
        .iter()
        .map(|e| &e.data["retry"]["delayMs"])
        .collect();
    assert_eq!(delays, [&json!(5), &json!(10), &json!(20)]);
}

/// The loop's own retries (here of a non-retryable 400) and the provider client's (a 500) share one
/// budget and one count: the `retry` events number 1, 2 out of the same maximum, on one schedule.
#[tokio::test]
async fn loop_and_client_retries_count_as_one_sequence() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();
    script(
        &mock,
        "mixed",
        json!([{"status": 400}, {"status": 500}, {"text": "done"}]),
    );
    let cfg = json!({"engineConfig": {"llmRetryDelayMs": 5, "maxLlmRetries": 3}});
    let (_, _, evs) = run(&d, session("r", "mock:script=mixed", &dir, cfg)).await;
    assert_eq!(finish_of(&evs), "stop");
    let retries: Vec<(Value, Value, Value)> = of(&evs, "retry")
        .iter()
        .map(|e| {
            let r = &e.data["retry"];
            (
                r["attempt"].clone(),
                r["maxAttempts"].clone(),
                r["delayMs"].clone(),
            )
        })
        .collect();
    assert_eq!(
        retries,
        [
            (json!(1), json!(3), json!(5)),
            (json!(2), json!(3), json!(10)),
        ]
    );
    assert_eq!(text_of(&evs), "done");
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
    let names = offered_tools(b);
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
    let (run2, evs2) = resume(&d, &sid, json!({"prompt": "a.txt"})).await;
    assert_eq!(finish_of(&evs2), "stop");
    let this_run: Vec<Ev> = evs2.into_iter().filter(|e| e.run() == run2).collect();
    assert_eq!(text_of(&this_run), "Thanks, using a.txt.");
}

#[tokio::test]
async fn a_reply_ending_in_error_with_nothing_in_it_is_retried_with_the_defaults() {
    let mock = MockServer::start().await.unwrap();
    // The default retry delay (1 s) is the specification's: left as it is.
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();
    script(
        &mock,
        "empty-error",
        json!([
            {"finishReason": "error"},
            {"text": "recovered"}
        ]),
    );
    let (_, _, evs) = run(
        &d,
        session("hi", "mock:script=empty-error", &dir, json!({})),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop", "{:?}", types(&evs));
    assert_eq!(of(&evs, "retry").len(), 1, "{:?}", types(&evs));
    assert_eq!(text_of(&evs), "recovered");
    let bodies = bodies_for(&mock, "mock:script=empty-error");
    assert_eq!(bodies.len(), 2);
    // The request carried the specification's defaults: temperature 0.1, 8192 output tokens.
    assert_eq!(bodies[0]["temperature"], 0.1, "{}", bodies[0]);
    let limit = bodies[0]
        .get("max_completion_tokens")
        .or_else(|| bodies[0].get("max_tokens"))
        .cloned();
    assert_eq!(limit, Some(json!(8192)), "{}", bodies[0]);
}
