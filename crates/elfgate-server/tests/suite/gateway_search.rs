//! A caller's built-in `web_search` on the Responses door, and the provider's own search: served
//! by the daemon's search backend where the provider cannot search, left out with a notice where
//! nothing can serve it, never a failed request; the real codex (which sends the tool with every
//! request) on a Chat Completions provider and on an Anthropic one. And a tinyelf run that asked
//! the provider to search never runs the daemon's own search.

use crate::common;
use crate::scripted;

use common::{Daemon, Opts};
use elfgate_mockllm::MockServer;
use scripted::{bypass, call, ends_by_id, finish_of, project, run, script, session};
use serde_json::{Value, json};

/// `[tools.web_search]` answered by the mock's SearXNG endpoint.
fn search_backend(mock: &MockServer) -> String {
    format!(
        "[tools.web_search]\nbackend = \"searxng\"\nurl = \"{}\"\nmax_results = 2\n",
        mock.base_url()
    )
}

fn daemon(mock: &MockServer, extra_toml: String, log: Option<&std::path::Path>) -> Daemon {
    Daemon::start(
        mock,
        Opts {
            extra_toml,
            log_file: log.map(std::path::Path::to_path_buf),
            // The notice is an info line (the daemon's default level).
            env: vec![("ELFGATE_LOG".into(), "info".into())],
            ..Default::default()
        },
    )
}

async fn responses(d: &Daemon, body: Value) -> reqwest::Response {
    d.http
        .post(d.url("/v1/responses"))
        .json(&body)
        .send()
        .await
        .unwrap()
}

fn omitted(resp: &reqwest::Response) -> Option<String> {
    resp.headers()
        .get("x-elfgate-omitted-tools")
        .map(|v| v.to_str().unwrap().to_string())
}

