//! The gateway's front doors driven by the official openai and anthropic Python SDKs (installed
//! into tools/venv by scripts/install-sdk-venv.sh; scripts/test.sh sets REQUIRE_SDK_TESTS=require,
//! without which a missing venv skips these tests with a note). The scripts are in tests/sdk/.

use crate::common;

use common::{Daemon, Opts};
use elfgate_mockllm::MockServer;
use serde_json::{Value, json};
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The venv's python, or None (and a note) when the venv is not installed.
fn python() -> Option<PathBuf> {
    let py = root().join("tools/venv/bin/python");
    if py.exists() {
        return Some(py);
    }
    assert_ne!(
        std::env::var("REQUIRE_SDK_TESTS").as_deref(),
        Ok("require"),
        "the SDK venv is required (scripts/install-sdk-venv.sh installs it)"
    );
    eprintln!("SDK test skipped: no tools/venv (run scripts/install-sdk-venv.sh)");
    None
}

/// Runs tests/sdk/SCRIPT with `args` against the daemon; its JSON output.
async fn sdk(d: &Daemon, py: &PathBuf, script: &str, args: &[&str], env: &[(&str, &str)]) -> Value {
    let out = tokio::process::Command::new(py)
        .arg(root().join("tests/sdk").join(script))
        .args(args)
        .env("GATEWAY_URL", &d.base)
        .env("GATEWAY_TOKEN", d.token.clone().unwrap_or_default())
        .envs(env.iter().copied())
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("ANTHROPIC_BASE_URL")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{script} {args:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// The stored messages of a session, as `role: text` lines.
async fn stored(d: &Daemon, sid: &str) -> Vec<String> {
    let (status, body) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    assert_eq!(status, 200, "{body}");
    let list = body
        .get("messages")
        .unwrap_or(&body)
        .as_array()
        .unwrap()
        .clone();
    list.iter()
        .map(|m| {
            let text: String = m["blocks"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect();
            format!("{}: {text}", m["role"].as_str().unwrap())
        })
        .collect()
}

#[tokio::test]
async fn openai_sdk_completes_streams_and_calls_tools() {
    let Some(py) = python() else { return };
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());

    let c = sdk(
        &d,
        &py,
        "openai_cases.py",
        &["complete", "mock/mock:tokens=3"],
        &[],
    )
    .await;
    assert_eq!(c["text"], "tok0 tok1 tok2 ");
    assert_eq!(c["finish"], "stop");
    assert_eq!(c["usage"]["completion_tokens"], 3);
    let sid = c["session"].as_str().unwrap();
    assert_eq!(
        stored(&d, sid).await,
        ["user: hello", "assistant: tok0 tok1 tok2 "]
    );
    let body = &mock.requests()[0].body;
    assert_eq!(body["temperature"], 0.5);
    assert_eq!(body["max_tokens"], 50);

    let s = sdk(
        &d,
        &py,
        "openai_cases.py",
        &["stream", "mock/mock:tokens=4"],
        &[],
    )
    .await;
    assert_eq!(s["text"], "tok0 tok1 tok2 tok3 ");
    assert_eq!(s["finish"], "stop");
    assert_eq!(s["usage"]["completion_tokens"], 4);
    let sid = s["session"].as_str().unwrap();
    assert_eq!(
        stored(&d, sid).await,
        ["user: hello", "assistant: tok0 tok1 tok2 tok3 "]
    );
    let (_, list) = d.get("/v1/sessions").await;
    assert!(list.to_string().contains(sid), "{list}");

    let t = sdk(
        &d,
        &py,
        "openai_cases.py",
        &[
            "tools",
            "mock/mock:tokens=1,tool=lookup",
            "mock/mock:tokens=2,id=2",
        ],
        &[],
    )
    .await;
    assert_eq!(t["finish"], "tool_calls");
    assert_eq!(t["tool"], "lookup");
    assert_eq!(t["answer"], "tok0 tok1 ");
    // The second request carried the call and its result upstream.
    let second = mock.requests().last().unwrap().body.clone();
    let msgs = second["messages"].as_array().unwrap();
    let tool_msg = msgs.iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(tool_msg["tool_call_id"], t["call_id"]);
    assert_eq!(tool_msg["content"], "it is here");
    assert!(
        msgs.iter()
            .any(|m| m["tool_calls"][0]["id"] == t["call_id"]),
        "{second}"
    );
}

#[tokio::test]
async fn openai_sdk_sees_errors_as_its_own_exceptions() {
    let Some(py) = python() else { return };
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let e = sdk(&d, &py, "openai_cases.py", &["errors"], &[]).await;
    assert_eq!(e["unknown_model"]["class"], "NotFoundError", "{e}");
    assert_eq!(e["unknown_model"]["status"], 404);
    assert_eq!(e["unknown_model"]["body"]["code"], "model_not_found");
    for case in ["missing_model", "wrong_type", "n2"] {
        assert_eq!(e[case]["class"], "BadRequestError", "{case}: {e}");
        assert_eq!(
            e[case]["body"]["type"], "invalid_request_error",
            "{case}: {e}"
        );
    }
    assert_eq!(e["missing_model"]["body"]["param"], "model");
    assert_eq!(e["wrong_type"]["body"]["param"], "temperature");
    let models: Vec<&str> = e["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    assert!(
        models.contains(&"mock/mock") && models.contains(&"elfgate:tinyelf"),
        "{models:?}"
    );
    // Nothing went upstream, and the daemon still serves.
    assert!(mock.requests().is_empty());
    let c = sdk(
        &d,
        &py,
        "openai_cases.py",
        &["complete", "mock/mock:tokens=1"],
        &[],
    )
    .await;
    assert_eq!(c["text"], "tok0 ");
}

#[tokio::test]
async fn openai_sdk_runs_a_tinyelf_agent_turn() {
    let Some(py) = python() else { return };
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("a.txt"), "hello world\n").unwrap();
    mock.set_script(
        "sdk-agent",
        serde_json::from_value(json!({"responses": [
            {"text": "Let me look. ", "toolCalls": [
                {"id": "c1", "name": "read_file", "arguments": "{\"path\":\"a.txt\"}"}]},
            {"text": "The file says hello."}
        ]}))
        .unwrap(),
    );
    let c = sdk(
        &d,
        &py,
        "openai_cases.py",
        &["stream", "elfgate:tinyelf:mock/mock:script=sdk-agent"],
        &[("GATEWAY_PROJECT", project.path().to_str().unwrap())],
    )
    .await;
    assert_eq!(c["text"], "Let me look. The file says hello.", "{c}");
    assert_eq!(c["finish"], "stop");
    let sid = c["session"].as_str().unwrap();
    let (_, session) = d.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(session["engine"], "tinyelf", "{session}");
    // The tool ran: its result went back upstream in the second call.
    let second = mock.requests()[1].body.to_string();
    assert!(second.contains("hello world"), "{second}");
    let msgs = stored(&d, sid).await;
    assert_eq!(msgs.first().unwrap(), "user: hello");
    assert!(
        msgs.last().unwrap().ends_with("The file says hello."),
        "{msgs:?}"
    );
}

#[tokio::test]
async fn anthropic_sdk_runs_a_tinyelf_agent_turn() {
    let Some(py) = python() else { return };
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("a.txt"), "hello world\n").unwrap();
    mock.set_script(
        "sdk-agent-a",
        serde_json::from_value(json!({"responses": [
            {"toolCalls": [
                {"id": "c1", "name": "read_file", "arguments": "{\"path\":\"a.txt\"}"}]},
            {"text": "It says hello."}
        ]}))
        .unwrap(),
    );
    let c = sdk(
        &d,
        &py,
        "anthropic_cases.py",
        &["text", "elfgate:tinyelf:mock/mock:script=sdk-agent-a"],
        &[("GATEWAY_PROJECT", project.path().to_str().unwrap())],
    )
    .await;
    assert_eq!(c["text"], "It says hello.", "{c}");
    assert_eq!(c["stop"], "end_turn", "{c}");
    let sid = c["session"].as_str().unwrap();
    let (_, session) = d.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(session["engine"], "tinyelf", "{session}");
    assert_eq!(
        session["projectPath"],
        project.path().to_str().unwrap(),
        "{session}"
    );
    // The agent's tool ran in the project: its result went back upstream.
    let second = mock.requests()[1].body.to_string();
    assert!(second.contains("hello world"), "{second}");
}

