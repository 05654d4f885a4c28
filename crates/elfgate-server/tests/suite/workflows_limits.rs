//! Workflow templates within limits, and the checks that see a hostile definition before it is
//! stored: a template that would not end runs out of fuel and ends its run with an error; two
//! that run on hold up neither `/healthz`, nor an interrupt, a delete or SIGTERM; an output over
//! the limit is cut with a note and a render over it fails its step; strings built from literals
//! past a bound and schedules that never fire are refused at create; `shell_quote` makes an
//! injected value one inert word; a run's body must be an object.

use crate::common;
use crate::suite::workflows::{complete, create, start_run as start};

use common::{Daemon, Ev, GUARD, Opts};
use elfgate_mockllm::MockServer;
use serde_json::{Value, json};

/// Nested loops of 10^14 rounds (over the characters of strings): without limits, years of a
/// core.
const ENDLESS: &str = "{% for a in 'x' * 50000 %}{% for b in 'x' * 50000 %}\
    {% for c in 'x' * 50000 %}{% endfor %}{% endfor %}{% endfor %}true";

/// The daemon's address-space limit in these tests: far above what it needs, far below what a
/// render that kept what it loops over or wrote without bound would take, so that such a render
/// ends the daemon (and the test) instead of filling the machine.
const ADDRESS_SPACE: u64 = 2 * 1024 * 1024 * 1024;

fn with_workflows(keys: &str) -> Opts {
    Opts {
        extra_toml: format!("[workflows]\n{keys}\n"),
        address_space_bytes: Some(ADDRESS_SPACE),
        ..Opts::default()
    }
}

fn step_end<'a>(evs: &'a [Ev], id: &str) -> &'a Value {
    &evs.iter()
        .rfind(|e| e.event == "stepEnd" && e.data["stepId"] == id)
        .unwrap_or_else(|| panic!("no stepEnd of {id}: {:?}", common::types(evs)))
        .data
}

/// `/healthz` answers 200 within the guard (a frozen daemon fails here, not in a hang).
async fn healthy(d: &Daemon) {
    let answer = tokio::time::timeout(GUARD, d.get("/healthz")).await;
    let (status, body) = answer.expect("/healthz did not answer");
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn a_template_that_would_not_end_runs_out_of_fuel_and_ends_its_run_with_an_error() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, with_workflows("template_fuel = 100000"));
    create(
        &d,
        json!({"name": "endless", "steps": [{"id": "spin", "if": ENDLESS}]}),
    )
    .await;
    let (sid, run) = start(&d, "endless", json!({})).await;
    let evs = tokio::time::timeout(GUARD, d.all_events_until_complete_of(&sid, &run))
        .await
        .expect("the run did not end");
    assert_eq!(complete(&evs), "error", "{:?}", common::types(&evs));
    let end = step_end(&evs, "spin");
    assert_eq!(end["status"], "error", "{end}");
    assert!(
        end["error"].as_str().unwrap().contains("ran out of fuel"),
        "{end}"
    );
    let error = evs
        .iter()
        .find(|e| e.event == "error")
        .expect("an error event");
    assert!(
        error.data.to_string().contains("spin"),
        "the error names the step: {}",
        error.data
    );
    healthy(&d).await;
}