/// The tool names (or types) of an upstream request body, in either format.
fn offered(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            t["function"]["name"]
                .as_str()
                .or(t["name"].as_str())
                .or(t["type"].as_str())
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

/// The text of a Responses answer's message items.
fn output_text(body: &Value) -> String {
    body["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "message")
        .flat_map(|i| i["content"].as_array().unwrap().iter())
        .map(|p| p["text"].as_str().unwrap_or_default())
        .collect()
}

const FUNCTION: &str =
    r#"{"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}"#;

/// Without a search backend, a Chat Completions provider's route leaves `web_search` (and any
/// other built-in tool it has no counterpart for) out of the request and answers, naming them in
/// `x-elfgate-omitted-tools` and in the log; an engine route does the same; an Anthropic
/// provider searches itself; `builtin_web_search = "omit"` leaves it out there too.
#[tokio::test]
async fn a_builtin_tool_nothing_can_serve_is_left_out_with_a_notice() {
    let mock = MockServer::start().await.unwrap();
    let log = tempfile::NamedTempFile::new().unwrap();
    let d = daemon(
        &mock,
        "[providers.mock-anthropic-plain]\nkind = \"anthropic\"\nbase_url = \"{BASE}\"\n\
         builtin_web_search = \"omit\"\n"
            .replace("{BASE}", &mock.base_url()),
        Some(log.path()),
    );
    let function: Value = serde_json::from_str(FUNCTION).unwrap();
    let tools = json!([{"type": "web_search"}, function, {"type": "file_search"}]);
    for stream in [false, true] {
        let resp = responses(
            &d,
            json!({"model": "mock/mock:tokens=2", "input": "hi", "tools": tools,
                   "stream": stream}),
        )
        .await;
        assert_eq!(resp.status(), 200, "stream {stream}");
        assert_eq!(
            omitted(&resp).as_deref(),
            Some("web_search, file_search"),
            "stream {stream}"
        );
        let text = resp.text().await.unwrap();
        assert!(text.contains("tok0 tok1"), "{text}");
        assert_eq!(offered(&mock.requests().last().unwrap().body), ["lookup"]);
    }
    let logged = std::fs::read_to_string(log.path()).unwrap();
    assert!(
        logged.contains("built-in tools left out of a gateway request")
            && logged.contains("no search backend is configured"),
        "{logged}"
    );
    // An engine route runs its own tools.
    let resp = responses(
        &d,
        json!({"model": "elfgate:tinyelf", "input": "hi", "tools": [{"type": "web_search"}]}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(omitted(&resp).as_deref(), Some("web_search"));
    // An Anthropic provider searches itself; unless told not to.
    let resp = responses(
        &d,
        json!({"model": "mock-anthropic/mock:tokens=1", "input": "hi", "tools": tools}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(omitted(&resp).as_deref(), Some("file_search"));
    let sent = mock.requests().last().unwrap().body.clone();
    assert!(
        sent["tools"].to_string().contains("web_search_20250305"),
        "{sent}"
    );
    let resp = responses(
        &d,
        json!({"model": "mock-anthropic-plain/mock:tokens=1", "input": "hi", "tools": tools}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(omitted(&resp).as_deref(), Some("web_search, file_search"));
    assert_eq!(offered(&mock.requests().last().unwrap().body), ["lookup"]);
}

/// `builtin_web_search` is checked when the configuration is loaded: `native` on a provider that
/// cannot search, `local` without a search backend.
#[tokio::test]
async fn builtin_web_search_that_cannot_be_served_refuses_the_start() {
    let mock = MockServer::start().await.unwrap();
    for (extra, want) in [
        (
            "[providers.plain]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
             builtin_web_search = \"native\"\n",
            "providers.plain.builtin_web_search = \"native\"",
        ),
        (
            "[providers.plain]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
             builtin_web_search = \"local\"\n",
            "needs a search backend",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let stderr = Daemon::start_refused(
            dir.path(),
            &mock,
            Opts {
                extra_toml: extra.to_string(),
                ..Default::default()
            },
        );
        assert!(stderr.contains(want), "{stderr}");
    }
}

/// With a search backend, a Chat Completions provider's model gets a `web_search` function tool:
/// its searches are answered by the backend and the model called again, the caller gets the
/// answer's text and none of the searches; a search beside the caller's own call is left out.
#[tokio::test]
async fn a_builtin_web_search_is_served_by_the_daemons_search_backend() {
    let mock = MockServer::start().await.unwrap();
    let d = daemon(&mock, search_backend(&mock), None);
    script(
        &mock,
        "served",
        json!([
            {"text": "Looking. ", "toolCalls": [call("s1", "web_search", json!({"query": "rust async"}))]},
            {"text": "Found it."}
        ]),
    );
    let function: Value = serde_json::from_str(FUNCTION).unwrap();
    let resp = responses(
        &d,
        json!({"model": "mock/mock:script=served", "input": "search it",
               "tools": [{"type": "web_search"}, function]}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(omitted(&resp), None);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["status"], "completed", "{body}");
    assert_eq!(output_text(&body), "Looking. Found it.");
    assert!(
        body["output"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["type"] != "function_call"),
        "{body}"
    );
    let sent: Vec<Value> = mock
        .requests()
        .into_iter()
        .filter(|r| r.model == "mock:script=served")
        .map(|r| r.body)
        .collect();
    assert_eq!(sent.len(), 2);
    assert_eq!(offered(&sent[0]), ["lookup", "web_search"]);
    let tool = sent[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap_or_else(|| panic!("{}", sent[1]));
    assert_eq!(tool["tool_call_id"], "s1");
    assert!(
        tool["content"]
            .as_str()
            .unwrap()
            .contains("Result 1 for rust async"),
        "{tool}"
    );

    // Beside the caller's own call, a search cannot be answered in the same turn.
    script(
        &mock,
        "both",
        json!([{"toolCalls": [call("s2", "web_search", json!({"query": "x"})),
                              call("c1", "lookup", json!({}))]}]),
    );
    let resp = responses(
        &d,
        json!({"model": "mock/mock:script=both", "input": "go",
               "tools": [{"type": "web_search"}, function]}),
    )
    .await;
    let body: Value = resp.json().await.unwrap();
    let calls: Vec<&Value> = body["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "function_call")
        .collect();
    assert_eq!(calls.len(), 1, "{body}");
    assert_eq!(calls[0]["name"], "lookup");
}

/// Under engineConfig nativeSearchEnabled a model call named `web_search` is the provider's own
/// search coming back as a call: the daemon's own search backend is not asked, and the model is
/// told nothing was searched (its available tools listed without the local search).
#[tokio::test]
async fn native_search_never_runs_the_daemons_own_search() {
    let mock = MockServer::start().await.unwrap();
    let base = mock.base_url();
    let d = daemon(
        &mock,
        format!(
            "{}\n[providers.mock-responses]\nkind = \"openai-responses\"\nbase_url = \
             \"{base}/v1\"\ndefault_model = \"mock\"\n",
            search_backend(&mock)
        ),
        None,
    );
    script(
        &mock,
        "native-call",
        json!([
            {"toolCalls": [call("w1", "web_search", json!({"query": "rust"}))]},
            {"text": "ok"}
        ]),
    );
    let dir = project();
    let mut body = session(
        "what is new",
        "mock:script=native-call",
        &dir,
        bypass(json!({})),
    );
    body["providerId"] = json!("mock-responses");
    body["engineConfig"] = json!({"nativeSearchEnabled": true});
    let (_, _, evs) = run(&d, body).await;
    assert_eq!(finish_of(&evs), "stop");
    let ends = ends_by_id(&evs);
    let (status, content) = &ends["w1"];
    assert_eq!(status, "error", "{content}");
    assert!(
        content.contains("nothing was searched here") && !content.contains("Results for"),
        "{content}"
    );
    let available = content.split("Available tools: ").nth(1).unwrap();
    assert!(!available.contains("web_search"), "{content}");
}

/// Runs the real codex against the daemon's Responses door, with its built-in web_search as it
/// comes; None (the test is skipped) when codex is not installed and not required.
async fn codex(d: &Daemon, model: &str, prompt: &str) -> Option<std::process::Output> {
    let bin = super::cli_real::installed_program("codex")?;
    let project = tempfile::tempdir().unwrap();
    Some(super::cli_real::codex_at_door(&bin, d, project.path(), model, prompt).await)
}

/// The bodies the mock received for `model`, oldest first.
fn sent_for(mock: &MockServer, model: &str) -> Vec<Value> {
    mock.requests()
        .into_iter()
        .filter(|r| r.model == model)
        .map(|r| r.body)
        .collect()
}

/// The real codex, its web_search on: on a Chat Completions provider with the daemon's search
/// backend, the model's search is answered and the answer comes; without a backend, the tool is
/// left out and the turn answers all the same.
#[tokio::test]
async fn codex_with_its_web_search_works_on_a_chat_completions_provider() {
    let mock = MockServer::start().await.unwrap();
    let d = daemon(&mock, search_backend(&mock), None);
    script(
        &mock,
        "codex-search",
        json!([
            {"toolCalls": [call("ws1", "web_search", json!({"query": "elfgate gateway"}))]},
            {"text": "Searched through the door."}
        ]),
    );
    let Some(out) = codex(&d, "mock/mock:script=codex-search", "look it up").await else {
        return;
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("Searched through the door."), "{stdout}");
    let sent = sent_for(&mock, "mock:script=codex-search");
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(offered(&sent[0]).contains(&"web_search".to_string()));
    assert!(
        sent[1].to_string().contains("Result 1 for elfgate gateway"),
        "{}",
        sent[1]
    );

    let plain = daemon(&mock, String::new(), None);
    script(&mock, "codex-plain", json!([{"text": "No search needed."}]));
    let out = codex(&plain, "mock/mock:script=codex-plain", "say it")
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("No search needed."), "{stdout}");
    let sent = sent_for(&mock, "mock:script=codex-plain");
    assert!(
        !offered(&sent[0]).iter().any(|t| t.contains("web_search")),
        "{:?}",
        offered(&sent[0])
    );
}

/// The real codex, its web_search on, on an Anthropic provider behind the door: the provider's
/// own search is asked for, and the answer comes.
#[tokio::test]
async fn codex_with_its_web_search_works_on_an_anthropic_provider() {
    let mock = MockServer::start().await.unwrap();
    let d = daemon(&mock, String::new(), None);
    script(
        &mock,
        "codex-anthropic",
        json!([{"text": "Answered by Anthropic."}]),
    );
    let Some(out) = codex(&d, "mock-anthropic/mock:script=codex-anthropic", "say it").await else {
        return;
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("Answered by Anthropic."), "{stdout}");
    let sent = sent_for(&mock, "mock:script=codex-anthropic");
    assert!(
        sent[0]["tools"].to_string().contains("web_search_20250305"),
        "{}",
        sent[0]["tools"]
    );
}
