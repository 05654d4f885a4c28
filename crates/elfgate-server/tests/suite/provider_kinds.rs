//! The `openai-responses` and `gemini` provider kinds end to end: chat sessions with thinking and
//! usage, st-chat and api sessions, a tinyelf tool loop, retries, mid-stream errors and interrupts, each on both kinds.

use crate::common;
use crate::scripted;

use common::{Daemon, Ev, Opts, poll_until, text_of, types};
use elfgate_mockllm::{Format, MockServer, Outcome};
use scripted::{call, ends_by_id, finish_of, of, project, run, script, session, stored};
use serde_json::{Value, json};

/// The two kinds under test: (provider name, the mock's record of its format, the credential
/// the mock saw).
const KINDS: [(&str, Format, &str); 2] = [
    (
        "mock-responses",
        Format::OpenAiResponses,
        "Bearer key-responses",
    ),
    ("mock-gemini", Format::Gemini, "key-gemini"),
];

fn daemon(mock: &MockServer) -> Daemon {
    let base = mock.base_url();
    Daemon::start(
        mock,
        Opts {
            extra_toml: format!(
                r#"
[providers.mock-responses]
kind = "openai-responses"
base_url = "{base}/v1"
api_key_env = "MOCK_RESPONSES_KEY"
default_model = "mock"
idle_timeout_secs = 30
request_timeout_secs = 10

[providers.mock-gemini]
kind = "gemini"
base_url = "{base}"
api_key_env = "MOCK_GEMINI_KEY"
default_model = "mock"
idle_timeout_secs = 30
request_timeout_secs = 10
"#
            ),
            env: vec![
                ("MOCK_RESPONSES_KEY".into(), "key-responses".into()),
                ("MOCK_GEMINI_KEY".into(), "key-gemini".into()),
            ],
            ..Default::default()
        },
    )
}

/// A chat session's body on `provider`.
fn chat_on(provider: &str, model: &str, prompt: &str) -> Value {
    json!({"engine": "chat", "providerId": provider, "model": model, "prompt": prompt})
}

fn thinking_of(evs: &[Ev]) -> String {
    evs.iter()
        .filter(|e| e.event == "streamDelta" && e.data["delta"]["kind"] == "thinking")
        .map(|e| e.data["delta"]["text"].as_str().unwrap())
        .collect()
}

/// The bodies the mock received for `model`, oldest first, checking their format and key.
fn bodies(mock: &MockServer, model: &str, format: Format, key: &str) -> Vec<Value> {
    mock.requests()
        .into_iter()
        .filter(|r| r.model == model)
        .map(|r| {
            assert_eq!(r.format, format, "{}", r.path);
            assert_eq!(r.authorization.as_deref(), Some(key));
            r.body
        })
        .collect()
}