/// Two runs whose templates go on (fuel enough for hours): the daemon answers meanwhile, one
/// run is interrupted and the other's session deleted at once, and SIGTERM ends the daemon.
#[tokio::test]
async fn two_templates_that_go_on_hold_up_neither_the_daemon_nor_an_interrupt_nor_sigterm() {
    let mock = MockServer::start().await.unwrap();
    let mut d = Daemon::start(&mock, with_workflows("template_fuel = 100000000000000"));
    create(
        &d,
        json!({"name": "endless", "steps": [{"id": "spin", "if": ENDLESS}]}),
    )
    .await;
    let (first, first_run) = start(&d, "endless", json!({})).await;
    let (second, second_run) = start(&d, "endless", json!({})).await;
    // Both are in their step (rendering its template).
    let mut first_events = d.events(&first, None).await;
    let mut seen = first_events.until_n("stepStart", 1).await;
    d.events(&second, None).await.until_n("stepStart", 1).await;
    healthy(&d).await;
    let (status, list) = d.get("/v1/workflows").await;
    assert_eq!(status, 200, "{list}");

    // An interrupt ends the first run, its step interrupted.
    let (status, body) = tokio::time::timeout(GUARD, d.interrupt_and_wait(&first))
        .await
        .expect("the interrupt did not answer");
    assert_eq!(status, 200, "{body}");
    seen.extend(first_events.until_complete(&first_run).await);
    assert_eq!(complete(&seen), "interrupted", "{:?}", common::types(&seen));
    assert_eq!(step_end(&seen, "spin")["status"], "interrupted");

    // A delete ends the second run and removes its session.
    let status = tokio::time::timeout(GUARD, d.delete(&format!("/v1/sessions/{second}")))
        .await
        .expect("the delete did not answer");
    assert_eq!(status, 204, "delete of the session of run {second_run}");
    let (status, _) = d.get(&format!("/v1/sessions/{second}")).await;
    assert_eq!(status, 404);
    healthy(&d).await;

    // SIGTERM ends the daemon though the renders' threads have fuel left.
    let pid = d.child.id().to_string();
    let (exited, exit) = std::sync::mpsc::channel();
    let mut child = std::mem::replace(
        &mut d.child,
        std::process::Command::new("true").spawn().unwrap(),
    );
    std::thread::spawn(move || {
        let _ = exited.send(child.wait());
    });
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    let status = exit.recv_timeout(GUARD);
    if status.is_err() {
        std::process::Command::new("kill")
            .args(["-KILL", &pid])
            .status()
            .unwrap();
        panic!("SIGTERM did not end the daemon");
    }
}

#[tokio::test]
async fn an_output_over_the_limit_is_cut_with_a_note_and_a_render_over_it_fails_its_step() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, with_workflows("max_output_bytes = 4096"));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("big.txt"), "line of text\n".repeat(2000)).unwrap();
    create(
        &d,
        json!({"name": "big", "projectPath": dir.path().display().to_string(),
        "permissionMode": "bypassPermissions",
        "steps": [
          {"id": "read", "tool": "read_file", "arguments": {"path": "big.txt"}},
          {"id": "write", "tool": "write_file",
           "arguments": {"path": "out.txt", "content": "{{ 'y' * 5000 }}"}}
        ]}),
    )
    .await;
    let (sid, run) = start(&d, "big", json!({})).await;
    let evs = d.all_events_until_complete_of(&sid, &run).await;
    // The tool's 26000 bytes, cut to the limit with a note (in the event and the next steps).
    let read = step_end(&evs, "read");
    assert_eq!(read["status"], "success", "{read}");
    let output = read["output"].as_str().unwrap();
    assert!(output.len() <= 4096, "{} bytes", output.len());
    assert!(output.contains("output cut"), "{output}");
    // The stored event replayed from the log: its output as cut, the event near that size.
    let replayed = d.all_events_until_complete_of(&sid, &run).await;
    let stored = step_end(&replayed, "read");
    assert_eq!(stored["output"], read["output"]);
    assert!(
        stored.to_string().len() < 2 * 4096,
        "{} bytes",
        stored.to_string().len()
    );
    // A template that would write more than the limit fails its step; nothing is written.
    let write = step_end(&evs, "write");
    assert_eq!(write["status"], "error", "{write}");
    assert!(
        write["error"]
            .as_str()
            .unwrap()
            .contains("over the limit of 4096 bytes"),
        "{write}"
    );
    assert_eq!(complete(&evs), "error");
    assert!(!dir.path().join("out.txt").exists());
}

/// A render that writes on without end, with fuel for hours: the output bound stops it (the
/// daemon under its address-space limit stays up), the step fails naming the limit.
#[tokio::test]
async fn a_render_that_writes_without_end_stops_at_the_output_bound() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, with_workflows("template_fuel = 100000000000000"));
    let dir = tempfile::tempdir().unwrap();
    create(
        &d,
        json!({"name": "flood", "projectPath": dir.path().display().to_string(),
        "permissionMode": "bypassPermissions",
        "steps": [{"id": "write", "tool": "write_file", "arguments": {"path": "out.txt",
            "content": "{% for a in 'x' * 50000 %}{% for b in 'x' * 50000 %}\
                        0123456789abcdef{% endfor %}{% endfor %}"}}]}),
    )
    .await;
    let (sid, run) = start(&d, "flood", json!({})).await;
    let evs = tokio::time::timeout(GUARD, d.all_events_until_complete_of(&sid, &run))
        .await
        .expect("the run did not end");
    let write = step_end(&evs, "write");
    assert_eq!(write["status"], "error", "{write}");
    assert!(
        write["error"]
            .as_str()
            .unwrap()
            .contains("over the limit of 1048576 bytes"),
        "{write}"
    );
    assert_eq!(complete(&evs), "error");
    assert!(!dir.path().join("out.txt").exists());
    healthy(&d).await;
}

