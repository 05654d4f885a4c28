//! An ACP agent's file writes follow the session's permission mode as tinyelf's write tools do,
//! also when the agent does not ask before it writes (gemini-cli 0.61.0 run with `--yolo`, its
//! own approvals off): refused in `plan` mode (the audit says so), a permission request of the
//! client's in `default` mode.

use crate::scripted;
use crate::suite::acp_agent::{start_with_args, tool_ends};
use crate::suite::cli_real::{complete, errors};

use serde_json::json;

/// The agent's own approvals off: it writes through the client without asking it.
const UNASKING: &str = r#"["--acp", "--yolo"]"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_agent_that_does_not_ask_cannot_write_in_plan_mode() {
    let Some(r) = start_with_args(UNASKING, "").await else {
        return;
    };
    let target = r.project.path().join("plan.txt");
    scripted::script(
        &r.mock,
        "acp-plan",
        json!([
            {"text": "Writing it.", "toolCalls": [scripted::call("c1", "write_file",
                json!({"file_path": target.display().to_string(), "content": "from plan mode"}))]},
            {"text": "Could not."}
        ]),
    );
    let mut body = r.session("Write plan.txt.", "mock:script=acp-plan");
    body["permissionMode"] = json!("plan");
    let (sid, run) = r.d.create(body).await;
    let evs = r.d.events(&sid, None).await.until_complete(&run).await;
    assert_eq!(complete(&evs), ["stop"], "{:?}", errors(&evs));
    assert!(!target.exists(), "a write in plan mode was served");
    let ends = tool_ends(&evs);
    assert_eq!(ends.len(), 1, "{evs:?}");
    assert_eq!(ends[0]["status"], "error", "{}", ends[0]);
    let calls = r.calls();
    assert_eq!(calls.len(), 2, "a call, then its result");
    let result = calls[1].body.to_string();
    assert!(
        result.contains("plan mode"),
        "the model is told why: {result}"
    );
    let (status, audit) = r.d.get(&format!("/v1/sessions/{sid}/audit")).await;
    assert_eq!(status, 200, "{audit}");
    let audit = audit["audit"].as_array().unwrap();
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0]["gate"], "policy", "{}", audit[0]);
    assert_eq!(audit[0]["toolName"], "write_file", "{}", audit[0]);
    assert!(
        audit[0]["input"]["path"]
            .as_str()
            .is_some_and(|p| p.ends_with("plan.txt")),
        "{}",
        audit[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_agent_that_does_not_ask_is_asked_for_in_default_mode() {
    let Some(r) = start_with_args(UNASKING, "").await else {
        return;
    };
    let allowed = r.project.path().join("allowed.txt");
    let denied = r.project.path().join("denied.txt");
    scripted::script(
        &r.mock,
        "acp-ask",
        json!([
            {"text": "Writing it.", "toolCalls": [scripted::call("c1", "write_file",
                json!({"file_path": allowed.display().to_string(), "content": "allowed"}))]},
            {"text": "Written."},
            {"text": "Writing the other.", "toolCalls": [scripted::call("c2", "write_file",
                json!({"file_path": denied.display().to_string(), "content": "denied"}))]},
            {"text": "Not written."}
        ]),
    );
    let (sid, run) =
        r.d.create(r.session("Write allowed.txt.", "mock:script=acp-ask"))
            .await;
    let mut sse = r.d.events(&sid, None).await;
    for (file, decision, content) in [
        (&allowed, "allow", Some("allowed")),
        (&denied, "deny", None),
    ] {
        let run = if decision == "allow" {
            run.clone()
        } else {
            r.d.send(&sid, json!({"prompt": "Write denied.txt."})).await
        };
        let mut evs = sse.until_n("permissionRequest", 1).await;
        let ask = evs.last().unwrap().data.clone();
        assert_eq!(ask["toolName"], "edit", "{ask}");
        assert!(
            ask["input"]["path"]
                .as_str()
                .is_some_and(|p| p.ends_with(file.file_name().unwrap().to_str().unwrap())),
            "{ask}"
        );
        assert!(!file.exists(), "nothing written before the answer");
        let id = ask["requestId"].as_str().unwrap();
        let (code, body) =
            r.d.post(
                &format!("/v1/sessions/{sid}/permissions/{id}"),
                json!({"decision": decision}),
            )
            .await;
        assert_eq!(code, 200, "{body}");
        evs.extend(sse.until_complete(&run).await);
        evs.retain(|e| e.run() == run);
        assert_eq!(complete(&evs), ["stop"], "{:?}", errors(&evs));
        assert_eq!(std::fs::read_to_string(file).ok().as_deref(), content);
    }
    let (_, audit) = r.d.get(&format!("/v1/sessions/{sid}/audit")).await;
    let audit = audit["audit"].as_array().unwrap();
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0]["gate"], "permission", "{}", audit[0]);
}