#[tokio::test]
async fn anthropic_sdk_against_either_kind_of_provider() {
    let Some(py) = python() else { return };
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    for provider in ["mock-anthropic", "mock"] {
        let m = |params: &str| format!("{provider}/mock:{params}");
        let t = sdk(
            &d,
            &py,
            "anthropic_cases.py",
            &["text", &m("tokens=3")],
            &[],
        )
        .await;
        assert_eq!(t["text"], "tok0 tok1 tok2 ", "{provider}: {t}");
        assert_eq!(t["stop"], "end_turn");
        assert_eq!(t["usage"]["output_tokens"], 3);
        let sid = t["session"].as_str().unwrap();
        assert_eq!(
            stored(&d, sid).await,
            ["user: hello", "assistant: tok0 tok1 tok2 "]
        );

        let s = sdk(
            &d,
            &py,
            "anthropic_cases.py",
            &["stream", &m("tokens=2,think=2")],
            &[],
        )
        .await;
        assert_eq!(s["text"], "tok0 tok1 ", "{provider}: {s}");
        assert_eq!(s["types"], json!(["thinking", "text"]), "{provider}: {s}");
        assert_eq!(s["thinking"], "think0 think1 ");
        assert_eq!(s["stop"], "end_turn");
        // Only an Anthropic provider signs its reasoning; the signature must reach the SDK's
        // message although text followed the reasoning.
        let signature = if provider == "mock-anthropic" {
            "sig-mock"
        } else {
            ""
        };
        assert_eq!(s["signatures"], json!([signature]), "{provider}: {s}");

        let q = sdk(
            &d,
            &py,
            "anthropic_cases.py",
            &["stop_sequence", &m("tokens=4")],
            &[],
        )
        .await;
        // Only an Anthropic provider says which stop sequence ended the answer.
        let (stop, sequence) = if provider == "mock-anthropic" {
            ("stop_sequence", json!("tok2"))
        } else {
            ("end_turn", Value::Null)
        };
        for pre in ["", "stream_"] {
            assert_eq!(q[format!("{pre}stop")], stop, "{provider}: {q}");
            assert_eq!(q[format!("{pre}sequence")], sequence, "{provider}: {q}");
            assert_eq!(q[format!("{pre}text")], "tok0 tok1 ", "{provider}: {q}");
        }

        let r = sdk(
            &d,
            &py,
            "anthropic_cases.py",
            &["tools", &m("tokens=1,tool=lookup"), &m("tokens=2,id=2")],
            &[],
        )
        .await;
        assert_eq!(r["stop"], "tool_use", "{provider}: {r}");
        assert_eq!(r["tool"], "lookup");
        assert_eq!(r["answer"], "tok0 tok1 ");
        let last = mock.requests().last().unwrap().body.to_string();
        assert!(last.contains("it is here"), "{provider}: {last}");

        let e = sdk(
            &d,
            &py,
            "anthropic_cases.py",
            &["errors", &m("tokens=1")],
            &[],
        )
        .await;
        assert_eq!(e["unknown_model"]["class"], "NotFoundError", "{e}");
        assert_eq!(
            e["unknown_model"]["body"]["error"]["type"],
            "not_found_error"
        );
        for case in ["missing_model", "wrong_type"] {
            assert_eq!(e[case]["class"], "BadRequestError", "{case}: {e}");
            assert_eq!(e[case]["body"]["error"]["type"], "invalid_request_error");
        }
    }
    let paths: Vec<String> = mock.requests().iter().map(|r| r.path.clone()).collect();
    assert!(paths.iter().any(|p| p == "/v1/messages"), "{paths:?}");
    assert!(
        paths.iter().any(|p| p == "/v1/chat/completions"),
        "{paths:?}"
    );
}

