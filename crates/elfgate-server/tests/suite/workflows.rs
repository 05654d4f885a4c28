//! Workflow definitions through the API: created, read, listed, replaced as new versions (each
//! version still readable), deleted with their versions kept for the numbering, and refused with
//! 422 naming the step and the field when something is wrong, with nothing stored.

use crate::common;

use common::{Daemon, Ev, Opts};
use elfgate_mockllm::MockServer;
use serde_json::{Value, json};

/// The documented example.
fn morning_notes() -> Value {
    json!({"name": "morning-notes", "projectPath": "/srv/notes", "permissionMode": "default",
    "inputs": {"day": {"type": "string"}},
    "schedule": {"cron": "0 0 7 * * *", "timezone": "Europe/Berlin", "missed": "skip"},
    "steps": [
      {"id": "list", "tool": "glob", "arguments": {"pattern": "*.md"}},
      {"id": "sum", "model": {"providerId": "openai", "model": "gpt-4.1-mini",
        "prompt": "Summarize: {{ steps.list.output }}"}},
      {"id": "check", "if": "{{ steps.sum.output | length > 0 }}"},
      {"id": "save", "tool": "write_file", "arguments": {"path": "summary-{{ inputs.day }}.md",
        "content": "{{ steps.sum.output }}"}}
    ]})
}

async fn names(d: &Daemon) -> Vec<(String, u64)> {
    let (status, list) = d.get("/v1/workflows").await;
    assert_eq!(status, 200, "{list}");
    list["workflows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["name"].as_str().unwrap().to_string(),
                w["version"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_workflow_is_created_versioned_read_and_deleted() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    assert_eq!(names(&d).await, []);

    let (status, w) = d.post("/v1/workflows", morning_notes()).await;
    assert_eq!(status, 201, "{w}");
    assert_eq!(
        (w["name"].as_str(), w["version"].as_u64()),
        (Some("morning-notes"), Some(1))
    );
    assert_eq!(w["definition"], morning_notes(), "stored as sent");
    assert!(w["createdAt"].as_str().unwrap().ends_with('Z'), "{w}");
    let (status, again) = d.get("/v1/workflows/morning-notes").await;
    assert_eq!(status, 200);
    assert_eq!(again, w);

    // Creating it twice is a conflict; PUT stores a new version.
    let (status, e) = d.post("/v1/workflows", morning_notes()).await;
    assert_eq!(status, 409, "{e}");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("PUT"),
        "{e}"
    );
    let mut v2 = morning_notes();
    v2["description"] = json!("Notes of the day, summed up");
    let (status, w2) = d.put("/v1/workflows/morning-notes", v2.clone()).await;
    assert_eq!(status, 200, "{w2}");
    assert_eq!(w2["version"], 2);
    assert_eq!(w2["definition"], v2);
    let (_, latest) = d.get("/v1/workflows/morning-notes").await;
    assert_eq!(latest["version"], 2);
    let (status, first) = d.get("/v1/workflows/morning-notes?version=1").await;
    assert_eq!(status, 200);
    assert_eq!(first["definition"], morning_notes());
    let (status, e) = d.get("/v1/workflows/morning-notes?version=3").await;
    assert_eq!(status, 404, "{e}");
    assert_eq!(names(&d).await, [("morning-notes".to_string(), 2)]);

    // Replacing under another name, or what does not exist, is refused.
    let (status, e) = d.put("/v1/workflows/evening-notes", v2.clone()).await;
    assert_eq!(status, 422, "{e}");
    assert!(
        e["error"]["message"].as_str().unwrap().starts_with("name:"),
        "{e}"
    );
    let mut other = morning_notes();
    other["name"] = json!("evening-notes");
    let (status, e) = d.put("/v1/workflows/evening-notes", other).await;
    assert_eq!(status, 404, "{e}");

    // Deleted: gone from reads and the list; created again, it goes on counting.
    assert_eq!(d.delete("/v1/workflows/morning-notes").await, 204);
    assert_eq!(d.delete("/v1/workflows/morning-notes").await, 404);
    let (status, _) = d.get("/v1/workflows/morning-notes").await;
    assert_eq!(status, 404);
    let (status, _) = d.get("/v1/workflows/morning-notes?version=1").await;
    assert_eq!(status, 404);
    assert_eq!(names(&d).await, []);
    let (status, w3) = d.post("/v1/workflows", morning_notes()).await;
    assert_eq!(status, 201, "{w3}");
    assert_eq!(w3["version"], 3, "versions are never reused");
}

#[tokio::test]
async fn definitions_survive_a_restart() {
    let mock = MockServer::start().await.unwrap();
    let mut d = Daemon::start(&mock, Opts::default());
    let (status, _) = d.post("/v1/workflows", morning_notes()).await;
    assert_eq!(status, 201);
    d.terminate();
    let d = Daemon::start_in(d.dir.clone(), &mock, Opts::default());
    let (status, w) = d.get("/v1/workflows/morning-notes").await;
    assert_eq!(status, 200, "{w}");
    assert_eq!(w["definition"], morning_notes());
}

#[tokio::test]
async fn a_wrong_definition_is_refused_naming_its_step_and_field_and_nothing_is_stored() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let step = |i: usize, v: Value| {
        let mut w = morning_notes();
        w["steps"][i] = v;
        w
    };
    let cases: Vec<(Value, &str)> = vec![
        (
            step(0, json!({"id": "list", "tool": "teleport"})),
            "steps[0] (list).tool: unknown tool 'teleport'",
        ),
        (
            step(0, json!({"id": "list", "tool": "mcp__nowhere__echo"})),
            "steps[0] (list).tool: unknown tool 'mcp__nowhere__echo'",
        ),
        (
            step(
                1,
                json!({"id": "sum", "model": {"prompt": "{{ steps.save.output }}"}}),
            ),
            "steps[1] (sum).model.prompt: names step 'save', which runs later",
        ),
        (
            step(
                1,
                json!({"id": "sum", "model": {"prompt": "{{ steps.nope.output }}"}}),
            ),
            "steps[1] (sum).model.prompt: names step 'nope', which does not exist",
        ),
        (
            step(
                2,
                json!({"id": "check", "if": "{{ steps.sum.output | length > }}"}),
            ),
            "steps[2] (check).if: not a template",
        ),
        (
            step(
                3,
                json!({"id": "save", "tool": "write_file",
                "arguments": {"path": "{{ inputs.month }}.md", "content": "x"}}),
            ),
            "steps[3] (save).arguments.path: names input 'month', which the workflow does not declare",
        ),
        (
            step(3, json!({"id": "list", "tool": "glob"})),
            "steps[3].id: 'list' is the id of an earlier step too",
        ),
        (
            step(
                3,
                json!({"id": "save", "tool": "glob", "agent": {"prompt": "p"}}),
            ),
            "steps[3] (save): a step has exactly one of tool, model, agent and if",
        ),
        (
            {
                let mut w = morning_notes();
                w["schedule"]["cron"] = json!("0 0 25 * * *");
                w
            },
            "schedule.cron: '0 0 25 * * *' is not a cron expression",
        ),
        (
            {
                let mut w = morning_notes();
                w["schedule"]["timezone"] = json!("Europe/Atlantis");
                w
            },
            "schedule.timezone: 'Europe/Atlantis' is not an IANA time zone",
        ),
        (
            {
                let mut w = morning_notes();
                w["name"] = json!("morning notes");
                w
            },
            "name: 'morning notes' is not a name",
        ),
    ];
    for (body, want) in cases {
        let (status, e) = d.post("/v1/workflows", body.clone()).await;
        assert_eq!(status, 422, "{body}: {e}");
        let message = e["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(want),
            "{message:?} should start with {want:?}"
        );
    }
    // A field the definition does not have is refused too, named.
    let mut typo = morning_notes();
    typo["steps"][0]["argumnets"] = json!({});
    let (status, e) = d.post("/v1/workflows", typo).await;
    assert_eq!(status, 422, "{e}");
    assert!(e.to_string().contains("argumnets"), "{e}");
    assert_eq!(names(&d).await, [], "nothing was stored");
}

