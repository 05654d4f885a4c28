//! engineConfig end to end: a wrong type or an unknown key is refused with the field named and
//! nothing stored; the older key names still work; a prompt's keys go over its session's.

use crate::common;
use crate::scripted;

use common::{Daemon, Opts, chat};
use elfgate_mockllm::MockServer;
use scripted::{of, session};
use serde_json::{Value, json};
use std::path::PathBuf;

fn project() -> PathBuf {
    tempfile::tempdir().unwrap().keep()
}

fn message(v: &Value) -> &str {
    v["error"]["message"].as_str().unwrap()
}

async fn session_count(d: &Daemon) -> usize {
    let (s, v) = d.get("/v1/sessions").await;
    assert_eq!(s, 200, "{v}");
    v["sessions"].as_array().unwrap().len()
}

/// The init event of `run`, read from the session's log.
async fn init_of(d: &Daemon, sid: &str, run: &str) -> Value {
    let evs = d.all_events_until_complete_of(sid, run).await;
    of(&evs, "init")
        .into_iter()
        .rfind(|e| e.data["runId"] == run)
        .unwrap_or_else(|| panic!("no init of {run}"))
        .data
        .clone()
}

#[tokio::test]
async fn a_wrong_type_or_an_unknown_key_is_422_naming_it_and_stores_nothing() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();
    let tiny = |cfg: Value| session("x", "mock:tokens=1", &dir, json!({"engineConfig": cfg}));
    let mut with_chat = chat("x", "mock:tokens=1");
    with_chat["engineConfig"] = json!({"temperature": "hot"});
    // cliBackend is read as the CLI it names on every engine, so that a session cannot keep
    // a name no engine understands.
    let mut chat_with_backend = chat("x", "mock:tokens=1");
    chat_with_backend["cliBackend"] = json!("aider");
    // The specification's context fields that mean nothing here say what does instead.
    let spec_field = |name: &str| {
        let mut body = chat("x", "mock:tokens=1");
        body[name] = json!(true);
        body
    };
    for (body, want) in [
        (
            spec_field("customAgentOptions"),
            "`customAgentOptions` is not taken by this daemon: an engine's options are engineConfig keys",
        ),
        (
            spec_field("isOfficialProvider"),
            "`isOfficialProvider` is not taken by this daemon: whether a provider is official is the operator's",
        ),
        (
            spec_field("onSessionEnd"),
            "`onSessionEnd` is not taken by this daemon: a session's callback is engineConfig `notifyUrl`",
        ),
        (
            chat_with_backend,
            "cliBackend 'aider' is not one of codex, claude-code, gemini-cli",
        ),
        (
            tiny(json!({"maxIterations": "5"})),
            r#"engineConfig.maxIterations: invalid type: string "5", expected u32"#,
        ),
        (
            tiny(json!({"maxTurns": -1})),
            "engineConfig.maxTurns: invalid value: integer `-1`, expected u32",
        ),
        (
            tiny(json!({"maxIteration": 5})),
            "engineConfig.maxIteration: unknown field `maxIteration`, expected one of",
        ),
        (
            tiny(json!({"shellEnv": {"A": 1}})),
            "engineConfig.shellEnv.A: invalid type: integer `1`, expected a string",
        ),
        (
            tiny(json!({"shellNetwork": "internet"})),
            "engineConfig.shellNetwork: unknown variant `internet`",
        ),
        (
            tiny(json!({"thinkingLevel": "huge"})),
            "engineConfig.thinkingLevel: unknown variant `huge`",
        ),
        (
            with_chat,
            r#"engineConfig.temperature: invalid type: string "hot", expected f32"#,
        ),
    ] {
        let (s, v) = d.post("/v1/sessions", body.clone()).await;
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (422, Some("unprocessable")),
            "{body}: {v}"
        );
        assert!(message(&v).starts_with(want), "{body}: {v}");
    }
    // The names outside engineConfig keep their 400.
    for (extra, want) in [
        (
            json!({"thinkingLevel": "huge"}),
            "thinkingLevel 'huge' is not one of none, low, medium, high",
        ),
        (
            json!({"permissionMode": "yolo"}),
            "permissionMode 'yolo' is not one of default, acceptEdits, bypassPermissions, plan",
        ),
        (
            json!({"engineConfig": "fast"}),
            "engineConfig must be a JSON object",
        ),
    ] {
        let (s, v) = d
            .post("/v1/sessions", session("x", "mock", &dir, extra))
            .await;
        assert_eq!(s, 400, "{v}");
        assert_eq!(message(&v), want);
    }
    assert_eq!(
        session_count(&d).await,
        0,
        "a refused create stored a session"
    );
    assert!(
        mock.requests().is_empty(),
        "a refused create reached the provider"
    );

    // A later prompt is refused the same way, and leaves the session as it was.
    let (sid, run) = d.create(tiny(json!({}))).await;
    d.all_events_until_complete_of(&sid, &run).await;
    let (_, before) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    let (s, v) = d
        .post(
            &format!("/v1/sessions/{sid}/messages"),
            json!({"prompt": "again", "engineConfig": {"maxHistory": 1.5}}),
        )
        .await;
    assert_eq!(s, 422, "{v}");
    assert!(
        message(&v).starts_with("engineConfig.maxHistory: invalid type: floating point `1.5`"),
        "{v}"
    );
    let (_, after) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    assert_eq!(before, after);
    assert_eq!(mock.requests().len(), 1);
    assert_eq!(session_count(&d).await, 1);
}

#[tokio::test]
async fn older_key_names_work_and_a_prompt_goes_over_its_session_key_by_key() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = project();

    // The older names are taken, and the session keeps the settings under their current names.
    let (sid, run) = d
        .create(session(
            "x",
            "mock:tokens=1,id=alias",
            &dir,
            json!({"engineConfig": {"maxTurns": 7, "tools": ["read_file"], "toolTimeoutMs": 900}}),
        ))
        .await;
    let init = init_of(&d, &sid, &run).await;
    assert_eq!(init["systemInfo"]["maxIterations"], 7, "{init}");
    assert_eq!(init["systemInfo"]["tools"], json!(["read_file"]), "{init}");
    let (_, view) = d.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(
        view["engineConfig"],
        json!({"maxIterations": 7, "enabledTools": ["read_file"], "toolExecutionTimeout": 900})
    );

    // A prompt's key replaces the session's whatever name either used; the others stay.
    let model = "mock:tokens=1,id=merge";
    let (sid, first) = d
        .create(session(
            "x",
            model,
            &dir,
            json!({"engineConfig": {"maxIterations": 7, "temperature": 0.25}}),
        ))
        .await;
    d.all_events_until_complete_of(&sid, &first).await;
    let run = d
        .send(
            &sid,
            json!({"prompt": "again", "engineConfig": {"maxTurns": 3}}),
        )
        .await;
    let init = init_of(&d, &sid, &run).await;
    assert_eq!(init["systemInfo"]["maxIterations"], 3, "{init}");
    let bodies: Vec<Value> = mock
        .requests()
        .into_iter()
        .filter(|r| r.model == model)
        .map(|r| r.body)
        .collect();
    assert_eq!(bodies.len(), 2);
    for b in &bodies {
        assert_eq!(b["temperature"], 0.25, "{b}");
    }
}