#[tokio::test]
async fn an_alias_falls_back_before_the_first_token_and_never_after() {
    let Some(py) = python() else { return };
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: r#"
[aliases]
chain = ["mock/mock:fail=503", "mock-anthropic/mock:tokens=2"]
late = ["mock/mock:error_after=1,tokens=3", "mock-anthropic/mock:tokens=2,id=late"]
"#
            .into(),
            ..Default::default()
        },
    );
    let c = sdk(&d, &py, "openai_cases.py", &["complete", "chain"], &[]).await;
    assert_eq!(c["text"], "tok0 tok1 ", "{c}");
    let sid = c["session"].as_str().unwrap();
    let mut sse = d.events(sid, None).await;
    let evs = sse.until_n("complete", 1).await;
    let retries: Vec<&common::Ev> = evs.iter().filter(|e| e.event == "retry").collect();
    let last = retries.last().unwrap();
    assert!(
        last.data["retry"]["reason"]
            .as_str()
            .unwrap()
            .contains("falling back to route mock-anthropic/mock:tokens=2"),
        "{retries:?}"
    );
    assert!(!evs.iter().any(|e| e.event == "error"), "{evs:?}");
    assert!(mock.requests().iter().any(|r| r.path == "/v1/messages"));

    let before = mock.requests().len();
    let e = sdk(&d, &py, "openai_cases.py", &["stream_error", "late"], &[]).await;
    assert_eq!(e["text"], "tok0 ", "{e}");
    assert_eq!(e["error"]["class"], "APIError", "{e}");
    let after: Vec<String> = mock.requests()[before..]
        .iter()
        .map(|r| r.model.clone())
        .collect();
    assert_eq!(
        after,
        ["mock:error_after=1,tokens=3"],
        "no fallback after the first token"
    );
}