/// A workflow's run through the API: 201 with the session, its events until `complete`.
async fn run_workflow(d: &Daemon, name: &str, inputs: Value) -> (String, String, Vec<Ev>) {
    let (sid, run) = start_run(d, name, inputs).await;
    let evs = d.all_events_until_complete_of(&sid, &run).await;
    (sid, run, evs)
}

/// Starts a run of workflow `name`: 201 with (session, run).
pub(super) async fn start_run(d: &Daemon, name: &str, inputs: Value) -> (String, String) {
    let (status, started) = d
        .post(
            &format!("/v1/workflows/{name}/runs"),
            json!({"inputs": inputs}),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let sid = started["sessionId"].as_str().unwrap().to_string();
    let run = started["runId"].as_str().unwrap().to_string();
    assert_eq!(started["eventsUrl"], format!("/v1/sessions/{sid}/events"));
    (sid, run)
}

pub(super) async fn create(d: &Daemon, def: Value) {
    let (status, w) = d.post("/v1/workflows", def).await;
    assert_eq!(status, 201, "{w}");
}

pub(super) fn complete(evs: &[Ev]) -> &str {
    evs.iter()
        .find(|e| e.event == "complete")
        .and_then(|e| e.data["finishReason"].as_str())
        .unwrap()
}

/// (stepId, status) of each stepEnd, in order.
fn step_ends(evs: &[Ev]) -> Vec<(String, String)> {
    evs.iter()
        .filter(|e| e.event == "stepEnd")
        .map(|e| {
            (
                e.data["stepId"].as_str().unwrap().to_string(),
                e.data["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn step_output<'a>(evs: &'a [Ev], id: &str) -> &'a Value {
    &evs.iter()
        .rfind(|e| e.event == "stepEnd" && e.data["stepId"] == id)
        .unwrap_or_else(|| panic!("no stepEnd of {id}"))
        .data["output"]
}

/// Tool steps run through the registry without any model call: templates over inputs (a
/// default filled in) and earlier outputs, a true `if` goes on, a false one ends the run as a
/// success before the step after it.
#[tokio::test]
async fn a_workflow_of_tool_steps_runs_without_a_model() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = tempfile::tempdir().unwrap();
    create(
        &d,
        json!({"name": "notes", "projectPath": dir.path().display().to_string(),
         "permissionMode": "bypassPermissions",
         "inputs": {"day": {"type": "string"}, "n": {"type": "integer", "default": 2}},
         "steps": [
           {"id": "write", "tool": "write_file",
            "arguments": {"path": "note-{{ inputs.day }}.md", "content": "day {{ inputs.day }} x{{ inputs.n }}"}},
           {"id": "read", "tool": "read_file", "arguments": {"path": "note-{{ inputs.day }}.md"}},
           {"id": "check", "if": "{{ 'x2' in steps.read.output }}"},
           {"id": "list", "tool": "glob", "arguments": {"pattern": "*.md"}},
           {"id": "enough", "if": "{{ inputs.n > 5 }}"},
           {"id": "never", "tool": "write_file", "arguments": {"path": "never.md", "content": "no"}}
         ]}),
    )
    .await;
    let (sid, _, evs) = run_workflow(&d, "notes", json!({"day": "mon"})).await;
    assert_eq!(complete(&evs), "stop", "{:?}", common::types(&evs));
    assert_eq!(
        step_ends(&evs),
        [
            ("write".to_string(), "success".to_string()),
            ("read".to_string(), "success".to_string()),
            ("check".to_string(), "success".to_string()),
            ("list".to_string(), "success".to_string()),
            ("enough".to_string(), "success".to_string()),
        ]
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("note-mon.md")).unwrap(),
        "day mon x2"
    );
    assert!(
        step_output(&evs, "read")
            .as_str()
            .unwrap()
            .contains("day mon x2")
    );
    assert_eq!(step_output(&evs, "check"), &json!(true));
    assert!(
        step_output(&evs, "list")
            .as_str()
            .unwrap()
            .contains("note-mon.md")
    );
    assert_eq!(step_output(&evs, "enough"), &json!(false));
    assert!(
        !dir.path().join("never.md").exists(),
        "the false if ended the run"
    );
    // Each tool call is a tool call of the session, between its step's start and end.
    let calls: Vec<&str> = evs
        .iter()
        .filter(|e| e.event == "toolCallStart")
        .map(|e| e.data["block"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(calls, ["write_file", "read_file", "glob"]);
    assert!(mock.requests().is_empty(), "no model was asked");
    let (_, session) = d.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(session["engine"], "workflow", "{session}");
    // The history: the run's prompt, each call and its result, the outputs at the end.
    let (_, msgs) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    let roles: Vec<&str> = msgs["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant"
        ]
    );
    let last = &msgs["messages"][7]["blocks"][0]["text"];
    let outputs: Value = serde_json::from_str(last.as_str().unwrap()).unwrap();
    assert_eq!(outputs["enough"]["output"], false, "{outputs}");
    // A workflow's session takes no prompts.
    let (status, e) = d
        .post(
            &format!("/v1/sessions/{sid}/messages"),
            json!({"prompt": "again"}),
        )
        .await;
    assert_eq!(status, 422, "{e}");
}

/// A model step is one call of the provider, its prompt rendered from earlier outputs, its
/// answer streamed between the step's start and end and handed to the next step; the run's
/// tokens are the call's.
#[tokio::test]
async fn a_model_step_calls_the_provider_once_with_the_rendered_prompt() {
    let mock = MockServer::start().await.unwrap();
    // Prices, so that the step's cost is counted.
    let d = Daemon::start(
        &mock,
        Opts {
            env: vec![
                (
                    "ELFGATE_PROVIDERS__MOCK__INPUT_USD_PER_MTOK".into(),
                    "1.0".into(),
                ),
                (
                    "ELFGATE_PROVIDERS__MOCK__OUTPUT_USD_PER_MTOK".into(),
                    "2.0".into(),
                ),
            ],
            ..Opts::default()
        },
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "hello workflow").unwrap();
    create(
        &d,
        json!({"name": "brief", "projectPath": dir.path().display().to_string(),
        "permissionMode": "bypassPermissions",
        "steps": [
          {"id": "read", "tool": "read_file", "arguments": {"path": "a.txt"}},
          {"id": "sum", "model": {"model": "mock:tokens=3",
            "prompt": "Summarize: {{ steps.read.output }}", "systemPrompt": "Be brief."}},
          {"id": "save", "tool": "write_file",
           "arguments": {"path": "summary.md", "content": "{{ steps.sum.output }}"}}
        ]}),
    )
    .await;
    let (_, _, evs) = run_workflow(&d, "brief", json!({})).await;
    assert_eq!(complete(&evs), "stop", "{:?}", common::types(&evs));
    let calls = mock.requests();
    assert_eq!(calls.len(), 1, "one model step, one call");
    let body = calls[0].body.to_string();
    assert!(
        body.contains("Summarize:") && body.contains("hello workflow"),
        "{body}"
    );
    assert!(body.contains("Be brief."), "{body}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("summary.md")).unwrap(),
        "tok0 tok1 tok2 "
    );
    // The answer streamed inside its step.
    let at = |kind: &str, id: &str| {
        evs.iter()
            .position(|e| e.event == kind && e.data["stepId"] == id)
            .unwrap()
    };
    let first_delta = evs.iter().position(|e| e.event == "streamDelta").unwrap();
    assert!(at("stepStart", "sum") < first_delta && first_delta < at("stepEnd", "sum"));
    let result = evs.iter().find(|e| e.event == "result").unwrap();
    assert_eq!(result.data["stats"]["outputTokens"], 3, "{}", result.data);
    // Per step: the model step's tokens and cost, none for the tool steps.
    let steps = result.data["stats"]["steps"].as_array().unwrap();
    let ids: Vec<&str> = steps
        .iter()
        .map(|s| s["stepId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["read", "sum", "save"]);
    assert_eq!(steps[0]["outputTokens"], 0);
    assert_eq!(steps[1]["outputTokens"], 3);
    let input = steps[1]["inputTokens"].as_f64().unwrap();
    let cost = steps[1]["costUsd"].as_f64().unwrap();
    assert!(
        (cost - (input + 6.0) / 1_000_000.0).abs() < 1e-12,
        "{}",
        steps[1]
    );
    assert!(steps[2].get("costUsd").is_none());
    // The run's cost is its steps' summed.
    let run_cost = result.data["stats"]["costUsd"].as_f64().unwrap();
    assert!((run_cost - cost).abs() < 1e-12, "{}", result.data);
}

/// A failing step ends the run with the step named, unless it says continueOnError; retries
/// try it again after their backoff, each try announced.
#[tokio::test]
async fn a_failing_step_is_retried_then_ends_the_run_naming_it() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = tempfile::tempdir().unwrap();
    create(
        &d,
        json!({"name": "fragile", "projectPath": dir.path().display().to_string(),
        "permissionMode": "bypassPermissions",
        "steps": [
          {"id": "optional", "tool": "read_file", "arguments": {"path": "nope.txt"},
           "continueOnError": true},
          {"id": "noted", "tool": "write_file",
           "arguments": {"path": "noted.txt", "content": "{{ steps.optional.status }}"}},
          {"id": "needed", "tool": "read_file", "arguments": {"path": "nope.txt"},
           "retries": {"max": 2, "backoffMs": 1}},
          {"id": "after", "tool": "write_file", "arguments": {"path": "after.txt", "content": "x"}}
        ]}),
    )
    .await;
    let (sid, run, evs) = run_workflow(&d, "fragile", json!({})).await;
    assert_eq!(complete(&evs), "error", "{:?}", common::types(&evs));
    assert_eq!(
        step_ends(&evs),
        [
            ("optional".to_string(), "error".to_string()),
            ("noted".to_string(), "success".to_string()),
            ("needed".to_string(), "error".to_string()),
            ("needed".to_string(), "error".to_string()),
            ("needed".to_string(), "error".to_string()),
        ]
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("noted.txt")).unwrap(),
        "error"
    );
    assert!(!dir.path().join("after.txt").exists());
    let attempts: Vec<u64> = evs
        .iter()
        .filter(|e| e.event == "stepStart" && e.data["stepId"] == "needed")
        .map(|e| e.data["attempt"].as_u64().unwrap())
        .collect();
    assert_eq!(attempts, [1, 2, 3]);
    assert_eq!(evs.iter().filter(|e| e.event == "retry").count(), 2);
    let error = evs.iter().find(|e| e.event == "error").unwrap();
    assert_eq!(
        error.data["error"]["code"], "workflow_step",
        "{}",
        error.data
    );
    assert!(
        error.data["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("step 'needed' failed"),
        "{}",
        error.data
    );
    let (_, r) = d.get(&format!("/v1/sessions/{sid}/runs/{run}")).await;
    assert_eq!(r["finishReason"], "error", "{r}");
}

/// A tool that asks: the run's permission request is answered through the API like any
/// session's; with `unattended: deny` it is denied at once and the step fails.
#[tokio::test]
async fn a_step_that_asks_waits_for_the_client_unless_the_workflow_denies_unattended() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = tempfile::tempdir().unwrap();
    let def = |name: &str| {
        json!({"name": name, "projectPath": dir.path().display().to_string(),
         "steps": [{"id": "write", "tool": "write_file",
                    "arguments": {"path": "{{ inputs.file }}", "content": "asked"}}],
         "inputs": {"file": {"type": "string"}}})
    };
    create(&d, def("asks")).await;
    let (status, started) = d
        .post(
            "/v1/workflows/asks/runs",
            json!({"inputs": {"file": "a.txt"}}),
        )
        .await;
    assert_eq!(status, 201, "{started}");
    let sid = started["sessionId"].as_str().unwrap();
    let run = started["runId"].as_str().unwrap();
    let mut sse = d.events(sid, None).await;
    let asked = sse.until_n("permissionRequest", 1).await;
    let ask = &asked.last().unwrap().data;
    assert_eq!(ask["toolName"], "write_file", "{ask}");
    common::allow(&d, sid, ask["requestId"].as_str().unwrap()).await;
    let evs = sse.until_complete(run).await;
    assert_eq!(complete(&evs), "stop");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
        "asked"
    );

    let mut deny = def("denies");
    deny["unattended"] = json!("deny");
    create(&d, deny).await;
    let (sid, run, evs) = run_workflow(&d, "denies", json!({"file": "b.txt"})).await;
    assert_eq!(complete(&evs), "error", "{:?}", common::types(&evs));
    assert_eq!(
        step_ends(&evs),
        [("write".to_string(), "error".to_string())]
    );
    assert!(!dir.path().join("b.txt").exists());
    // Its resume is as unattended: the call is announced and denied at once again.
    let (status, resumed) = d
        .post(
            &format!("/v1/workflows/denies/runs/{run}/resume"),
            json!({}),
        )
        .await;
    assert_eq!(status, 201, "{resumed}");
    let again = resumed["runId"].as_str().unwrap();
    let evs: Vec<Ev> = d
        .all_events_until_complete_of(&sid, again)
        .await
        .into_iter()
        .filter(|e| e.run() == again)
        .collect();
    let resolved: Vec<&Value> = evs
        .iter()
        .filter(|e| e.event == "permissionResolved")
        .map(|e| &e.data["decision"])
        .collect();
    assert_eq!(resolved, [&json!("deny")], "{:?}", common::types(&evs));
    assert_eq!(complete(&evs), "error", "{:?}", common::types(&evs));
    assert!(!dir.path().join("b.txt").exists());
}

/// A run's inputs are checked against the definition before anything starts; a workflow's
/// session cannot be made or steered through the sessions API.
#[tokio::test]
async fn a_runs_inputs_are_checked_and_workflow_sessions_come_only_from_workflows() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    create(&d, morning_notes()).await;
    for (name, inputs, status, want) in [
        ("morning-notes", json!({}), 422, "inputs.day: required"),
        (
            "morning-notes",
            json!({"day": 7}),
            422,
            "inputs.day: 7 is not of type string",
        ),
        (
            "morning-notes",
            json!({"day": "mon", "month": "may"}),
            422,
            "inputs.month:",
        ),
        // The documented example's project is not on this machine.
        (
            "morning-notes",
            json!({"day": "mon"}),
            422,
            "projectPath: project directory /srv/notes is not usable",
        ),
        ("nobody", json!({}), 404, "unknown workflow 'nobody'"),
    ] {
        let (got, e) = d
            .post(
                &format!("/v1/workflows/{name}/runs"),
                json!({"inputs": inputs}),
            )
            .await;
        assert_eq!(got, status, "{name} {inputs}: {e}");
        let message = e["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(want),
            "{message:?} should start with {want:?}"
        );
    }
    let (status, e) = d
        .post(
            "/v1/sessions",
            json!({"engine": "workflow", "prompt": "go"}),
        )
        .await;
    assert_eq!(status, 422, "{e}");
    let (status, e) = d
        .post(
            "/v1/sessions",
            json!({"engine": "tinyelf", "prompt": "go",
                   "engineConfig": {"workflow": {"name": "morning-notes", "version": 1, "inputs": {}}}}),
        )
        .await;
    assert_eq!(status, 422, "{e}");
    assert!(e.to_string().contains("engineConfig.workflow"), "{e}");
    let (_, list) = d.get("/v1/sessions").await;
    assert_eq!(list["sessions"], json!([]), "nothing started");
}

/// An interrupt in the middle of a model step ends the step and the run as interrupted; the
/// steps after it do not run.
#[tokio::test]
async fn an_interrupt_ends_the_step_under_way_and_the_run() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = tempfile::tempdir().unwrap();
    create(
        &d,
        json!({"name": "slow", "projectPath": dir.path().display().to_string(),
        "permissionMode": "bypassPermissions",
        "steps": [
          {"id": "talk", "model": {"model": "mock:tokens=200,delay_ms=50", "prompt": "Count."}},
          {"id": "after", "tool": "write_file", "arguments": {"path": "after.txt", "content": "x"}}
        ]}),
    )
    .await;
    let (status, started) = d.post("/v1/workflows/slow/runs", json!({})).await;
    assert_eq!(status, 201, "{started}");
    let sid = started["sessionId"].as_str().unwrap();
    let run = started["runId"].as_str().unwrap();
    let mut sse = d.events(sid, None).await;
    let mut evs = sse.until_text("tok0 ").await;
    let (status, body) = d
        .post(&format!("/v1/sessions/{sid}/interrupt"), json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    evs.extend(sse.until_complete(run).await);
    assert_eq!(complete(&evs), "interrupted", "{:?}", common::types(&evs));
    assert_eq!(
        step_ends(&evs),
        [("talk".to_string(), "interrupted".to_string())]
    );
    assert!(!dir.path().join("after.txt").exists());
}

/// The fire times of `name`'s scheduled runs so far, from the sessions' first prompts.
async fn fire_times(d: &Daemon, name: &str) -> Vec<String> {
    let (status, list) = d.get("/v1/sessions?limit=1000").await;
    assert_eq!(status, 200, "{list}");
    let prefix = format!("Run workflow {name} v1 on schedule at ");
    let mut times: Vec<String> = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["firstPrompt"].as_str()?.strip_prefix(prefix.as_str()))
        .map(|rest| rest.split(' ').next().unwrap().to_string())
        .collect();
    times.sort();
    times
}

/// Polls `fire_times` until there are at least `n` (a schedule every two seconds: a few
/// seconds at most).
async fn until_fired(d: &Daemon, name: &str, n: usize) -> Vec<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let times = fire_times(d, name).await;
        if times.len() >= n {
            return times;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{name} fired {times:?} only"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A schedule with seconds fires its tool-only workflow at each fire time, once: two fire times
/// observed, then a restart, then two more, none doubled and each on the schedule's grid.
#[tokio::test]
async fn a_schedule_fires_each_time_once_across_a_restart() {
    let mock = MockServer::start().await.unwrap();
    let mut d = Daemon::start(&mock, Opts::default());
    let dir = tempfile::tempdir().unwrap();
    create(
        &d,
        json!({"name": "tick", "projectPath": dir.path().display().to_string(),
         "permissionMode": "bypassPermissions",
         "schedule": {"cron": "*/2 * * * * *", "timezone": "Europe/Berlin"},
         "steps": [{"id": "mark", "tool": "write_file",
                    "arguments": {"path": "fired.txt", "content": "fired"}}]}),
    )
    .await;
    let before = until_fired(&d, "tick", 2).await;
    assert_eq!(
        std::fs::read_to_string(dir.path().join("fired.txt")).unwrap(),
        "fired"
    );
    d.terminate();
    let d = Daemon::start_in(d.dir.clone(), &mock, Opts::default());
    let all = until_fired(&d, "tick", before.len() + 2).await;
    let mut unique = all.clone();
    unique.dedup();
    assert_eq!(unique, all, "a fire time ran twice");
    for t in &all {
        // …T07:00:02.000Z: every two seconds, on the second.
        let seconds: u32 = t[17..19].parse().unwrap();
        assert!(
            seconds.is_multiple_of(2) && t.ends_with(".000Z"),
            "{t} is off the schedule"
        );
    }
    assert!(mock.requests().is_empty(), "no model was asked");
}

/// A run's end starts the workflows whose filters it passes, the ended run's record as their
/// `run` input; a run of another engine starts none.
#[tokio::test]
async fn a_runs_end_starts_the_workflows_whose_filters_it_passes() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = tempfile::tempdir().unwrap();
    create(
        &d,
        json!({"name": "after-chat", "projectPath": dir.path().display().to_string(),
         "permissionMode": "bypassPermissions",
         "inputs": {"run": {"type": "object"}},
         "onRunEnd": {"engines": ["chat"], "finishReasons": ["stop"]},
         "steps": [{"id": "note", "tool": "write_file",
                    "arguments": {"path": "{{ inputs.run.sessionId }}.txt",
                                  "content": "{{ inputs.run.finishReason }} {{ inputs.run.usage.outputTokens }}"}}]}),
    )
    .await;
    let mut st = common::chat("hi", "mock:tokens=2");
    st["engine"] = json!("st-chat");
    let (other, other_run) = d.create(st).await;
    d.all_events_until_complete_of(&other, &other_run).await;
    let (sid, run) = d.create(common::chat("hi", "mock:tokens=2")).await;
    d.all_events_until_complete_of(&sid, &run).await;
    let note = dir.path().join(format!("{sid}.txt"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !note.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the chat run's end started nothing"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // Ended runs are handled in order: the st-chat run's came first and started nothing.
    assert!(!dir.path().join(format!("{other}.txt")).exists());
    let (_, list) = d.get("/v1/sessions").await;
    let triggered: Vec<&str> = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["engine"] == "workflow")
        .map(|s| s["firstPrompt"].as_str().unwrap())
        .collect();
    assert_eq!(triggered.len(), 1, "{triggered:?}");
    assert!(
        triggered[0].contains(&format!("on the end of run {run}")),
        "{triggered:?}"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(&note).unwrap_or_default();
        if text == "stop 2" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{text:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A test receiver of webhooks: answers 500 to the first `failures` POSTs, then 204; keeps each
/// request's headers and body.
pub(crate) struct Receiver {
    pub(crate) url: String,
    pub(crate) seen: std::sync::Arc<std::sync::Mutex<Vec<(axum::http::HeaderMap, String)>>>,
}

pub(crate) async fn receiver(failures: usize) -> Receiver {
    use axum::http::StatusCode;
    let seen: std::sync::Arc<std::sync::Mutex<Vec<(axum::http::HeaderMap, String)>>> =
        Default::default();
    let kept = seen.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: String| {
            let kept = kept.clone();
            async move {
                let mut seen = kept.lock().unwrap();
                seen.push((headers, body));
                if seen.len() <= failures {
                    StatusCode::INTERNAL_SERVER_ERROR
                } else {
                    StatusCode::NO_CONTENT
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Receiver { url, seen }
}

fn webhook_opts(url: &str, extra: &str) -> Opts {
    Opts {
        extra_toml: format!(
            "[webhooks]\nbackoff_ms = 20\n{extra}\n[[webhooks.targets]]\nname = \"ops\"\nurl = \"{url}\"\n\
             secret_env = \"OPS_WEBHOOK_SECRET\"\n"
        ),
        env: vec![("OPS_WEBHOOK_SECRET".to_string(), "hush".to_string())],
        ..Opts::default()
    }
}

/// Polls the deliveries until the first is no longer pending.
async fn settled_delivery(d: &Daemon) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (status, list) = d.get("/v1/webhooks/deliveries").await;
        assert_eq!(status, 200, "{list}");
        if let Some(first) = list["deliveries"].as_array().unwrap().first()
            && first["status"] != "pending"
        {
            return first.clone();
        }
        assert!(std::time::Instant::now() < deadline, "{list}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A run's end is sent to the webhook target as a signed POST with the run's record; a target
/// that fails twice gets it a third time, and the delivery is listed delivered after three
/// attempts.
#[tokio::test]
async fn a_runs_end_is_posted_signed_to_the_webhook_target_until_it_accepts() {
    let mock = MockServer::start().await.unwrap();
    let r = receiver(2).await;
    let d = Daemon::start(
        &mock,
        webhook_opts(&r.url, "allow_private_addresses = true"),
    );
    let (sid, run) = d.create(common::chat("hi", "mock:tokens=2")).await;
    d.all_events_until_complete_of(&sid, &run).await;
    let delivery = settled_delivery(&d).await;
    assert_eq!(delivery["status"], "delivered", "{delivery}");
    assert_eq!(delivery["attempts"], 3, "{delivery}");
    assert_eq!(delivery["lastStatus"], 204, "{delivery}");
    let seen = r.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3, "two failures, then the delivery");
    let id = delivery["id"].as_str().unwrap();
    for (headers, body) in &seen {
        assert_eq!(
            headers["x-elfgate-webhook-id"], id,
            "one id for every attempt"
        );
        let ts = headers["x-elfgate-webhook-timestamp"].to_str().unwrap();
        let mut mac = <hmac::Hmac<sha2::Sha256> as hmac::KeyInit>::new_from_slice(b"hush").unwrap();
        hmac::Mac::update(&mut mac, format!("{ts}.{body}").as_bytes());
        let want = format!(
            "sha256={}",
            hex::encode(hmac::Mac::finalize(mac).into_bytes())
        );
        assert_eq!(headers["x-elfgate-signature-256"], want.as_str());
        let body: Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["type"], "run.ended");
        assert_eq!(body["sessionId"], sid);
        assert_eq!(body["engine"], "chat");
        assert_eq!(body["run"]["id"], run, "{body}");
        assert_eq!(body["run"]["finishReason"], "stop", "{body}");
    }
}

/// A target at a loopback address is refused unless allowed: the delivery fails with the reason
/// and nothing reaches it.
#[tokio::test]
async fn a_webhook_target_at_a_private_address_is_refused_unless_allowed() {
    let mock = MockServer::start().await.unwrap();
    let r = receiver(0).await;
    let d = Daemon::start(&mock, webhook_opts(&r.url, "max_attempts = 1"));
    let (sid, run) = d.create(common::chat("hi", "mock:tokens=2")).await;
    d.all_events_until_complete_of(&sid, &run).await;
    let delivery = settled_delivery(&d).await;
    assert_eq!(delivery["status"], "failed", "{delivery}");
    assert!(
        delivery["lastError"]
            .as_str()
            .unwrap()
            .contains("non-public address"),
        "{delivery}"
    );
    assert!(r.seen.lock().unwrap().is_empty());
}

/// A run that failed is resumed from the step it failed in: a new run of the same session that
/// does not run the earlier steps again and reads their outputs as they were; a run that ended
/// well, or of another workflow, is not resumed.
#[tokio::test]
async fn a_failed_run_is_resumed_from_its_failed_step_with_the_earlier_outputs() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = tempfile::tempdir().unwrap();
    create(
        &d,
        json!({"name": "fragile-chain", "projectPath": dir.path().display().to_string(),
         "permissionMode": "bypassPermissions",
         "steps": [
           {"id": "stamp", "tool": "write_file", "arguments": {"path": "stamp.txt", "content": "first"}},
           {"id": "count", "tool": "glob", "arguments": {"pattern": "*.txt"}},
           {"id": "need", "tool": "read_file", "arguments": {"path": "later.txt"}},
           {"id": "sum", "tool": "write_file",
            "arguments": {"path": "sum.txt", "content": "{{ steps.count.output }} / {{ steps.need.output }}"}}
         ]}),
    )
    .await;
    let (sid, failed, evs) = run_workflow(&d, "fragile-chain", json!({})).await;
    assert_eq!(complete(&evs), "error");
    // The first run counted one file; the resume must not count again.
    std::fs::write(dir.path().join("later.txt"), "arrived").unwrap();
    let (status, e) = d
        .post(
            &format!("/v1/workflows/notes/runs/{failed}/resume"),
            json!({}),
        )
        .await;
    assert_eq!(status, 404, "{e}");
    let (status, resumed) = d
        .post(
            &format!("/v1/workflows/fragile-chain/runs/{failed}/resume"),
            json!({}),
        )
        .await;
    assert_eq!(status, 201, "{resumed}");
    assert_eq!(resumed["sessionId"], sid.as_str(), "the same session");
    let run = resumed["runId"].as_str().unwrap().to_string();
    let evs = d.all_events_until_complete_of(&sid, &run).await;
    let evs: Vec<Ev> = evs.into_iter().filter(|e| e.run() == run).collect();
    assert_eq!(complete(&evs), "stop", "{:?}", common::types(&evs));
    assert_eq!(
        step_ends(&evs),
        [
            ("need".to_string(), "success".to_string()),
            ("sum".to_string(), "success".to_string()),
        ]
    );
    let init = evs.iter().find(|e| e.event == "init").unwrap();
    assert_eq!(
        init.data["systemInfo"]["resumes"],
        failed.as_str(),
        "{}",
        init.data
    );
    assert_eq!(init.data["systemInfo"]["fromStep"], "need", "{}", init.data);
    let sum = std::fs::read_to_string(dir.path().join("sum.txt")).unwrap();
    assert!(
        sum.contains("stamp.txt") && !sum.contains("later.txt /"),
        "{sum}"
    );
    assert!(sum.ends_with("arrived"), "{sum}");
    // A run that ended well has nothing to resume.
    let (status, e) = d
        .post(
            &format!("/v1/workflows/fragile-chain/runs/{run}/resume"),
            json!({}),
        )
        .await;
    assert_eq!(status, 409, "{e}");
}

/// A daemon killed in the middle of a step: at restart the run has ended as interrupted, and its
/// resume runs that step again, after the steps that had ended.
#[tokio::test]
async fn a_run_cut_by_a_crash_ends_interrupted_and_resumes_at_the_step_it_was_in() {
    let mock = MockServer::start().await.unwrap();
    let mut d = Daemon::start(&mock, Opts::default());
    let dir = tempfile::tempdir().unwrap();
    create(
        &d,
        json!({"name": "long", "projectPath": dir.path().display().to_string(),
         "permissionMode": "bypassPermissions",
         "steps": [
           {"id": "before", "tool": "write_file", "arguments": {"path": "before.txt", "content": "x"}},
           {"id": "talk", "model": {"model": "mock:tokens=60,delay_ms=50", "prompt": "Count."}}
         ]}),
    )
    .await;
    let (status, started) = d.post("/v1/workflows/long/runs", json!({})).await;
    assert_eq!(status, 201, "{started}");
    let sid = started["sessionId"].as_str().unwrap().to_string();
    let run = started["runId"].as_str().unwrap().to_string();
    d.events(&sid, None).await.until_text("tok0 ").await;
    d.kill();
    let d = Daemon::start_in(d.dir.clone(), &mock, Opts::default());
    let (_, r) = d.get(&format!("/v1/sessions/{sid}/runs/{run}")).await;
    assert_eq!(r["status"], "interrupted", "{r}");
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .ends_with("(in workflow step 'talk')"),
        "{r}"
    );
    let (status, resumed) = d
        .post(&format!("/v1/workflows/long/runs/{run}/resume"), json!({}))
        .await;
    assert_eq!(status, 201, "{resumed}");
    let run2 = resumed["runId"].as_str().unwrap().to_string();
    let evs: Vec<Ev> = d
        .all_events_until_complete_of(&sid, &run2)
        .await
        .into_iter()
        .filter(|e| e.run() == run2)
        .collect();
    assert_eq!(complete(&evs), "stop", "{:?}", common::types(&evs));
    assert_eq!(
        step_ends(&evs),
        [("talk".to_string(), "success".to_string())]
    );
}

/// A model step with an output schema: its answer is parsed as JSON, the schema is sent as the
/// request's response format, and a tool step reads the fields.
#[tokio::test]
async fn a_model_steps_json_output_feeds_a_tool_step() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = tempfile::tempdir().unwrap();
    crate::scripted::script(
        &mock,
        "plan",
        json!([{"text": "{\"file\": \"plan.txt\", \"body\": \"from the model\"}"}]),
    );
    create(
        &d,
        json!({"name": "planned", "projectPath": dir.path().display().to_string(),
         "permissionMode": "bypassPermissions",
         "steps": [
           {"id": "plan", "model": {"model": "mock:script=plan", "prompt": "Plan a file.",
             "outputSchema": {"type": "object", "properties": {"file": {"type": "string"},
                              "body": {"type": "string"}}, "required": ["file", "body"]}}},
           {"id": "write", "tool": "write_file",
            "arguments": {"path": "{{ steps.plan.output.file }}", "content": "{{ steps.plan.output.body }}"}}
         ]}),
    )
    .await;
    let (_, _, evs) = run_workflow(&d, "planned", json!({})).await;
    assert_eq!(complete(&evs), "stop", "{:?}", common::types(&evs));
    assert_eq!(step_output(&evs, "plan")["file"], "plan.txt");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("plan.txt")).unwrap(),
        "from the model"
    );
    let calls = mock.requests();
    assert_eq!(calls.len(), 1);
    assert_eq!(
        calls[0].body["response_format"]["json_schema"]["schema"]["required"],
        json!(["file", "body"]),
        "{}",
        calls[0].body
    );
}

/// A manual_only tool never runs from a workflow, whatever its permission mode: the step fails
/// naming the tier, and nothing is written.
#[tokio::test]
async fn a_manual_only_tool_never_runs_from_a_workflow() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: "[engines.tinyelf.tool_tiers]\nwrite_file = \"manual_only\"\n".into(),
            ..Opts::default()
        },
    );
    let dir = tempfile::tempdir().unwrap();
    create(
        &d,
        json!({"name": "manual", "projectPath": dir.path().display().to_string(),
         "permissionMode": "bypassPermissions",
         "steps": [{"id": "write", "tool": "write_file",
                    "arguments": {"path": "no.txt", "content": "no"}}]}),
    )
    .await;
    let (_, _, evs) = run_workflow(&d, "manual", json!({})).await;
    assert_eq!(complete(&evs), "error", "{:?}", common::types(&evs));
    let end = evs.iter().find(|e| e.event == "stepEnd").unwrap();
    assert!(
        end.data["error"].as_str().unwrap().contains("manual_only"),
        "{}",
        end.data
    );
    assert!(!dir.path().join("no.txt").exists());
}

