//! `useExtendedContext` at the top level of `POST /v1/sessions` (as the specification's session
//! context has it) reaches the CLIs that can take it: claude-code, run by the cli and claude-sdk
//! engines, gets Anthropic's long-context beta; a backend without such a switch is refused. The
//! Anthropic door passes the long-context beta of its caller's `anthropic-beta` header (what
//! claude-code sends) on to an Anthropic provider, so a claude-sdk session gets the long context.

use super::cli_engine::{complete, errors, start};
use crate::common;

use common::{Daemon, Opts};
use elfgate_mockllm::MockServer;
use serde_json::json;

const BETA: &str = "context-1m-2025-08-07";

#[tokio::test]
async fn use_extended_context_reaches_claude_code_in_the_cli_and_claude_sdk_engines() {
    let mock = MockServer::start().await.unwrap();
    let c = start(&mock, "", "");
    for (engine, extended, prompt) in [
        ("claude-sdk", true, "sdk long"),
        ("cli", true, "cli long"),
        ("claude-sdk", false, "sdk short"),
    ] {
        let mut body = c.session("claude-code", prompt);
        if engine == "claude-sdk" {
            body["engine"] = json!("claude-sdk");
            body.as_object_mut().unwrap().remove("cliBackend");
            body["model"] = json!("claude-fake");
        }
        if extended {
            body["useExtendedContext"] = json!(true);
        }
        let (sid, run) = c.d.create(body).await;
        let evs = c.d.events(&sid, None).await.until_complete(&run).await;
        assert_eq!(complete(&evs), ["stop"], "{engine}: {:?}", errors(&evs));
        let rec = c.until_record("claude-code", prompt, false).await;
        let asked = rec.args().contains(&format!("--betas={BETA}"));
        assert_eq!(asked, extended, "{engine} {prompt}: {:?}", rec.args());
        // Stored with the session, so its later prompts keep it.
        let (_, s) = c.d.get(&format!("/v1/sessions/{sid}")).await;
        assert_eq!(
            s["engineConfig"]["useExtendedContext"]
                .as_bool()
                .unwrap_or(false),
            extended,
            "{s}"
        );
    }

    // A CLI without a long-context switch, or two different answers: 422 naming the field.
    for (backend, extra, why) in [
        ("codex", json!({}), "useExtendedContext"),
        ("gemini-cli", json!({}), "useExtendedContext"),
        (
            "claude-code",
            json!({"engineConfig": {"useExtendedContext": false}}),
            "useExtendedContext",
        ),
    ] {
        let mut body = c.session(backend, "refused");
        body["useExtendedContext"] = json!(true);
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (status, e) = c.d.post("/v1/sessions", body).await;
        assert_eq!(status, 422, "{backend}: {e}");
        assert!(e.to_string().contains(why), "{backend}: {e}");
    }
    let (status, e) =
        c.d.post(
            "/v1/sessions",
            json!({"engine": "chat", "prompt": "x", "useExtendedContext": "yes"}),
        )
        .await;
    assert_eq!(status, 400, "{e}");
    assert!(e.to_string().contains("useExtendedContext"), "{e}");
}

#[tokio::test]
async fn the_anthropic_door_passes_its_callers_long_context_beta_to_the_provider() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let http = reqwest::Client::new();
    for beta in [
        Some(format!(
            "claude-code-20250219,{BETA},interleaved-thinking-2025-05-14"
        )),
        None,
    ] {
        let mut req = http
            .post(d.url("/v1/messages"))
            .bearer_auth(d.token.as_deref().unwrap())
            .json(
                &json!({"model": "mock-anthropic/mock:tokens=1", "max_tokens": 50,
                          "messages": [{"role": "user", "content": "hello"}]}),
            );
        if let Some(b) = &beta {
            req = req.header("anthropic-beta", b);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
        let sent = mock.requests().last().unwrap().anthropic_beta.clone();
        match beta {
            // The long-context beta, which the daemon knows; not betas that could change what
            // the provider answers in ways the daemon does not read.
            Some(_) => assert_eq!(sent.as_deref(), Some(BETA)),
            None => assert_eq!(sent, None),
        }
    }
}
