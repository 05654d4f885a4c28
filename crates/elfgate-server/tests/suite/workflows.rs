//! Workflow definitions through the API: created, read, listed, replaced as new versions (each
//! version still readable), deleted with their versions kept for the numbering, and refused with
//! 422 naming the step and the field when something is wrong, with nothing stored.

use crate::common;

use common::{Daemon, Opts};
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