/// An agent step is a run of the agent loop inside the workflow's run: its prompt rendered from
/// earlier outputs, its model calls and tool calls, its answer the step's output for the next.
#[tokio::test]
async fn an_agent_step_runs_the_agent_loop_and_hands_on_its_answer() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("task.txt"), "write agent.txt").unwrap();
    crate::scripted::script(
        &mock,
        "agent-step",
        json!([
            {"text": "Writing.", "toolCalls": [crate::scripted::call("c1", "write_file",
                json!({"path": "agent.txt", "content": "by the agent"}))]},
            {"text": "Done by the agent."}
        ]),
    );
    create(
        &d,
        json!({"name": "delegate", "projectPath": dir.path().display().to_string(),
        "permissionMode": "bypassPermissions",
        "steps": [
          {"id": "task", "tool": "read_file", "arguments": {"path": "task.txt"}},
          {"id": "work", "agent": {"model": "mock:script=agent-step",
            "prompt": "Do this: {{ steps.task.output }}", "enabledTools": ["write_file"]}},
          {"id": "report", "tool": "write_file",
           "arguments": {"path": "report.txt", "content": "{{ steps.work.output }}"}}
        ]}),
    )
    .await;
    let (sid, _, evs) = run_workflow(&d, "delegate", json!({})).await;
    assert_eq!(complete(&evs), "stop", "{:?}", common::types(&evs));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("agent.txt")).unwrap(),
        "by the agent"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("report.txt")).unwrap(),
        "Done by the agent."
    );
    let calls = mock.requests();
    assert_eq!(calls.len(), 2, "the agent's call, then its tool's result");
    assert!(calls[0].body.to_string().contains("write agent.txt"));
    // Its prompt and answer are in the session's history.
    let (_, msgs) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    let texts: Vec<String> = msgs["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(std::string::ToString::to_string)
        .collect();
    assert!(texts.iter().any(|t| t.contains("Do this: ")), "{texts:?}");
    assert!(
        texts.iter().any(|t| t.contains("Done by the agent.")),
        "{texts:?}"
    );
}

