//! The real claude-code (scripts/install-cli-tools.sh), run by the claude-sdk engine, reads the
//! session's MCP servers from the owner-only file the daemon names with `--mcp-config` (never
//! JSON on its command line) and calls their tools.

use crate::common;
use crate::scripted;
use crate::suite::cli_real::{CLAUDE, complete, errors, start};
use crate::suite::mcp::everything;

use common::Ev;
use serde_json::json;

#[tokio::test]
async fn claude_code_reads_a_claude_sdk_sessions_mcp_servers_from_its_file() {
    let Some(r) = start(CLAUDE).await else { return };
    scripted::script(
        &r.mock,
        "sdk-mcp",
        json!([
            {"text": "Echoing.", "toolCalls": [scripted::call("toolu_m1", "mcp__ev__echo",
                json!({"message": "marigold-from-mcp"}))]},
            {"text": "Echoed."}
        ]),
    );
    let body = json!({"engine": "claude-sdk", "prompt": "Echo it.", "model": "mock:script=sdk-mcp",
        "providerId": "real-openai",
        "projectPath": r.project.path().display().to_string(),
        "mcpConfig": {"servers": {"ev": {"command": "node", "args": [everything(), "stdio"],
                                          "env": {"EV_TOKEN": "s3cr3t-of-the-server"}}}}});
    let (sid, run) = r.d.create(body).await;
    let mut sse = r.d.events(&sid, None).await;
    // claude-code asks before an MCP tool: allowed through the API, whenever it asks.
    let mut evs: Vec<Ev> = Vec::new();
    while let Some(ev) = sse.next().await {
        let (done, ask) = (
            ev.event == "complete" && ev.run() == run,
            (ev.event == "permissionRequest").then(|| ev.data["requestId"].clone()),
        );
        evs.push(ev);
        if let Some(id) = ask {
            let (code, body) =
                r.d.post(
                    &format!("/v1/sessions/{sid}/permissions/{}", id.as_str().unwrap()),
                    json!({"decision": "allow"}),
                )
                .await;
            assert_eq!(code, 200, "{body}");
        }
        if done {
            break;
        }
    }
    assert_eq!(complete(&evs), ["stop"], "{:?}", errors(&evs));
    let calls: Vec<String> = r
        .mock
        .requests()
        .into_iter()
        .filter(|c| c.model == "mock:script=sdk-mcp")
        .map(|c| c.body.to_string())
        .collect();
    assert_eq!(calls.len(), 2, "a call, then its result");
    assert!(
        calls[0].contains("mcp__ev__echo"),
        "the server's tools were offered"
    );
    assert!(
        calls[1].contains("marigold-from-mcp"),
        "the tool's answer went back: {}",
        calls[1]
    );
}
