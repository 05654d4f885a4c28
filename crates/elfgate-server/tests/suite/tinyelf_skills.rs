//! Skills: folders with a SKILL.md found in the configured skills_dirs and the project's
//! .elfgate/skills, listed by GET /v1/skills (malformed ones with the reason), offered to the
//! model as a catalogue in the stable prefix, loaded and read through the skill tools.

use crate::common;
use crate::scripted;

use common::types;
use elfgate_mockllm::MockServer;
use scripted::{
    bodies_for, call, daemon_with, ends_by_id, finish_of, of, offered_tools, processing_notes,
    project, resume, run, script, session,
};
use serde_json::{Value, json};
use std::path::Path;

fn skill(root: &Path, dir: &str, skill_md: &str) {
    std::fs::create_dir_all(root.join(dir)).unwrap();
    std::fs::write(root.join(dir).join("SKILL.md"), skill_md).unwrap();
}

fn names(list: &Value) -> Vec<&str> {
    list["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn skills_are_listed_loaded_and_read() {
    let mock = MockServer::start().await.unwrap();
    let skills = tempfile::tempdir().unwrap();
    skill(
        skills.path(),
        "pdf",
        "---\nname: pdf-forms\ndescription: Fill PDF forms\n---\nUse the guide in forms/guide.txt.\n",
    );
    std::fs::create_dir_all(skills.path().join("pdf/forms")).unwrap();
    std::fs::write(
        skills.path().join("pdf/forms/guide.txt"),
        "Field 1 is the name.",
    )
    .unwrap();
    skill(
        skills.path(),
        "broken",
        "---\nname: broken\n---\nno description\n",
    );
    let d = daemon_with(
        &mock,
        &format!(
            "[engines.tinyelf]\nskills_dirs = [\"{}\"]\n",
            skills.path().display()
        ),
    );
    let dir = project();
    skill(
        &dir.join(".elfgate/skills"),
        "deploy",
        "---\nname: deploy\ndescription: 'Ship it'\n---\nRun make deploy.\n",
    );

    // The configured skills; the malformed one is reported with its reason.
    let (st, list) = d.get("/v1/skills").await;
    assert_eq!(st, 200, "{list}");
    assert_eq!(names(&list), ["pdf-forms"]);
    assert_eq!(list["skills"][0]["description"], "Fill PDF forms");
    assert_eq!(list["skills"][0]["source"], "config");
    let problems = list["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{list}");
    assert!(problems[0]["path"].as_str().unwrap().ends_with("broken"));
    assert!(
        problems[0]["reason"]
            .as_str()
            .unwrap()
            .contains("no description")
    );
    // With a project, its skills too.
    let q = format!("/v1/skills?projectPath={}", dir.display());
    let (st, list) = d.get(&q).await;
    assert_eq!(st, 200);
    assert_eq!(names(&list), ["deploy", "pdf-forms"]);
    assert_eq!(list["skills"][0]["source"], "project");
    let (st, e) = d.get("/v1/skills?projectPath=/no/such/dir").await;
    assert_eq!(st, 422, "{e}");
    assert!(e.to_string().contains("projectPath"), "{e}");

    // The model loads a skill, reads its file, and cannot leave the skill's folder.
    let model = "mock:script=skills";
    script(
        &mock,
        "skills",
        json!([
            {"toolCalls": [call("l1", "load_skill", json!({"name": "pdf-forms"}))]},
            {"toolCalls": [
                call("r1", "read_skill_file", json!({"name": "pdf-forms", "path": "forms/guide.txt"})),
                call("r2", "read_skill_file", json!({"name": "pdf-forms", "path": "../broken/SKILL.md"})),
                call("r3", "load_skill", json!({"name": "nope"}))
            ]},
            {"text": "Done."}
        ]),
    );
    let (_, _, evs) = run(&d, session("fill the form", model, &dir, json!({}))).await;
    assert_eq!(finish_of(&evs), "stop", "{:?}", types(&evs));
    let init = of(&evs, "init")[0];
    let tools = init.data["systemInfo"]["tools"].as_array().unwrap();
    assert!(tools.contains(&json!("load_skill")) && tools.contains(&json!("read_skill_file")));
    let ends = ends_by_id(&evs);
    let (status, loaded) = &ends["l1"];
    assert_eq!(status, "success");
    assert!(
        loaded.contains("Use the guide in forms/guide.txt."),
        "{loaded}"
    );
    assert!(loaded.contains("forms/guide.txt]"), "{loaded}");
    assert_eq!(
        ends["r1"],
        ("success".into(), "Field 1 is the name.".into())
    );
    assert_ne!(ends["r2"].0, "success");
    assert!(ends["r2"].1.contains("outside"), "{:?}", ends["r2"]);
    assert_eq!(ends["r3"].0, "error");
    assert!(
        ends["r3"].1.contains("deploy, pdf-forms"),
        "{:?}",
        ends["r3"]
    );
    let notes = processing_notes(&evs);
    assert!(
        notes
            .iter()
            .any(|m| m.contains("broken left out") && m.contains("no description")),
        "{notes:?}"
    );

    // The catalogue is in the system prompt, which loading a skill did not change.
    let bodies = bodies_for(&mock, model);
    assert_eq!(bodies.len(), 3);
    let system = bodies[0]["messages"][0]["content"].as_str().unwrap();
    let catalogue = system
        .find("- deploy: Ship it\n- pdf-forms: Fill PDF forms")
        .unwrap();
    assert!(catalogue < system.find("Date: ").unwrap(), "{system}");
    for b in &bodies[1..] {
        assert_eq!(b["messages"][0], bodies[0]["messages"][0]);
    }
    // The instructions reached the model as the tool result.
    let last = bodies[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "tool");
    assert!(last["content"].as_str().unwrap().contains("Use the guide"));
}

/// An agent profile (`[agents.NAME]`, a session's `agentId`) gives the session its system
/// prompt, model, permission mode, tools, skills and engineConfig wherever the request is
/// silent; the request's own fields win; an unknown id is 422 naming the profiles.
#[tokio::test]
async fn agent_profiles_set_what_the_request_leaves_out() {
    let mock = MockServer::start().await.unwrap();
    let skills = tempfile::tempdir().unwrap();
    skill(
        skills.path(),
        "review",
        "---\nname: review\ndescription: How to review a change\n---\nRead the diff first.\n",
    );
    skill(
        skills.path(),
        "deploy",
        "---\nname: deploy\ndescription: How to deploy\n---\nNever on Fridays.\n",
    );
    let d = daemon_with(
        &mock,
        &format!(
            "[engines.tinyelf]\nskills_dirs = [\"{}\"]\n\n\
             [agents.reviewer]\nsystem_prompt = \"You are the reviewer.\"\n\
             model = \"mock:script=prof\"\npermission_mode = \"plan\"\n\
             tools = [\"read_file\", \"list_dir\"]\nskills = [\"review\"]\n\
             engine_config = {{ maxIterations = 3 }}\n",
            skills.path().display()
        ),
    );
    let dir = project();
    script(&mock, "prof", json!([{"text": "one"}, {"text": "two"}]));
    let body = json!({"engine": "tinyelf", "prompt": "review it", "agentId": "reviewer",
                      "projectPath": dir.display().to_string()});
    let (sid, run) = d.create(body.clone()).await;
    let evs = d.all_events_until_complete_of(&sid, &run).await;
    assert_eq!(evs.last().unwrap().data["finishReason"], "stop");
    let sent = &bodies_for(&mock, "mock:script=prof")[0];
    let system = sent["messages"][0]["content"].to_string();
    assert!(system.contains("You are the reviewer."), "{system}");
    assert!(system.contains("review"), "{system}");
    assert!(!system.contains("How to deploy"), "{system}");
    let mut tools = offered_tools(sent);
    tools.retain(|t| !t.contains("skill"));
    assert_eq!(tools, ["list_dir", "read_file"]);
    let (_, s) = d.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(s["agentId"], "reviewer", "{s}");
    assert_eq!(s["permissionMode"], "plan", "{s}");
    assert_eq!(s["engineConfig"]["maxIterations"], 3, "{s}");
    let init = evs.iter().find(|e| e.event == "init").unwrap();
    assert_eq!(init.data["systemInfo"]["maxIterations"], 3);

    // The request's own fields win over the profile's, key by key.
    let mut own = body.clone();
    own["systemPrompt"] = json!("Mine.");
    own["permissionMode"] = json!("default");
    own["engineConfig"] = json!({"maxIterations": 5});
    let (sid, run) = d.create(own).await;
    d.all_events_until_complete_of(&sid, &run).await;
    let sent = &bodies_for(&mock, "mock:script=prof")[1];
    let system = sent["messages"][0]["content"].to_string();
    assert!(system.contains("Mine."), "{system}");
    assert!(!system.contains("You are the reviewer."), "{system}");
    let (_, s) = d.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(s["permissionMode"], "default", "{s}");
    assert_eq!(s["engineConfig"]["maxIterations"], 5, "{s}");
    assert_eq!(
        s["engineConfig"]["enabledTools"],
        json!(["read_file", "list_dir"])
    );

    // Older key names meet the profile's current ones and still win, key by key.
    let mut older = body.clone();
    older["engineConfig"] = json!({"maxTurns": 2, "tools": ["grep"]});
    let (sid, run) = d.create(older).await;
    d.all_events_until_complete_of(&sid, &run).await;
    let (_, s) = d.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(s["engineConfig"]["maxIterations"], 2, "{s}");
    assert_eq!(s["engineConfig"]["enabledTools"], json!(["grep"]), "{s}");
    assert_eq!(s["engineConfig"]["skills"], json!(["review"]), "{s}");

    let mut unknown = body;
    unknown["agentId"] = json!("nobody");
    let (status, v) = d.post("/v1/sessions", unknown).await;
    assert_eq!(status, 422, "{v}");
    assert!(
        v.to_string()
            .contains("agentId: no agent profile 'nobody' is configured (have: reviewer)"),
        "{v}"
    );
}

/// The skill router: before each turn the skills are scored on their triggers against the
/// prompt; the active ones are announced, their instructions are in the dynamic tail (after the
/// stable prefix, which stays byte-identical), and when each declares its tools the model is
/// offered only those (and the skill tools). A later turn routes anew; the count caps the set.
#[tokio::test]
async fn the_skill_router_activates_skills_by_trigger_and_narrows_tools() {
    let mock = MockServer::start().await.unwrap();
    let skills = tempfile::tempdir().unwrap();
    skill(
        skills.path(),
        "pdf",
        "---\nname: pdf\ndescription: Fill PDF forms\ntriggers:\n  keywords: [pdf, fill form]\n  files: ['*.pdf']\ntools: [read_file, glob]\n---\nPDF-STEPS: read the form first.\n",
    );
    skill(
        skills.path(),
        "deploy",
        "---\nname: deploy\ndescription: Ship a release\ntriggers: [deploy, release]\n---\nDEPLOY-STEPS: never on Fridays.\n",
    );
    skill(
        skills.path(),
        "quiet",
        "---\nname: quiet\ndescription: Loaded by the model only\n---\nQUIET-STEPS\n",
    );
    skill(
        skills.path(),
        "bad",
        "---\nname: bad\ndescription: d\ntriggers:\n  patterns: ['(']\n---\nx\n",
    );
    let toml = format!(
        "[engines.tinyelf]\nskills_dirs = [\"{}\"]\n",
        skills.path().display()
    );
    let d = daemon_with(&mock, &toml);
    let dir = project();
    let model = "mock:script=router";
    script(
        &mock,
        "router",
        json!([{"text": "Filled."}, {"text": "Shipped."}, {"text": "Hi."}]),
    );

    // GET /v1/skills shows the triggers and tools; a pattern that does not compile is a problem.
    let (_, list) = d.get("/v1/skills").await;
    assert_eq!(names(&list), ["deploy", "pdf", "quiet"], "{list}");
    assert_eq!(list["skills"][1]["triggers"]["files"], json!(["*.pdf"]));
    assert_eq!(list["skills"][1]["tools"], json!(["read_file", "glob"]));
    assert!(
        list["problems"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("triggers.patterns"),
        "{list}"
    );

    // Turn 1 meets pdf's triggers: announced, in the tail, and the tools narrowed.
    let (sid, _, evs) = run(
        &d,
        session("Please fill in form.pdf for me", model, &dir, json!({})),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop");
    let notes = processing_notes(&evs);
    assert!(
        notes
            .iter()
            .any(|m| m.starts_with("skills active: pdf (score 3: ")
                && m.contains("keyword \"pdf\"")
                && m.contains("file \"*.pdf\"")),
        "{notes:?}"
    );
    let init = of(&evs, "init")[0];
    assert_eq!(
        init.data["systemInfo"]["tools"],
        json!(["glob", "load_skill", "read_file", "read_skill_file"])
    );
    let bodies = bodies_for(&mock, model);
    assert_eq!(
        offered_tools(&bodies[0]),
        ["glob", "load_skill", "read_file", "read_skill_file"]
    );
    let system1 = bodies[0]["messages"][0]["content"].as_str().unwrap();
    let tail = system1.find("Date: ").unwrap();
    let steps = system1.find("PDF-STEPS: read the form first.").unwrap();
    assert!(steps > tail, "{system1}");
    assert!(system1[tail..].contains("Active skills:"), "{system1}");
    assert!(!system1.contains("DEPLOY-STEPS") && !system1.contains("QUIET-STEPS"));

    // Turn 2 meets deploy's, which declares no tools: nothing narrowed; pdf is no longer there.
    let (_, evs) = resume(&d, &sid, json!({"prompt": "now deploy the release"})).await;
    assert_eq!(finish_of(&evs), "stop");
    let notes = processing_notes(&evs);
    assert!(
        notes
            .iter()
            .any(|m| m.starts_with("skills active: deploy (score 2: ")),
        "{notes:?}"
    );
    let bodies = bodies_for(&mock, model);
    let offered = offered_tools(&bodies[1]);
    assert!(
        offered.contains(&"shell") && offered.contains(&"write_file"),
        "{offered:?}"
    );
    let system2 = bodies[1]["messages"][0]["content"].as_str().unwrap();
    assert!(system2.contains("DEPLOY-STEPS") && !system2.contains("PDF-STEPS"));
    // The stable prefix (everything before the project context and the tail) did not change.
    let prefix = &system1[..system1.find("\n\nDate: ").unwrap()];
    assert!(system2.starts_with(prefix));

    // Turn 3 meets nothing: no note, every tool, no active skills.
    let (run3, evs) = resume(&d, &sid, json!({"prompt": "hello"})).await;
    let evs: Vec<_> = evs
        .into_iter()
        .filter(|e| e.data["runId"] == run3.as_str())
        .collect();
    assert_eq!(finish_of(&evs), "stop");
    assert!(
        !processing_notes(&evs)
            .iter()
            .any(|m| m.starts_with("skills active")),
    );
    let bodies = bodies_for(&mock, model);
    assert!(
        !bodies[2]["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("Active skills")
    );

    // With max_active_skills = 1, a prompt meeting both keeps the best and reports the other.
    let d1 = daemon_with(&mock, &format!("{toml}max_active_skills = 1\n"));
    script(&mock, "router1", json!([{"text": "ok"}]));
    let (_, _, evs) = run(
        &d1,
        session("deploy a.pdf", "mock:script=router1", &dir, json!({})),
    )
    .await;
    let notes = processing_notes(&evs);
    assert!(
        notes
            .iter()
            .any(|m| m.starts_with("skills active: pdf (score 3")
                && m.contains("left out by the budget")
                && m.contains("deploy (score 1")),
        "{notes:?}"
    );
}
