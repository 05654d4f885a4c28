//! The spec building of spec.rs: each check's status and message, and which check answers when
//! a body has more than one fault (the order is the documented one).

use super::*;
use serde_json::{Value, json};

/// What a refusal says: its kind (400 or 422) and message.
fn refusal(e: ApiError) -> (u16, String) {
    match e {
        ApiError::BadRequest(m) => (400, m),
        ApiError::Unprocessable(m) => (422, m),
        other => panic!("unexpected refusal {other:?}"),
    }
}

fn session(body: Value) -> Result<SessionSpec, (u16, String)> {
    let req: CreateSessionRequest = serde_json::from_value(body).expect("a body of the type");
    SessionSpec::try_from(req).map_err(refusal)
}

fn prompt(body: Value) -> Result<PromptSpec, (u16, String)> {
    let req: SendMessageRequest = serde_json::from_value(body).expect("a body of the type");
    PromptSpec::try_from(req).map_err(refusal)
}

#[test]
fn a_body_with_no_fault_becomes_typed_values() {
    let spec = session(json!({
        "engine": "tinyelf", "prompt": "hi", "permissionMode": "plan", "thinkingLevel": "low",
        "engineConfig": {"maxTurns": 3}, "cliArgs": ["--x"],
        "channelPermissions": {"canUseTool": false},
        "acpAgent": "gemini", "useExtendedContext": true,
        "mcpConfig": {"disable": ["files"]},
        "channelSource": "slack",
    }))
    .expect("accepted");
    assert_eq!(spec.engine, EngineType::TinyElf);
    assert_eq!(spec.run.permission_mode, Some(PermissionMode::Plan));
    assert_eq!(spec.run.thinking_level, Some(ThinkingLevel::Low));
    let cfg = &spec.run.engine_config;
    // The alias is understood as its current name.
    assert_eq!(cfg.max_iterations, Some(3));
    // The top-level settings are stored in engineConfig.
    assert_eq!(cfg.cli_args.as_deref(), Some(&["--x".to_string()][..]));
    assert_eq!(cfg.channel_permissions.map(|c| c.can_use_tool), Some(false));
    assert_eq!(cfg.acp_agent.as_deref(), Some("gemini"));
    assert_eq!(cfg.use_extended_context, Some(true));
    assert!(cfg.mcp_config.is_some());
    assert_eq!(spec.run.channel.channel_source.as_deref(), Some("slack"));
    // An API client answers its own permission requests.
    assert_eq!(spec.run.answers, PermissionAnswers::Client);
}

#[test]
fn each_fault_of_a_new_session_is_refused_naming_its_field() {
    let cases: [(Value, u16, &str); 12] = [
        (
            json!({"engine": "nope", "prompt": "hi"}),
            422,
            "unknown engine 'nope'",
        ),
        (
            json!({"engine": "chat", "prompt": "  "}),
            400,
            "prompt must not be empty",
        ),
        (
            json!({"engine": "chat", "prompt": "hi", "channelSource": " "}),
            422,
            "channelSource must not be empty",
        ),
        (
            json!({"engine": "chat", "prompt": "hi", "permissionMode": "yolo"}),
            400,
            "permissionMode 'yolo' is not one of default, acceptEdits, bypassPermissions, plan",
        ),
        (
            json!({"engine": "chat", "prompt": "hi", "thinkingLevel": "huge"}),
            400,
            "thinkingLevel 'huge' is not one of none, low, medium, high",
        ),
        (
            json!({"engine": "chat", "prompt": "hi", "engineConfig": [1]}),
            400,
            "engineConfig must be a JSON object",
        ),
        (
            json!({"engine": "chat", "prompt": "hi", "engineConfig": {"maxIterations": "x"}}),
            422,
            "engineConfig.maxIterations: ",
        ),
        (
            json!({"engine": "chat", "prompt": "hi",
                   "engineConfig": {"workflow": {"name": "w", "version": 1, "inputs": {}}}}),
            422,
            "engineConfig.workflow: set by the daemon",
        ),
        (
            json!({"engine": "chat", "prompt": "hi",
                   "channelPermissions": {"canUseTool": true},
                   "engineConfig": {"channelPermissions": {"canUseTool": false}}}),
            422,
            "channelPermissions and engineConfig.channelPermissions differ: send one",
        ),
        (
            json!({"engine": "chat", "prompt": "hi", "acpAgent": "a",
                   "engineConfig": {"acpAgent": "b"}}),
            422,
            "acpAgent: 'a' differs from engineConfig.acpAgent 'b'; give one",
        ),
        (
            json!({"engine": "chat", "prompt": "hi", "useExtendedContext": true,
                   "engineConfig": {"useExtendedContext": false}}),
            422,
            "useExtendedContext: true differs from engineConfig.useExtendedContext false; give one",
        ),
        (
            json!({"engine": "cli", "prompt": "hi", "cliBackend": "nope"}),
            422,
            "cliBackend 'nope' is not one of",
        ),
    ];
    for (body, status, want) in cases {
        let (got, message) = session(body.clone()).expect_err("refused");
        assert_eq!(got, status, "{body}: {message}");
        assert!(
            message.starts_with(want),
            "{body}: {message:?} should start with {want:?}"
        );
    }
}