#[tokio::test]
async fn a_string_built_from_literals_past_the_bound_is_refused_at_create() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    for (template, field) in [
        (
            "{% for a in 'x' * 100 %}{{ 'x' * 100000000 }}{% endfor %}",
            "steps[0] (a).if",
        ),
        (
            "{% if inputs.n > ('ab' * 1000) * 1000 %}true{% endif %}",
            "steps[0] (a).if",
        ),
    ] {
        let (status, e) = d
            .post(
                "/v1/workflows",
                json!({"name": "hostile", "inputs": {"n": {"type": "integer", "default": 1}},
                       "steps": [{"id": "a", "if": template}]}),
            )
            .await;
        assert_eq!(status, 422, "{template}: {e}");
        let message = e["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("{field}: builds a string of")),
            "{message}"
        );
    }
    let (status, list) = d.get("/v1/workflows").await;
    assert_eq!(status, 200);
    assert_eq!(list["workflows"], json!([]), "nothing was stored");
}

#[tokio::test]
async fn a_schedule_that_never_fires_is_refused_at_create() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    for cron in ["0 0 0 31 2 *", "0 0 30 2 *"] {
        let (status, e) = d
            .post(
                "/v1/workflows",
                json!({"name": "never", "schedule": {"cron": cron},
                       "steps": [{"id": "a", "tool": "glob", "arguments": {"pattern": "*"}}]}),
            )
            .await;
        assert_eq!(status, 422, "{cron}: {e}");
        assert_eq!(
            e["error"]["message"],
            format!("schedule.cron: '{cron}' has no fire time in the next 10 years"),
            "{e}"
        );
    }
    // Once in four years (29 February) is a schedule.
    create(
        &d,
        json!({"name": "leap", "schedule": {"cron": "0 0 0 29 2 *"},
               "steps": [{"id": "a", "tool": "glob", "arguments": {"pattern": "*"}}]}),
    )
    .await;
}

#[tokio::test]
async fn shell_quote_makes_an_injected_value_one_inert_word() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let dir = tempfile::tempdir().unwrap();
    create(
        &d,
        json!({"name": "echo", "projectPath": dir.path().display().to_string(),
         "permissionMode": "bypassPermissions",
         "inputs": {"payload": {"type": "string"}},
         "steps": [{"id": "say", "tool": "shell",
                    "arguments": {"command": "printf '%s' {{ inputs.payload | shell_quote }} > said.txt"}}]}),
    )
    .await;
    let payload = "x'; touch pwned; echo '$(touch pwned2) `touch pwned3` \"; touch pwned4";
    let (sid, run) = start(&d, "echo", json!({"payload": payload})).await;
    let evs = d.all_events_until_complete_of(&sid, &run).await;
    assert_eq!(complete(&evs), "stop", "{:?}", step_end(&evs, "say"));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("said.txt")).unwrap(),
        payload,
        "the payload is one word, as sent"
    );
    for file in ["pwned", "pwned2", "pwned3", "pwned4"] {
        assert!(!dir.path().join(file).exists(), "{file} was made");
    }
}

#[tokio::test]
async fn a_runs_body_that_is_an_array_is_refused() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    create(
        &d,
        json!({"name": "w", "steps": [{"id": "a", "tool": "glob", "arguments": {"pattern": "*"}}]}),
    )
    .await;
    let (status, e) = d.post("/v1/workflows/w/runs", json!([])).await;
    assert_eq!(status, 400, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("an object is required"),
        "{e}"
    );
    let (_, sessions) = d.get("/v1/sessions").await;
    assert_eq!(sessions["sessions"], json!([]), "no run was started");
}