/// The real claude-code CLI (scripts/install-cli-tools.sh puts it in tools/cli/), pointed at the
/// daemon's /v1/messages, answered by an OpenAI-kind provider. Skipped when it is not installed.
#[tokio::test]
async fn claude_code_answers_through_the_gateway_from_an_openai_kind_provider() {
    let claude = root().join("tools/cli/node_modules/.bin/claude");
    if !claude.exists() {
        // The README's test command installs the CLIs and requires their tests.
        assert_ne!(
            std::env::var("REQUIRE_CLI_TESTS").as_deref(),
            Ok("require"),
            "claude-code is required at {} (scripts/install-cli-tools.sh installs it)",
            claude.display()
        );
        eprintln!("claude-code test skipped: not installed (scripts/install-cli-tools.sh)");
        return;
    }
    let mock = MockServer::start().await.unwrap();
    // claude-code's requests (its system prompt and tool schemas) are far over the tests' limit.
    let d = Daemon::start(
        &mock,
        Opts {
            env: vec![("ELFGATE_SERVER__BODY_LIMIT_BYTES".into(), "8000000".into())],
            ..Default::default()
        },
    );
    let home = tempfile::tempdir().unwrap();
    let model = "mock/mock:echo=1";
    let out = tokio::process::Command::new(&claude)
        .args(["-p", "what is the answer", "--model", model])
        .current_dir(home.path())
        .env("HOME", home.path())
        .env("ANTHROPIC_BASE_URL", &d.base)
        .env("ANTHROPIC_API_KEY", d.token.clone().unwrap_or_default())
        .env("ANTHROPIC_SMALL_FAST_MODEL", model)
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("DISABLE_TELEMETRY", "1")
        .env_remove("ANTHROPIC_AUTH_TOKEN")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "claude failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The mock echoes the user's text, which claude-code prefixes with reminders of its own.
    assert!(stdout.contains("You said: "), "{stdout}");
    assert!(stdout.contains("what is the answer"), "{stdout}");
    let reqs = mock.requests();
    assert!(
        reqs.iter().all(|r| r.path == "/v1/chat/completions"),
        "every call went to the OpenAI-kind provider"
    );
    let (_, sessions) = d.get("/v1/sessions").await;
    let sid = sessions["sessions"][0]["id"].as_str().unwrap();
    let msgs = stored(&d, sid).await;
    assert!(msgs[0].contains("what is the answer"), "{msgs:?}");
}