#[tokio::test]
async fn chat_sessions_stream_thinking_text_and_usage_and_send_history() {
    let mock = MockServer::start().await.unwrap();
    let d = daemon(&mock);
    for (provider, format, key) in KINDS {
        let model = format!("mock:tokens=3,think=2,id={provider}");
        let (sid, run1) = d
            .create(
                json!({"engine": "chat", "providerId": provider, "model": model,
                           "prompt": "first question", "systemPrompt": "be brief",
                           "thinkingLevel": "low"}),
            )
            .await;
        let mut sse = d.events(&sid, None).await;
        let evs = sse.until_complete(&run1).await;
        assert_eq!(text_of(&evs), "tok0 tok1 tok2 ", "{provider}");
        assert_eq!(thinking_of(&evs), "think0 think1 ", "{provider}");
        assert_eq!(finish_of(&evs), "stop", "{provider}: {:?}", types(&evs));
        // The mock counts the words of the system prompt and the user's text, and generates
        // three text and two thinking tokens.
        let stats = &of(&evs, "result")[0].data["stats"];
        assert_eq!(stats["inputTokens"], 4, "{provider}: {stats}");
        assert_eq!(stats["outputTokens"], 5, "{provider}: {stats}");
        let msgs = stored(&d, &sid).await;
        assert_eq!(msgs[1]["blocks"][0]["type"], "thinking", "{provider}");

        // The second turn sends the first one back, in the provider's own shape.
        let run2 = d
            .send(&sid, json!({"prompt": "second question", "model": model}))
            .await;
        let evs = sse.until_complete(&run2).await;
        assert_eq!(finish_of(&evs), "stop", "{provider}");
        let b = bodies(&mock, &model, format, key);
        assert_eq!(b.len(), 2, "{provider}");
        // (list of turns, its parts' key, the assistant's role name)
        let (turns, parts, assistant) = match format {
            Format::OpenAiResponses => {
                assert_eq!(b[1]["instructions"], "be brief");
                assert_eq!(b[0]["reasoning"]["effort"], "low");
                assert_eq!(b[1]["stream"], true);
                // The first answer's reasoning goes back before it, from its encrypted content.
                assert_eq!(b[1]["input"][1]["type"], "reasoning");
                assert_eq!(
                    b[1]["input"][1]["encrypted_content"],
                    elfgate_mockllm::RESPONSES_ENCRYPTED_REASONING
                );
                assert_eq!(b[1]["input"][2]["content"][0]["type"], "output_text");
                (&b[1]["input"], "content", "assistant")
            }
            _ => {
                assert_eq!(b[1]["systemInstruction"]["parts"][0]["text"], "be brief");
                let budget = &b[0]["generationConfig"]["thinkingConfig"]["thinkingBudget"];
                assert!(budget.is_number(), "{}", b[0]);
                (&b[1]["contents"], "parts", "model")
            }
        };
        let shape: Vec<(&str, &str)> = turns
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["type"] != "reasoning")
            .map(|t| {
                (
                    t["role"].as_str().unwrap(),
                    t[parts][0]["text"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            shape,
            [
                ("user", "first question"),
                (assistant, "tok0 tok1 tok2 "),
                ("user", "second question")
            ],
            "{provider}"
        );
    }
}

#[tokio::test]
async fn st_chat_and_api_sessions_run_on_each_kind() {
    let mock = MockServer::start().await.unwrap();
    let d = daemon(&mock);
    for (provider, format, key) in KINDS {
        for engine in ["st-chat", "api"] {
            let model = format!("mock:tokens=2,id={engine}-{provider}");
            let (sid, run) = d
                .create(
                    json!({"engine": engine, "providerId": provider, "model": model,
                               "prompt": "alpha"}),
                )
                .await;
            let evs = d.events(&sid, None).await.until_complete(&run).await;
            assert_eq!(text_of(&evs), "tok0 tok1 ", "{engine} on {provider}");
            assert_eq!(finish_of(&evs), "stop", "{engine} on {provider}");
            assert_eq!(bodies(&mock, &model, format, key).len(), 1);
        }
    }
}

#[tokio::test]
async fn tinyelf_runs_a_tool_loop_on_each_kind() {
    let mock = MockServer::start().await.unwrap();
    let d = daemon(&mock);
    let dir = project();
    for (provider, format, key) in KINDS {
        let model = format!("mock:script={provider}");
        script(
            &mock,
            provider,
            json!([
                {"thinking": "Read it first.", "text": "Let me look.",
                 "toolCalls": [call("c1", "read_file", json!({"path": "a.txt"}))]},
                {"text": "The file says hello."}
            ]),
        );
        let (sid, _, evs) = run(
            &d,
            session(
                "what is in a.txt?",
                &model,
                &dir,
                json!({"providerId": provider, "thinkingLevel": "low"}),
            ),
        )
        .await;
        assert_eq!(finish_of(&evs), "stop", "{provider}: {:?}", types(&evs));
        assert_eq!(thinking_of(&evs), "Read it first.", "{provider}");
        let ends = ends_by_id(&evs);
        assert_eq!(ends["c1"].0, "success", "{provider}: {ends:?}");
        assert!(ends["c1"].1.contains("hello world"), "{provider}: {ends:?}");
        assert_eq!(of(&evs, "result")[0].data["stats"]["iterations"], 2);
        let msgs = stored(&d, &sid).await;
        let last = msgs.last().unwrap();
        assert_eq!(
            last["blocks"][0]["text"], "The file says hello.",
            "{provider}"
        );

        // The second call carried the tool call and its result in the provider's shape.
        let b = bodies(&mock, &model, format, key);
        assert_eq!(b.len(), 2, "{provider}");
        match format {
            Format::OpenAiResponses => {
                let names: Vec<&str> = b[0]["tools"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t["name"].as_str().unwrap())
                    .collect();
                assert!(names.contains(&"read_file"), "{names:?}");
                let input = b[1]["input"].as_array().unwrap();
                let call = input.iter().find(|i| i["type"] == "function_call").unwrap();
                assert_eq!(call["call_id"], "c1");
                assert_eq!(call["name"], "read_file");
                let args: Value =
                    serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
                assert_eq!(args, json!({"path": "a.txt"}));
                let out = input
                    .iter()
                    .find(|i| i["type"] == "function_call_output")
                    .unwrap();
                assert_eq!(out["call_id"], "c1");
                assert!(out["output"].as_str().unwrap().contains("hello world"));
                // The first turn's reasoning went back as a reasoning item, from the encrypted
                // content the request asked for, before the turn's message and call.
                assert_eq!(b[0]["include"], json!(["reasoning.encrypted_content"]));
                let kinds: Vec<&str> = input.iter().map(|i| i["type"].as_str().unwrap()).collect();
                assert_eq!(
                    kinds,
                    [
                        "message",
                        "reasoning",
                        "message",
                        "function_call",
                        "function_call_output"
                    ],
                    "{input:?}"
                );
                let reasoning = &input[1];
                assert_eq!(
                    reasoning["encrypted_content"],
                    elfgate_mockllm::RESPONSES_ENCRYPTED_REASONING
                );
                assert_eq!(reasoning["summary"][0]["text"], "Read it first.");
            }
            _ => {
                let decls = b[0]["tools"][0]["functionDeclarations"].as_array().unwrap();
                assert!(decls.iter().any(|t| t["name"] == "read_file"));
                let parts: Vec<&Value> = b[1]["contents"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .flat_map(|c| c["parts"].as_array().unwrap())
                    .collect();
                let call = parts
                    .iter()
                    .find(|p| p.get("functionCall").is_some())
                    .unwrap();
                assert_eq!(call["functionCall"]["name"], "read_file");
                assert_eq!(call["functionCall"]["args"], json!({"path": "a.txt"}));
                let resp = parts
                    .iter()
                    .find(|p| p.get("functionResponse").is_some())
                    .unwrap();
                assert_eq!(resp["functionResponse"]["name"], "read_file");
                let output = resp["functionResponse"]["response"]["output"]
                    .as_str()
                    .unwrap();
                assert!(output.contains("hello world"), "{output}");
            }
        }
    }
}

#[tokio::test]
async fn gemini_calls_without_ids_get_ids_unique_over_the_turns() {
    let mock = MockServer::start().await.unwrap();
    let d = daemon(&mock);
    let dir = project();
    let read = json!({"name": "read_file", "arguments": json!({"path": "a.txt"}).to_string()});
    script(
        &mock,
        "no-ids",
        json!([{"toolCalls": [read]}, {"toolCalls": [read]}, {"text": "Read twice."}]),
    );
    let (_, _, evs) = run(
        &d,
        session(
            "read a.txt twice",
            "mock:script=no-ids",
            &dir,
            json!({"providerId": "mock-gemini"}),
        ),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop", "{:?}", types(&evs));
    let ends = ends_by_id(&evs);
    assert_eq!(ends.len(), 2, "{ends:?}");
    assert!(
        ends.values().all(|(status, _)| status == "success"),
        "{ends:?}"
    );
    // The last request answers each call under its own id.
    let b = bodies(&mock, "mock:script=no-ids", Format::Gemini, "key-gemini");
    let ids: Vec<&Value> = b[2]["contents"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["parts"].as_array().unwrap())
        .filter_map(|p| p.get("functionResponse").map(|r| &r["id"]))
        .collect();
    assert_eq!(ids.len(), 2, "{}", b[2]);
    assert_ne!(ids[0], ids[1]);
    // Each call went back with the thought signature Gemini put on it (no thoughts were asked
    // for, so the signature came without any thought text), and no thought part was made up.
    let model_parts: Vec<&Value> = b[2]["contents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["role"] == "model")
        .flat_map(|c| c["parts"].as_array().unwrap())
        .collect();
    let calls: Vec<&&Value> = model_parts
        .iter()
        .filter(|p| p.get("functionCall").is_some())
        .collect();
    assert_eq!(calls.len(), 2, "{}", b[2]);
    for call in calls {
        assert_eq!(
            call["thoughtSignature"],
            elfgate_mockllm::GEMINI_THOUGHT_SIGNATURE,
            "{}",
            b[2]
        );
    }
    assert!(
        model_parts.iter().all(|p| p.get("thought").is_none()),
        "{}",
        b[2]
    );
}

#[tokio::test]
async fn a_500_is_retried_and_a_mid_stream_error_ends_the_run() {
    let mock = MockServer::start().await.unwrap();
    let d = daemon(&mock);
    for (provider, format, key) in KINDS {
        let model = format!("mock:tokens=2,fail=500x1,id=retry-{provider}");
        let (sid, run) = d.create(chat_on(provider, &model, "hi")).await;
        let evs = d.events(&sid, None).await.until_complete(&run).await;
        let t = types(&evs);
        assert_eq!(
            t.iter().filter(|x| **x == "retry").count(),
            1,
            "{provider}: {t:?}"
        );
        assert!(!t.contains(&"error"), "{provider}: {t:?}");
        assert_eq!(text_of(&evs), "tok0 tok1 ", "{provider}");
        assert_eq!(finish_of(&evs), "stop", "{provider}");
        assert_eq!(bodies(&mock, &model, format, key).len(), 2, "{provider}");

        let model = format!("mock:tokens=5,error_after=2,id={provider}");
        let (sid, run) = d.create(chat_on(provider, &model, "hi")).await;
        let evs = d.events(&sid, None).await.until_complete(&run).await;
        let t = types(&evs);
        let error = t
            .iter()
            .position(|x| *x == "error")
            .expect("an error event");
        assert!(t[..error].contains(&"streamDelta"), "{provider}: {t:?}");
        assert_eq!(t.iter().filter(|x| **x == "complete").count(), 1);
        assert_eq!(finish_of(&evs), "error", "{provider}");
        let err = &of(&evs, "error")[0].data["error"];
        assert_eq!(err["code"], "upstream_error", "{provider}: {err}");
        assert_eq!(text_of(&evs), "tok0 tok1 ", "{provider}");
        let msgs = stored(&d, &sid).await;
        assert_eq!(msgs[1]["blocks"][0]["text"], "tok0 tok1 ", "{provider}");
    }
}

#[tokio::test]
async fn an_interrupt_closes_the_upstream_stream() {
    let mock = MockServer::start().await.unwrap();
    let d = daemon(&mock);
    for (provider, _, _) in KINDS {
        let model = format!("mock:tokens=100,stall_after=3,id={provider}");
        let (sid, run) = d.create(chat_on(provider, &model, "go")).await;
        let mut sse = d.events(&sid, None).await;
        sse.until_text("tok0 tok1 tok2 ").await;
        let (status, v) = d
            .post(
                &format!("/v1/sessions/{sid}/interrupt"),
                json!({"wait": true}),
            )
            .await;
        assert_eq!(status, 200);
        assert_eq!(v["interrupted"], true, "{provider}");
        let rest = sse.until_complete(&run).await;
        assert_eq!(finish_of(&rest), "interrupted", "{provider}");
        poll_until("the mock's record of the disconnect", || {
            mock.requests()
                .into_iter()
                .find(|r| r.model == model)
                .filter(|r| r.outcome == Outcome::ClientDisconnected)
        })
        .await;
    }
}

/// A PDF's bytes in base64 (a PDF header and a line of text are enough for the wire).
const PDF_B64: &str = "JVBERi0xLjQKJSBhIHNtYWxsIHRlc3QgZG9jdW1lbnQK";

/// The last user turn of a request body in its own format's shape.
fn last_user_parts(format: Format, body: &Value) -> Vec<Value> {
    let turns = match format {
        Format::OpenAiChat | Format::Anthropic => &body["messages"],
        Format::OpenAiResponses => &body["input"],
        Format::Gemini => &body["contents"],
    };
    let last = turns.as_array().unwrap().last().unwrap();
    let parts = match format {
        Format::Gemini => &last["parts"],
        _ => &last["content"],
    };
    parts.as_array().cloned().unwrap_or_default()
}

/// Documents as well as images: a PDF attachment reaches each provider kind the way its API
/// takes files (Chat Completions' file part, Anthropic's document block, the Responses API's
/// input_file, Gemini's inlineData), a text file inline, and is stored as a document block; a
/// type or form a kind cannot take is 422 naming the attachment and the provider, bad base64
/// is 422, and an attachment over server.attachment_max_bytes is 413; nothing is stored then.
#[tokio::test]
async fn documents_reach_every_provider_kind_in_its_own_shape() {
    let mock = MockServer::start().await.unwrap();
    let d = daemon(&mock);
    let pdf = json!({"name": "report.pdf", "mediaType": "application/pdf", "data": PDF_B64});
    let text = json!({"name": "notes.txt", "mediaType": "text/plain", "text": "line one"});
    for (provider, format) in [
        ("mock", Format::OpenAiChat),
        ("mock-anthropic", Format::Anthropic),
        ("mock-responses", Format::OpenAiResponses),
        ("mock-gemini", Format::Gemini),
    ] {
        let before = mock.requests().len();
        let mut body = chat_on(provider, "mock", "read these");
        body["attachments"] = json!([pdf, text]);
        let (sid, run) = d.create(body).await;
        let evs = d.all_events_until_complete_of(&sid, &run).await;
        assert_eq!(finish_of(&evs), "stop", "{provider}: {:?}", types(&evs));
        let sent = &mock.requests()[before];
        assert_eq!(sent.format, format);
        let parts = last_user_parts(format, &sent.body);
        let data_url = format!("data:application/pdf;base64,{PDF_B64}");
        let want = match format {
            Format::OpenAiChat => json!({"type": "file",
                "file": {"filename": "report.pdf", "file_data": data_url}}),
            Format::Anthropic => json!({"type": "document", "title": "report.pdf",
                "source": {"type": "base64", "media_type": "application/pdf", "data": PDF_B64}}),
            Format::OpenAiResponses => json!({"type": "input_file", "filename": "report.pdf",
                "file_data": data_url}),
            Format::Gemini => {
                json!({"inlineData": {"mimeType": "application/pdf", "data": PDF_B64}})
            }
        };
        assert!(parts.contains(&want), "{provider}: {parts:?}");
        let all = serde_json::to_string(&parts).unwrap();
        assert!(all.contains("line one"), "{provider}: {all}");
        let (_, m) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
        let blocks = &m["messages"][0]["blocks"];
        assert!(
            blocks
                .as_array()
                .unwrap()
                .iter()
                .any(|b| b["type"] == "document"
                    && b["name"] == "report.pdf"
                    && b["media_type"] == "application/pdf"),
            "{blocks}"
        );
    }

    let (_, before) = d.get("/v1/sessions").await;
    let refused = |provider: &str, attachment: Value| {
        let mut body = chat_on(provider, "mock", "read it");
        body["attachments"] = json!([attachment]);
        body
    };
    for (body, status, want) in [
        (
            refused(
                "mock",
                json!({"name": "r.pdf", "mediaType": "application/pdf",
                                   "url": "https://example.com/r.pdf"}),
            ),
            422,
            "attachments[0] (r.pdf, application/pdf): provider 'mock' (openai) cannot take this \
             file: it takes application/pdf, inline (base64) only",
        ),
        (
            refused(
                "mock-anthropic",
                json!({"name": "a.zip", "mediaType": "application/zip",
                                             "data": "UEsDBA=="}),
            ),
            422,
            "provider 'mock-anthropic' (anthropic) cannot take this file",
        ),
        (
            refused(
                "mock",
                json!({"mediaType": "application/pdf", "data": "not base64!"}),
            ),
            422,
            "attachments[0] (application/pdf): data is not base64",
        ),
        (
            refused("mock", json!({"mediaType": "application/pdf"})),
            422,
            "give exactly one of data (base64), url or text",
        ),
    ] {
        let (s, v) = d.post("/v1/sessions", body).await;
        assert_eq!(s, status, "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(want),
            "{v}"
        );
    }
    let (_, after) = d.get("/v1/sessions").await;
    assert_eq!(before["sessions"], after["sessions"]);

    // Past the per-attachment limit: 413.
    let small = Daemon::start(
        &mock,
        Opts {
            server_toml: "attachment_max_bytes = 16".into(),
            ..Default::default()
        },
    );
    let (s, v) = small
        .post("/v1/sessions", refused("mock", pdf.clone()))
        .await;
    assert_eq!(s, 413, "{v}");
    assert_eq!(v["error"]["code"], "payload_too_large");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("attachments[0] (report.pdf, application/pdf) is 33 bytes, more than server.attachment_max_bytes (16)"),
        "{v}"
    );
}

/// engineConfig nativeSearchEnabled asks a provider kind that can search itself to do so (the
/// Responses API's web_search tool, Gemini's Google Search grounding, Anthropic's server-side
/// web_search), beside a tinyelf run's own tools; a kind that cannot is 422 naming the provider.
#[tokio::test]
async fn native_search_asks_the_providers_that_can() {
    let mock = MockServer::start().await.unwrap();
    let d = daemon(&mock);
    for (provider, want) in [
        ("mock-responses", json!({"type": "web_search"})),
        ("mock-gemini", json!({"googleSearch": {}})),
        (
            "mock-anthropic",
            json!({"type": "web_search_20250305", "name": "web_search"}),
        ),
    ] {
        let before = mock.requests().len();
        let mut body = chat_on(provider, "mock", "what is new");
        body["engineConfig"] = json!({"nativeSearchEnabled": true});
        let (sid, run) = d.create(body).await;
        let evs = d.all_events_until_complete_of(&sid, &run).await;
        assert_eq!(finish_of(&evs), "stop", "{provider}");
        let sent = &mock.requests()[before].body;
        assert!(
            sent["tools"].as_array().unwrap().contains(&want),
            "{provider}: {sent}"
        );

        // A tinyelf run: its function tools, and the provider's search beside them.
        let before = mock.requests().len();
        let dir = project();
        let mut body = session("look", "mock", &dir, json!({}));
        body["providerId"] = json!(provider);
        body["engineConfig"] = json!({"nativeSearchEnabled": true});
        let (sid, run) = d.create(body).await;
        let evs = d.all_events_until_complete_of(&sid, &run).await;
        assert_eq!(finish_of(&evs), "stop", "{provider}");
        let tools = mock.requests()[before].body["tools"].to_string();
        assert!(tools.contains("read_file"), "{provider}: {tools}");
        assert!(tools.contains(&want.to_string()), "{provider}: {tools}");
    }
    for provider in ["mock"] {
        let mut body = chat_on(provider, "mock", "what is new");
        body["engineConfig"] = json!({"nativeSearchEnabled": true});
        let (s, v) = d.post("/v1/sessions", body).await;
        assert_eq!(s, 422, "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains(&format!("provider '{provider}'")),
            "{v}"
        );
    }
}

/// Anthropic's server-side search: the blocks it answers with (`server_tool_use`,
/// `web_search_tool_result`) are announced, stored with the answer and sent back unchanged on the
/// next call (the mock refuses them out of place or altered, as the API does); a `pause_turn`
/// makes the loop send the answer so far back so that the provider goes on; a provider of
/// another kind is not sent them.
#[tokio::test]
async fn anthropic_server_search_blocks_are_stored_and_sent_back() {
    let mock = MockServer::start().await.unwrap();
    let d = daemon(&mock);
    let dir = project();
    script(
        &mock,
        "native-an",
        json!([
            {"serverSearch": "rust 2026", "text": "Searching took long.", "finishReason": "pause_turn"},
            {"text": "Rust 2026 is out."},
            {"text": "Yes, it is."}
        ]),
    );
    let model = "mock:script=native-an";
    let mut body = session("what is new in rust?", model, &dir, json!({}));
    body["providerId"] = json!("mock-anthropic");
    body["engineConfig"] = json!({"nativeSearchEnabled": true});
    let (sid, _, evs) = run(&d, body).await;
    assert_eq!(finish_of(&evs), "stop", "{:?}", types(&evs));
    let notes: Vec<&str> = of(&evs, "processing")
        .iter()
        .map(|e| e.data["message"].as_str().unwrap())
        .collect();
    assert!(
        notes
            .iter()
            .any(|m| m.contains("server_tool_use {\"query\":\"rust 2026\"}")),
        "{notes:?}"
    );
    assert!(
        notes.iter().any(|m| m.contains("2 results")
            && m.contains("Result 1 for rust 2026 <https://search.mock/1?q=rust+2026>")),
        "{notes:?}"
    );
    assert!(notes.iter().any(|m| m.contains("pause_turn")), "{notes:?}");

    // Stored with the answer, as the provider sent them.
    let msgs = stored(&d, &sid).await;
    let first = &msgs[1]["blocks"];
    assert_eq!(first[0]["type"], "provider_block", "{msgs:?}");
    assert_eq!(first[0]["provider_kind"], "anthropic");
    assert_eq!(first[0]["block"]["type"], "server_tool_use");
    assert_eq!(first[1]["block"]["type"], "web_search_tool_result");
    assert_eq!(first[2]["text"], "Searching took long.");

    // The paused answer went back as the conversation's last message, blocks unchanged.
    let sent: Vec<Value> = mock
        .requests()
        .into_iter()
        .filter(|r| r.model == model)
        .map(|r| r.body)
        .collect();
    assert_eq!(sent.len(), 2);
    let last = sent[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "assistant");
    assert_eq!(last["content"][0]["type"], "server_tool_use");
    assert_eq!(last["content"][1]["type"], "web_search_tool_result");
    assert_eq!(
        last["content"][1]["content"][0]["encrypted_content"],
        "mock-encrypted:rust 2026#1"
    );

    // A later turn on the same provider sends them again (accepted: the mock checks them) ...
    let (_, evs) = scripted::resume(&d, &sid, json!({"prompt": "sure?"})).await;
    assert_eq!(finish_of(&evs), "stop");
    let outcomes: Vec<Outcome> = mock
        .requests()
        .into_iter()
        .filter(|r| r.model == model)
        .map(|r| r.outcome)
        .collect();
    assert_eq!(outcomes.len(), 3);
    assert!(
        outcomes.iter().all(|o| *o == Outcome::Completed),
        "{outcomes:?}"
    );
    // ... and a provider of another kind gets the text without them.
    script(&mock, "native-oa", json!([{"text": "ok"}]));
    let (_, evs) = scripted::resume(
        &d,
        &sid,
        json!({"prompt": "and?", "providerId": "mock", "model": "mock:script=native-oa",
               "engineConfig": {"nativeSearchEnabled": false}}),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop");
    let oa = mock
        .requests()
        .into_iter()
        .find(|r| r.model == "mock:script=native-oa")
        .unwrap();
    let text = oa.body.to_string();
    assert!(
        !text.contains("server_tool_use") && !text.contains("mock-encrypted"),
        "{text}"
    );
    assert!(text.contains("Searching took long."), "{text}");
}