/// Definitions from `[workflows] dir`: stored at start, not again when unchanged, as a new
/// version when changed; a file that is not a valid definition is skipped.
#[tokio::test]
async fn definitions_from_a_folder_are_stored_at_start_as_versions() {
    let mock = MockServer::start().await.unwrap();
    let folder = tempfile::tempdir().unwrap();
    let yaml = |description: &str| {
        format!(
            "name: from-file\ndescription: {description}\nsteps:\n  - id: look\n    tool: glob\n    \
             arguments:\n      pattern: \"*\"\n"
        )
    };
    std::fs::write(folder.path().join("from-file.yaml"), yaml("first")).unwrap();
    std::fs::write(
        folder.path().join("broken.json"),
        r#"{"name": "broken", "steps": [{"id": "x", "tool": "teleport"}]}"#,
    )
    .unwrap();
    let opts = Opts {
        extra_toml: format!("[workflows]\ndir = \"{}\"\n", folder.path().display()),
        ..Opts::default()
    };
    let mut d = Daemon::start(&mock, opts.clone());
    let (status, w) = d.get("/v1/workflows/from-file").await;
    assert_eq!(status, 200, "{w}");
    assert_eq!(w["version"], 1);
    assert_eq!(w["definition"]["description"], "first");
    let (status, _) = d.get("/v1/workflows/broken").await;
    assert_eq!(status, 404, "an invalid file is skipped");
    // The same file again: nothing new.
    d.terminate();
    let mut d = Daemon::start_in(d.dir.clone(), &mock, opts.clone());
    let (_, w) = d.get("/v1/workflows/from-file").await;
    assert_eq!(w["version"], 1);
    // Changed: a new version.
    std::fs::write(folder.path().join("from-file.yaml"), yaml("second")).unwrap();
    d.terminate();
    let d = Daemon::start_in(d.dir.clone(), &mock, opts);
    let (_, w) = d.get("/v1/workflows/from-file").await;
    assert_eq!(w["version"], 2);
    assert_eq!(w["definition"]["description"], "second");
}

