//! The compaction ladder: a conversation that outgrows the model's configured budget still runs.
//! The requests the mock receives fit the budget (the mock itself refuses a longer one with the
//! provider's real error), tool_use/tool_result pairs are never split, the summary call is made
//! only when stubbing old tool outputs is not enough, each step is announced, and the stored
//! history stays complete. Plus the overflow recovery when the provider still says "too long".

use crate::common;
use crate::scripted;

use common::{Daemon, types};
use elfgate_mockllm::{MockServer, Outcome};
use scripted::{
    call, daemon_with, finish_of, of, processing_notes, project, run, script, session, stored,
};
use serde_json::{Value, json};
use std::path::Path;

/// Words of a text, the mock's token unit.
fn words(v: &Value) -> u64 {
    match v {
        Value::String(s) => s.split_whitespace().count() as u64,
        Value::Array(a) => a.iter().map(words).sum(),
        Value::Object(m) => ["text", "content"]
            .iter()
            .filter_map(|k| m.get(*k))
            .map(words)
            .sum(),
        _ => 0,
    }
}

/// The prompt tokens the mock counts for an OpenAI request.
fn prompt_words(body: &Value) -> u64 {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| words(&m["content"]))
        .sum()
}

/// A file of `n` words.
fn big_file(dir: &Path, name: &str, n: usize) {
    let text: Vec<&str> = ["alpha", "beta", "gamma", "delta"]
        .iter()
        .cycle()
        .take(n)
        .copied()
        .collect();
    std::fs::write(dir.join(name), text.join(" ")).unwrap();
}

/// The main (not summary) requests the mock received for `model`.
fn main_requests(mock: &MockServer, model: &str) -> Vec<(Value, Outcome)> {
    mock.requests()
        .into_iter()
        .filter(|r| r.model == model)
        .filter(|r| {
            !r.body["messages"][0]["content"]
                .as_str()
                .unwrap_or("")
                .starts_with("You summarize")
        })
        .map(|r| (r.body, r.outcome))
        .collect()
}

/// Every tool result of an OpenAI request answers a call of the assistant message just before
/// its run of tool messages, and every call has its result.
fn assert_pairs_whole(body: &Value) {
    let msgs = body["messages"].as_array().unwrap();
    for (i, m) in msgs.iter().enumerate() {
        if m["role"] == "assistant"
            && let Some(calls) = m["tool_calls"].as_array()
        {
            for c in calls {
                let id = &c["id"];
                let answered = msgs[i + 1..]
                    .iter()
                    .take_while(|x| x["role"] == "tool")
                    .any(|x| &x["tool_call_id"] == id);
                assert!(answered, "call {id} without its result in {body}");
            }
        }
        if m["role"] == "tool" {
            let owner = msgs[..i]
                .iter()
                .rev()
                .find(|x| x["role"] != "tool")
                .unwrap();
            let ids: Vec<&Value> = owner["tool_calls"]
                .as_array()
                .map(|a| a.iter().map(|c| &c["id"]).collect())
                .unwrap_or_default();
            assert!(
                ids.contains(&&m["tool_call_id"]),
                "result {} without its call in {body}",
                m["tool_call_id"]
            );
        }
    }
}

fn budget(model: &str, window: u64) -> String {
    format!(
        "[providers.mock.models.\"{model}\"]\ncontext_window_tokens = {window}\nreserve_output_tokens = 100\n"
    )
}