#[test]
fn a_new_sessions_checks_answer_in_their_order() {
    // Every fault at once; each step removes the one that answered, and the next one answers.
    let mut body = json!({
        "engine": "nope", "prompt": "", "channelSource": "", "permissionMode": "yolo",
        "thinkingLevel": "huge", "engineConfig": {"maxIterations": "x"},
        "cliBackend": "nope",
    });
    let order: [(&str, Value, &str); 7] = [
        ("engine", json!("chat"), "unknown engine"),
        ("prompt", json!("hi"), "prompt must not be empty"),
        ("channelSource", Value::Null, "channelSource"),
        ("permissionMode", Value::Null, "permissionMode"),
        ("thinkingLevel", Value::Null, "thinkingLevel"),
        ("engineConfig", Value::Null, "engineConfig.maxIterations"),
        ("cliBackend", Value::Null, "cliBackend"),
    ];
    for (field, fixed, want) in order {
        let (_, message) = session(body.clone()).expect_err("refused");
        assert!(
            message.starts_with(want),
            "{message:?} should start with {want:?}"
        );
        if fixed.is_null() {
            body.as_object_mut().expect("an object").remove(field);
        } else {
            body[field] = fixed;
        }
    }
    session(body).expect("every fault removed");
}

#[test]
fn a_later_prompts_checks_answer_in_their_order() {
    let (status, message) =
        prompt(json!({"prompt": " ", "permissionMode": "yolo"})).expect_err("refused");
    assert_eq!(
        (status, message.as_str()),
        (400, "prompt must not be empty")
    );
    let (status, message) =
        prompt(json!({"prompt": "hi", "permissionMode": "yolo", "engineConfig": 3}))
            .expect_err("refused");
    assert_eq!(status, 400);
    assert!(message.starts_with("permissionMode 'yolo'"), "{message}");
    let spec =
        prompt(json!({"prompt": "hi", "onBusy": "enqueue", "cliArgs": ["-v"]})).expect("accepted");
    assert_eq!(spec.on_busy, OnBusy::Enqueue);
    assert_eq!(
        spec.run.engine_config.cli_args.as_deref(),
        Some(&["-v".to_string()][..])
    );
}

#[test]
fn a_prompts_settings_go_over_the_sessions_stored_ones() {
    let stored = Session {
        id: elfgate_core::SessionId::new(),
        engine: EngineType::TinyElf,
        title: None,
        provider_id: None,
        model: None,
        cli_backend: None,
        project_path: None,
        agent_id: None,
        system_prompt: None,
        permission_mode: Some(PermissionMode::AcceptEdits),
        engine_config: json!({"maxIterations": 5, "temperature": 0.5}),
        cli_session_id: None,
        created_at: chrono::Utc::now(),
        updated_at: chrono::Utc::now(),
        ownership: elfgate_core::Ownership::root(),
    };
    let run = prompt(json!({"prompt": "hi", "engineConfig": {"maxIterations": 7}}))
        .expect("accepted")
        .run
        .over_session(&stored)
        .expect("a stored config that parses");
    assert_eq!(run.engine_config.max_iterations, Some(7));
    assert_eq!(run.engine_config.temperature, Some(0.5));
    assert_eq!(run.permission_mode, Some(PermissionMode::AcceptEdits));

    let older = Session {
        engine_config: json!({"noSuchKey": 1}),
        ..stored
    };
    let (status, message) = refusal(
        RunSpec::default()
            .over_session(&older)
            .expect_err("refused"),
    );
    assert_eq!(status, 422);
    assert!(
        message.starts_with("the session's stored engineConfig"),
        "{message}"
    );
}