/// The Responses door with the openai SDK's `responses.create` (plain and streamed), a function
/// call answered through `previous_response_id` (the conversation served from the stored
/// session), `store: false` (nothing kept to continue from), and errors in OpenAI's shape.
#[tokio::test]
async fn openai_sdk_drives_the_responses_door() {
    let Some(py) = python() else { return };
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let cases = "openai_responses_cases.py";

    let c = sdk(&d, &py, cases, &["create", "mock/mock:tokens=3"], &[]).await;
    assert_eq!(c["text"], "tok0 tok1 tok2 ", "{c}");
    assert_eq!(c["status"], "completed");
    assert_eq!(c["output_types"], json!(["message"]));
    assert_eq!(c["usage"]["output_tokens"], 3);
    assert!(c["id"].as_str().unwrap().starts_with("resp_"));
    let sid = c["session"].as_str().unwrap();
    assert_eq!(
        stored(&d, sid).await,
        ["user: hello", "assistant: tok0 tok1 tok2 "]
    );
    let sent = &mock.requests()[0].body;
    assert_eq!(sent["max_tokens"], 50, "{sent}");
    assert_eq!(sent["messages"][0]["content"], "be brief", "{sent}");

    let s = sdk(&d, &py, cases, &["stream", "mock/mock:tokens=4"], &[]).await;
    assert_eq!(s["text"], "tok0 tok1 tok2 tok3 ", "{s}");
    assert_eq!(s["final_text"], s["text"]);
    assert_eq!(s["status"], "completed");
    let types: Vec<&str> = s["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(types.first(), Some(&"response.created"));
    assert_eq!(types.last(), Some(&"response.completed"));
    for t in [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.output_item.done",
    ] {
        assert!(types.contains(&t), "{t} missing: {types:?}");
    }

    crate::scripted::script(
        &mock,
        "resp-tools",
        json!([
            {"toolCalls": [{"id": "call_7", "name": "lookup", "arguments": "{\"q\":\"x\"}"}]},
            {"text": "It is 42."}
        ]),
    );
    let t = sdk(
        &d,
        &py,
        cases,
        &["tools", "mock/mock:script=resp-tools"],
        &[],
    )
    .await;
    assert_eq!(t["call"]["name"], "lookup", "{t}");
    assert_eq!(t["call"]["arguments"], json!({"q": "x"}));
    assert_eq!(t["text"], "It is 42.");
    assert_eq!(t["previous"], t["first_id"]);
    // The second call sent the stored conversation: the question, the call and its output.
    let second = mock
        .requests()
        .into_iter()
        .filter(|r| r.model == "mock:script=resp-tools")
        .nth(1)
        .unwrap()
        .body;
    let msgs = second["messages"].as_array().unwrap();
    let roles: Vec<&str> = msgs.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "tool"], "{second}");
    assert_eq!(msgs[0]["content"], "find it");
    assert_eq!(msgs[1]["tool_calls"][0]["id"], "call_7");
    assert_eq!(msgs[2]["tool_call_id"], "call_7");
    assert_eq!(msgs[2]["content"], "42");

    let f = sdk(&d, &py, cases, &["store_false", "mock/mock:tokens=2"], &[]).await;
    assert_eq!(f["text"], "tok0 tok1 ", "{f}");
    assert_eq!(f["later"]["status"], 404, "{f}");
    assert_eq!(f["later"]["class"], "NotFoundError");

    let e = sdk(&d, &py, cases, &["errors"], &[]).await;
    assert_eq!(e["unknown_model"]["status"], 404, "{e}");
    assert_eq!(e["unknown_model"]["body"]["code"], "model_not_found");
    assert_eq!(e["bad_input"]["status"], 400);
    assert_eq!(e["bad_input"]["body"]["param"], "input");
    // A built-in tool the route cannot serve is left out, named in a header; the call answers.
    assert_eq!(e["builtin"]["omitted"], "file_search", "{e}");
    assert_eq!(e["builtin"]["text"], "tok0 tok1 tok2 ", "{e}");
    assert_eq!(e["upstream_429"]["status"], 429);
    assert_eq!(e["upstream_429"]["body"]["type"], "rate_limit_error");
    assert_eq!(e["upstream_500"]["status"], 502);
    assert_eq!(e["upstream_500"]["body"]["type"], "server_error");
}