#[tokio::test]
async fn stubbing_old_tool_outputs_is_enough_without_a_summary_call() {
    let mock = MockServer::start().await.unwrap();
    // The budget is 2500 tokens; the mock refuses anything longer.
    let model = "mock:script=slice,context_limit=2500";
    let d = daemon_with(&mock, &budget(model, 2600));
    let dir = project();
    big_file(&dir, "big1.txt", 1500);
    big_file(&dir, "big2.txt", 1500);
    script(
        &mock,
        "slice",
        json!([
            {"toolCalls": [call("c1", "read_file", json!({"path": "big1.txt"}))]},
            {"toolCalls": [call("c2", "read_file", json!({"path": "big2.txt"}))]},
            {"text": "Both read."}
        ]),
    );
    let (sid, _, evs) = run(
        &d,
        session(
            "read both files",
            model,
            &dir,
            json!({"engineConfig": {"enabledTools": ["read_file"]}}),
        ),
    )
    .await;
    assert_eq!(
        finish_of(&evs),
        "stop",
        "{:?} {:?}",
        types(&evs),
        processing_notes(&evs)
    );
    let notes = processing_notes(&evs);
    assert!(
        notes
            .iter()
            .any(|m| m.contains("1) boundary slice: replaced 1 old tool outputs")),
        "{notes:?}"
    );
    assert!(
        !notes.iter().any(|m| m.contains("2) collapse")),
        "{notes:?}"
    );
    // No summary call: three requests, all answered, all within the budget.
    let reqs = main_requests(&mock, model);
    assert_eq!(mock.requests().len(), 3);
    for (body, outcome) in &reqs {
        assert_eq!(*outcome, Outcome::Completed);
        assert!(prompt_words(body) <= 2500, "{}", prompt_words(body));
        assert_pairs_whole(body);
    }
    // The third request: big1's output is a stub, big2's is whole.
    let third = &reqs[2].0["messages"];
    let result = |id: &str| {
        third
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["tool_call_id"] == id)
            .unwrap()["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(result("c1").starts_with("[output of "), "{}", result("c1"));
    assert_eq!(words(&json!(result("c2"))), 1500);
    // The stored history is untouched.
    let msgs = stored(&d, &sid).await;
    let c1 = msgs
        .iter()
        .flat_map(|m| m["blocks"].as_array().unwrap())
        .find(|b| b["tool_use_id"] == "c1")
        .unwrap();
    assert_eq!(words(&c1["content"]), 1500);
}

/// Runs a session of eight iterations on `model` (whose script is `script_name`) that outgrow
/// its window: every answer says a lot and reads a small file; the summary call gets the same
/// answer, whose text becomes the summary. Returns the session id and the run's events.
pub(crate) async fn run_long(
    d: &Daemon,
    mock: &MockServer,
    script_name: &str,
    model: &str,
) -> (String, Vec<common::Ev>) {
    let long = ["alpha", "beta", "gamma", "delta"].repeat(40).join(" ");
    script(
        mock,
        script_name,
        json!([{"text": long, "toolCalls": [call("", "read_file", json!({"path": "a.txt"}))]}]),
    );
    let (sid, _, evs) = run(
        d,
        session(
            "keep reading",
            model,
            &project(),
            json!({"engineConfig": {"enabledTools": ["read_file"], "maxIterations": 8}}),
        ),
    )
    .await;
    (sid, evs)
}

#[tokio::test]
async fn a_long_history_is_collapsed_summarized_and_still_fits() {
    let mock = MockServer::start().await.unwrap();
    let model = "mock:script=long,context_limit=700";
    let d = daemon_with(&mock, &budget(model, 800));
    let (sid, evs) = run_long(&d, &mock, "long", model).await;
    assert_eq!(
        finish_of(&evs),
        "max_iterations",
        "{:?}",
        processing_notes(&evs)
    );
    let notes = processing_notes(&evs);
    for step in [
        "1) boundary slice",
        "2) collapse: left out",
        "3) auto-compact: summarized",
        "4) re-injected 1 recently used file paths",
    ] {
        assert!(notes.iter().any(|m| m.contains(step)), "{step}: {notes:?}");
    }
    // Every request was answered (none over the mock's limit) and fits the budget.
    let all = mock.requests();
    assert!(all.iter().all(|r| r.outcome == Outcome::Completed));
    let reqs = main_requests(&mock, model);
    assert_eq!(reqs.len(), 8);
    let summaries = all.len() - reqs.len();
    assert!(summaries >= 1, "no summary call");
    for (body, _) in &reqs {
        assert!(prompt_words(body) <= 700, "{}", prompt_words(body));
        assert_pairs_whole(body);
        // The first user message is always kept.
        assert_eq!(body["messages"][1]["content"], "keep reading");
    }
    // The summary call came only once the slice was not enough: before it, no request was
    // compacted; after it, the requests carry the note with the summary and the file path.
    let last = &reqs[7].0["messages"][2]["content"];
    let note = last.as_str().unwrap();
    assert!(note.starts_with("[Context compaction: "), "{note}");
    assert!(note.contains("Summary of them:\nalpha beta"), "{note}");
    assert!(note.contains("Files used recently: a.txt"), "{note}");
    // The stored history is complete: the prompt and eight assistant/tool pairs.
    let msgs = stored(&d, &sid).await;
    assert_eq!(msgs.len(), 17);
    assert!(
        !msgs
            .iter()
            .any(|m| m.to_string().contains("Context compaction"))
    );
}

#[tokio::test]
async fn overflow_is_recovered_once_then_fails_clearly() {
    let mock = MockServer::start().await.unwrap();
    let d = daemon_with(&mock, "");
    let dir = project();
    big_file(&dir, "big1.txt", 1000);
    big_file(&dir, "big2.txt", 1000);
    // No budget is configured: the provider's refusal is what starts the ladder.
    let model = "mock:script=over,context_limit=1500";
    script(
        &mock,
        "over",
        json!([
            {"toolCalls": [call("c1", "read_file", json!({"path": "big1.txt"}))]},
            {"toolCalls": [call("c2", "read_file", json!({"path": "big2.txt"}))]},
            {"text": "Done."}
        ]),
    );
    let tools = json!({"engineConfig": {"enabledTools": ["read_file"]}});
    let (_, _, evs) = run(&d, session("read", model, &dir, tools.clone())).await;
    assert_eq!(finish_of(&evs), "stop", "{:?}", processing_notes(&evs));
    let n = processing_notes(&evs);
    assert!(n.iter().any(|m| m.contains("the provider says")), "{n:?}");
    assert!(n.iter().any(|m| m.contains("1) boundary slice")), "{n:?}");
    assert!(of(&evs, "error").is_empty());
    let outcomes: Vec<Outcome> = mock.requests().iter().map(|r| r.outcome).collect();
    assert_eq!(
        outcomes,
        [
            Outcome::Completed,
            Outcome::Completed,
            Outcome::Failed,
            Outcome::Completed
        ]
    );
    // The retried request carries big1's output as a stub.
    let retried = &mock.requests()[3].body;
    assert!(retried.to_string().contains("[output of "), "{retried}");

    // A prompt that cannot fit at all: one retry, then a clear error.
    mock.clear_requests();
    let model = "mock:tokens=2,context_limit=10";
    let (_, _, evs) = run(&d, session("hi", model, &dir, tools)).await;
    assert_eq!(finish_of(&evs), "error");
    let errors = of(&evs, "error");
    assert_eq!(errors.len(), 1, "{:?}", types(&evs));
    assert_eq!(errors[0].data["error"]["code"], "context_overflow");
    let msg = errors[0].data["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("does not fit the model's context window")
            && msg.contains("maximum context length"),
        "{msg}"
    );
    assert_eq!(mock.requests().len(), 2);
    assert!(of(&evs, "retry").is_empty());
}

/// engineConfig useExtendedContext: on an Anthropic-kind provider the request carries the
/// context-1m beta header (and only then); for compaction the model's
/// extended_context_window_tokens is the window, so a conversation that the normal window would
/// have compacted goes whole.
#[tokio::test]
async fn extended_context_asks_anthropic_for_it_and_widens_the_compaction_window() {
    let mock = MockServer::start().await.unwrap();
    let (on, off) = ("mock:script=wide-on", "mock:script=wide-off");
    // The test daemon's mock-anthropic provider speaks the Anthropic format to the mock.
    let d = daemon_with(
        &mock,
        &format!(
            "{}extended_context_window_tokens = 100000\n{}extended_context_window_tokens = 100000\n",
            budget(on, 2600),
            budget(off, 2600)
        ),
    );
    let dir = project();
    big_file(&dir, "big1.txt", 1500);
    big_file(&dir, "big2.txt", 1500);
    let mut notes = Vec::new();
    for (model, extended) in [(on, true), (off, false)] {
        script(
            &mock,
            model.trim_start_matches("mock:script="),
            json!([
                {"toolCalls": [call("c1", "read_file", json!({"path": "big1.txt"}))]},
                {"toolCalls": [call("c2", "read_file", json!({"path": "big2.txt"}))]},
                {"text": "Both read."}
            ]),
        );
        let (_, _, evs) = run(
            &d,
            session(
                "read both files",
                model,
                &dir,
                json!({"engineConfig": {"enabledTools": ["read_file"],
                                        "useExtendedContext": extended}}),
            ),
        )
        .await;
        assert_eq!(finish_of(&evs), "stop", "{:?}", processing_notes(&evs));
        notes.push(processing_notes(&evs));
    }
    let sliced = |n: &Vec<String>| n.iter().any(|m| m.contains("boundary slice"));
    assert!(
        !sliced(&notes[0]),
        "compacted with the extended window: {:?}",
        notes[0]
    );
    assert!(
        sliced(&notes[1]),
        "not compacted with the normal window: {:?}",
        notes[1]
    );
    let wide = main_requests(&mock, on);
    assert!(
        prompt_words(&wide[2].0) > 2600,
        "{}",
        prompt_words(&wide[2].0)
    );

    // The header, on an Anthropic-kind provider, when asked for and only then.
    for extended in [true, false] {
        let before = mock.requests().len();
        let (sid, run_id) = d
            .create(
                json!({"engine": "chat", "providerId": "mock-anthropic", "model": "mock",
                           "prompt": "hi", "engineConfig": {"useExtendedContext": extended}}),
            )
            .await;
        d.all_events_until_complete_of(&sid, &run_id).await;
        let sent = &mock.requests()[before];
        assert_eq!(sent.format, elfgate_mockllm::Format::Anthropic);
        assert_eq!(
            sent.anthropic_beta.as_deref(),
            extended.then_some("context-1m-2025-08-07"),
        );
    }
}
