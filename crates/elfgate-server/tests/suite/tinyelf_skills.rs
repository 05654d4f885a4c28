//! Skills: folders with a SKILL.md found in the configured skills_dirs and the project's
//! .elfgate/skills, listed by GET /v1/skills (malformed ones with the reason), offered to the
//! model as a catalogue in the stable prefix, loaded and read through the skill tools.

use crate::common;
use crate::scripted;

use common::types;
use elfgate_mockllm::MockServer;
use scripted::{
    bodies_for, call, daemon_with, ends_by_id, finish_of, of, offered_tools, processing_notes,
    project, run, script, session,
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