/// A session's own `notifyUrl` gets the signed POST of its runs' ends (signed with the daemon's
/// notify secret); without that secret configured, or with a URL that is not http(s), it is 422.
#[tokio::test]
async fn a_sessions_notify_url_gets_its_runs_ends() {
    let mock = MockServer::start().await.unwrap();
    let r = receiver(0).await;
    let plain = Daemon::start(&mock, Opts::default());
    let mut body = common::chat("hi", "mock:tokens=2");
    body["engineConfig"] = json!({"notifyUrl": r.url});
    let (status, e) = plain.post("/v1/sessions", body.clone()).await;
    assert_eq!(status, 422, "{e}");
    assert!(e.to_string().contains("notify_secret_env"), "{e}");

    let d = Daemon::start(
        &mock,
        Opts {
            extra_toml: "[webhooks]\nallow_private_addresses = true\nnotify_secret_env = \"NOTIFY_SECRET\"\n"
                .into(),
            env: vec![("NOTIFY_SECRET".to_string(), "psst".to_string())],
            ..Opts::default()
        },
    );
    let mut bad = body.clone();
    bad["engineConfig"]["notifyUrl"] = json!("ftp://example.com/x");
    let (status, e) = d.post("/v1/sessions", bad).await;
    assert_eq!(status, 422, "{e}");
    assert!(e.to_string().contains("engineConfig.notifyUrl"), "{e}");
    let (sid, run) = d.create(body).await;
    d.all_events_until_complete_of(&sid, &run).await;
    let delivery = settled_delivery(&d).await;
    assert_eq!(delivery["status"], "delivered", "{delivery}");
    assert_eq!(delivery["target"], "notifyUrl", "{delivery}");
    let seen = r.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    let (headers, raw) = &seen[0];
    let ts = headers["x-elfgate-webhook-timestamp"].to_str().unwrap();
    let mut mac = <hmac::Hmac<sha2::Sha256> as hmac::KeyInit>::new_from_slice(b"psst").unwrap();
    hmac::Mac::update(&mut mac, format!("{ts}.{raw}").as_bytes());
    let want = format!(
        "sha256={}",
        hex::encode(hmac::Mac::finalize(mac).into_bytes())
    );
    assert_eq!(headers["x-elfgate-signature-256"], want.as_str());
    let sent: Value = serde_json::from_str(raw).unwrap();
    assert_eq!(sent["run"]["id"], run.as_str());
}
