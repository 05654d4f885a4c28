//! The tool gate's guardian and an ACP agent's terminals: the guardian
//! (`[engines.tinyelf.guardian]`) reviews the calls tinyelf's own model makes, not the commands
//! an ACP agent runs through the client's terminals, which pass the hooks, the firewall and the
//! permission step (docs/security.md, "The tool gate").

use crate::scripted;
use crate::suite::acp_agent::{bash, start_claude_with};
use crate::suite::cli_real::{complete, errors};

use serde_json::json;

/// A guardian that judges every call unsafe.
const GUARDIAN: &str = r#"
[engines.tinyelf.guardian]
enabled = true
provider = "mock"
model = "mock:script=acp-guard"
timeout_secs = 30
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guardian_reviews_tinyelf_calls_but_not_an_acp_agents_terminal() {
    let Some(r) = start_claude_with("acp-unguarded", GUARDIAN).await else {
        return;
    };
    scripted::script(
        &r.mock,
        "acp-guard",
        json!([{"text": "UNSAFE: no commands today"}, {"text": "UNSAFE: no commands today"}]),
    );
    let project = r.project.path().canonicalize().unwrap();

    // tinyelf's shell call is reviewed, and refused.
    scripted::script(
        &r.mock,
        "tiny-shell",
        json!([
            {"toolCalls": [scripted::call("s1", "shell", json!({"command": "echo tiny > tiny.txt"}))]},
            {"text": "done"}
        ]),
    );
    let (_, _, evs) = scripted::run(
        &r.d,
        scripted::session(
            "Run it.",
            "mock:script=tiny-shell",
            &project,
            json!({"permissionMode": "bypassPermissions"}),
        ),
    )
    .await;
    let ends = scripted::ends(&evs);
    assert_eq!(ends[0].0, "denied", "{ends:?}");
    assert!(ends[0].1.contains("no commands today"), "{ends:?}");
    assert!(!project.join("tiny.txt").exists());
    assert_eq!(
        scripted::bodies_for(&r.mock, "mock:script=acp-guard").len(),
        1,
        "the guardian reviewed tinyelf's call"
    );

    // The ACP agent's command runs in its terminal without a review.
    scripted::script(
        &r.mock,
        "acp-unguarded",
        json!([
            {"text": "Running it.", "toolCalls": [bash("t1", "echo made > made.txt")]},
            {"text": "Made it."}
        ]),
    );
    let body = r.claude_session(
        "Make the file.",
        json!({"permissionMode": "bypassPermissions"}),
    );
    let (sid, run) = r.d.create(body).await;
    let evs = r.d.events(&sid, None).await.until_complete(&run).await;
    assert_eq!(complete(&evs), ["stop"], "{:?}", errors(&evs));
    assert_eq!(
        std::fs::read_to_string(project.join("made.txt")).unwrap(),
        "made\n"
    );
    assert_eq!(
        scripted::bodies_for(&r.mock, "mock:script=acp-guard").len(),
        1,
        "the guardian was not asked about the terminal's command"
    );
    let (status, audit) = r.d.get(&format!("/v1/sessions/{sid}/audit")).await;
    assert_eq!(status, 200, "{audit}");
    assert_eq!(audit["audit"], json!([]), "{audit}");
}
