//! What tinyelf sends besides the conversation: the system prompt's blocks in their fixed order,
//! a stable prefix that is byte-identical from call to call and run to run (marked for the
//! provider's cache with Anthropic), the project's AGENTS.md read through the firewall and capped,
//! and the provider's cache counters in `result.stats` and on the stored run.

use crate::common;
use crate::scripted;

use common::types;
use elfgate_mockllm::MockServer;
use scripted::{
    bodies_for, call, daemon_with, finish_of, processing_notes, project, resume, run, script,
    session,
};
use serde_json::{Value, json};

/// The `stats` of the `result` event of `run`.
fn stats_of(evs: &[common::Ev], run: &str) -> Value {
    let r = evs
        .iter()
        .find(|e| e.event == "result" && e.run() == run)
        .unwrap();
    r.data["stats"].clone()
}

#[tokio::test]
async fn anthropic_stable_prefix_is_cached_across_turns_and_runs() {
    let mock = MockServer::start().await.unwrap();
    let d = daemon_with(&mock, "");
    let dir = project();
    std::fs::write(dir.join("AGENTS.md"), "Always run the tests.\n").unwrap();
    let model = "mock:script=prefix";
    script(
        &mock,
        "prefix",
        json!([
            {"toolCalls": [call("c1", "read_file", json!({"path": "a.txt"}))]},
            {"text": "It says hello."},
            {"text": "Again."}
        ]),
    );
    let (sid, run1, evs) = run(
        &d,
        session(
            "what is in a.txt?",
            model,
            &dir,
            json!({"providerId": "mock-anthropic"}),
        ),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop", "{:?}", types(&evs));
    let (run2, evs) = resume(&d, &sid, json!({"prompt": "and now?"})).await;
    assert_eq!(finish_of(&evs), "stop");

    let bodies = bodies_for(&mock, model);
    assert_eq!(bodies.len(), 3);
    let prefix = &bodies[0]["system"][0];
    assert_eq!(prefix["cache_control"], json!({"type": "ephemeral"}));
    let prefix_text = prefix["text"].as_str().unwrap();
    assert!(prefix_text.starts_with("You are TinyElf"), "{prefix_text}");
    // Two calls of one run and the call of the next run: the same bytes.
    for b in &bodies[1..] {
        assert_eq!(&b["system"][0], prefix);
    }
    // After the prefix: the project's AGENTS.md, then the dynamic tail.
    let rest = bodies[0]["system"][1]["text"].as_str().unwrap();
    assert!(rest.get(..2) == Some("\n\n"), "{rest:?}");
    let agents = rest.find("Always run the tests.").unwrap();
    let date = rest.find("Date: ").unwrap();
    assert!(agents < date, "{rest}");
    assert!(rest.contains(&format!(
        "Project directory: {}",
        dir.canonicalize().unwrap().display()
    )));
    assert!(bodies[0]["system"][1].get("cache_control").is_none());

    // The mock caches the marked prefix: the first call writes it, later ones read it.
    let s1 = stats_of(&evs, &run1);
    let n = s1["cacheWriteTokens"].as_u64().unwrap();
    assert!(n > 0, "{s1}");
    assert_eq!(s1["cacheReadTokens"], json!(n), "{s1}");
    let s2 = stats_of(&evs, &run2);
    assert_eq!(s2["cacheReadTokens"], json!(n), "{s2}");
    assert_eq!(s2["cacheWriteTokens"], json!(0), "{s2}");
    // Stored on the run.
    let (st, r) = d.get(&format!("/v1/sessions/{sid}/runs/{run1}")).await;
    assert_eq!(st, 200);
    assert_eq!(r["cacheWriteTokens"], json!(n), "{r}");
    assert_eq!(r["cacheReadTokens"], json!(n), "{r}");
    let (_, r) = d.get(&format!("/v1/sessions/{sid}/runs/{run2}")).await;
    assert_eq!(r["cacheReadTokens"], json!(n), "{r}");
}

#[tokio::test]
async fn openai_cache_counters_and_capped_project_context() {
    let mock = MockServer::start().await.unwrap();
    let d = daemon_with(&mock, "[engines.tinyelf]\nproject_context_max_bytes = 40\n");
    let dir = project();
    std::fs::write(dir.join("AGENTS.md"), "0123456789".repeat(3)).unwrap();
    std::fs::write(dir.join("ELFGATE.md"), "abcdefghij".repeat(3)).unwrap();
    let model = "mock:tokens=2,cache_read=7";
    let (sid, run1, evs) = run(
        &d,
        session("hi", model, &dir, json!({"systemPrompt": "You are Bob."})),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop");
    let s = stats_of(&evs, &run1);
    assert_eq!(s["cacheReadTokens"], json!(7), "{s}");
    assert_eq!(s["cacheWriteTokens"], json!(0), "{s}");
    let (_, r) = d.get(&format!("/v1/sessions/{sid}/runs/{run1}")).await;
    assert_eq!(r["cacheReadTokens"], json!(7));

    let bodies = bodies_for(&mock, model);
    let system = bodies[0]["messages"][0]["content"].as_str().unwrap();
    assert!(system.starts_with("You are Bob.\n\nTools:"), "{system}");
    // 40 bytes for both files: all of AGENTS.md, the first 10 of ELFGATE.md, with a marker.
    assert!(system.contains(&"0123456789".repeat(3)), "{system}");
    assert!(system.contains("abcdefghij\n[... ELFGATE.md cut at 10 of 30 bytes"));
    assert!(!system.contains("abcdefghijabcdefghij"));
    let notes = processing_notes(&evs);
    assert!(
        notes
            .iter()
            .any(|m| m.contains("ELFGATE.md cut at 10 of 30 bytes")),
        "{notes:?}"
    );
}

#[tokio::test]
async fn project_context_goes_through_the_firewall() {
    let mock = MockServer::start().await.unwrap();
    let d = daemon_with(&mock, "");
    let dir = project();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.md"), "TOP SECRET").unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.md"), dir.join("AGENTS.md")).unwrap();
    let model = "mock:tokens=2,id=fw";
    let (_, _, evs) = run(&d, session("hi", model, &dir, json!({}))).await;
    assert_eq!(finish_of(&evs), "stop");
    let bodies = bodies_for(&mock, model);
    let system = bodies[0]["messages"][0]["content"].as_str().unwrap();
    assert!(!system.contains("TOP SECRET"), "{system}");
    let notes = processing_notes(&evs);
    assert!(
        notes
            .iter()
            .any(|m| m.contains("AGENTS.md not read") && m.contains("outside the project")),
        "{notes:?}"
    );
}