/// The Gemini door with the google-genai SDK: generate_content (plain and streamed) with the
/// token as its API key, a function call answered in the next request, count_tokens, the model
/// list, and errors in Google's shape (unknown model, the provider's 429 and 5xx, a wrong key).
#[tokio::test]
async fn genai_sdk_drives_the_gemini_door() {
    let Some(py) = python() else { return };
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let cases = "genai_cases.py";

    let g = sdk(&d, &py, cases, &["generate", "mock/mock:tokens=3"], &[]).await;
    assert_eq!(g["text"], "tok0 tok1 tok2 ", "{g}");
    assert_eq!(g["finish"], "STOP");
    assert_eq!(g["usage"]["candidates_token_count"], 3);
    let sid = g["session"].as_str().unwrap();
    assert_eq!(
        stored(&d, sid).await,
        ["user: hello", "assistant: tok0 tok1 tok2 "]
    );
    let sent = &mock.requests()[0].body;
    assert_eq!(sent["max_tokens"], 50, "{sent}");
    assert_eq!(sent["messages"][0]["content"], "be brief", "{sent}");

    let s = sdk(&d, &py, cases, &["stream", "mock/mock:tokens=4"], &[]).await;
    assert_eq!(s["text"], "tok0 tok1 tok2 tok3 ", "{s}");
    assert_eq!(s["finish"], "STOP");

    crate::scripted::script(
        &mock,
        "genai-tools",
        json!([
            {"toolCalls": [{"id": "call_g1", "name": "lookup", "arguments": "{\"q\":\"x\"}"}]},
            {"text": "It is 42."}
        ]),
    );
    let t = sdk(
        &d,
        &py,
        cases,
        &["tools", "mock/mock:script=genai-tools"],
        &[],
    )
    .await;
    assert_eq!(
        t["call"],
        json!({"name": "lookup", "args": {"q": "x"}}),
        "{t}"
    );
    assert_eq!(t["text"], "It is 42.");
    let second = mock
        .requests()
        .into_iter()
        .filter(|r| r.model == "mock:script=genai-tools")
        .nth(1)
        .unwrap()
        .body;
    let msgs = second["messages"].as_array().unwrap();
    let roles: Vec<&str> = msgs.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "tool"], "{second}");
    assert_eq!(msgs[1]["tool_calls"][0]["function"]["name"], "lookup");
    assert_eq!(msgs[2]["tool_call_id"], msgs[1]["tool_calls"][0]["id"]);
    assert_eq!(msgs[2]["content"], "42");

    let c = sdk(&d, &py, cases, &["count"], &[]).await;
    assert_eq!(c["total"], 3, "{c}");
    let m = sdk(&d, &py, cases, &["models"], &[]).await;
    assert!(
        m["names"]
            .as_array()
            .unwrap()
            .contains(&json!("models/elfgate:chat")),
        "{m}"
    );

    let e = sdk(&d, &py, cases, &["errors"], &[]).await;
    assert_eq!(e["unknown_model"]["code"], 404, "{e}");
    assert_eq!(e["unknown_model"]["status"], "NOT_FOUND");
    assert_eq!(e["upstream_429"]["code"], 429);
    assert_eq!(e["upstream_429"]["status"], "RESOURCE_EXHAUSTED");
    assert_eq!(e["upstream_500"]["code"], 502);
    let k = sdk(&d, &py, cases, &["bad_key"], &[]).await;
    assert_eq!(k["error"]["code"], 401, "{k}");
    assert_eq!(k["error"]["status"], "UNAUTHENTICATED");
}
