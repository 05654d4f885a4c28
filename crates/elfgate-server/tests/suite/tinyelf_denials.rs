//! Calls the firewall refuses inside their tool, after the pipeline's gates let them through (a
//! skill's file outside the skill's folder, by `..` or by a symlink): each is a blocked call like
//! any other, in the turn's postTurn `denied` and the session's audit.

use crate::common;
use crate::scripted;

use elfgate_mockllm::MockServer;
use scripted::{call, daemon_with, ends_by_id, finish_of, of, project, run, script, session};
use serde_json::{Value, json};

#[tokio::test]
async fn calls_refused_inside_their_tool_are_in_post_turn_and_the_audit() {
    let mock = MockServer::start().await.unwrap();
    let skills = tempfile::tempdir().unwrap();
    let guide = skills.path().join("guide");
    std::fs::create_dir_all(&guide).unwrap();
    std::fs::write(
        guide.join("SKILL.md"),
        "---\nname: guide\ndescription: A guide\n---\nRead notes.txt.\n",
    )
    .unwrap();
    std::fs::write(skills.path().join("private.txt"), "not the skill's").unwrap();
    std::os::unix::fs::symlink(skills.path().join("private.txt"), guide.join("notes.txt")).unwrap();
    let d = daemon_with(
        &mock,
        &format!(
            "[engines.tinyelf]\nskills_dirs = [\"{}\"]\n",
            skills.path().display()
        ),
    );
    let dir = project();
    script(
        &mock,
        "inside",
        json!([
            {"toolCalls": [
                call("s1", "read_skill_file", json!({"name": "guide", "path": "../private.txt"})),
                call("s2", "read_skill_file", json!({"name": "guide", "path": "notes.txt"})),
                call("ok", "read_file", json!({"path": "a.txt"}))
            ]},
            {"text": "done"}
        ]),
    );
    let (sid, _, evs) = run(
        &d,
        session(
            "go",
            "mock:script=inside",
            &dir,
            json!({"permissionMode": "bypassPermissions"}),
        ),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop", "{:?}", common::types(&evs));
    let ends = ends_by_id(&evs);
    for id in ["s1", "s2"] {
        assert_eq!(ends[id].0, "denied", "{id}: {:?}", ends[id]);
        assert!(!ends[id].1.contains("not the skill's"), "{:?}", ends[id]);
    }
    assert_eq!(ends["ok"].0, "success");

    let turn = &of(&evs, "postTurn")[0].data["turn"];
    let denied: Vec<(&str, &str, &str)> = turn["denied"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["toolUseId"].as_str().unwrap(),
                b["toolName"].as_str().unwrap(),
                b["gate"].as_str().unwrap(),
            )
        })
        .collect();
    let mut denied = denied;
    denied.sort();
    assert_eq!(
        denied,
        [
            ("s1", "read_skill_file", "firewall"),
            ("s2", "read_skill_file", "firewall")
        ],
        "{turn}"
    );

    let (status, audit) = d.get(&format!("/v1/sessions/{sid}/audit")).await;
    assert_eq!(status, 200, "{audit}");
    let mut audit: Vec<Value> = audit["audit"].as_array().unwrap().clone();
    audit.sort_by_key(|r| r["toolUseId"].as_str().unwrap().to_string());
    assert_eq!(audit.len(), 2, "{audit:?}");
    for (record, (id, path)) in audit
        .iter()
        .zip([("s1", "../private.txt"), ("s2", "notes.txt")])
    {
        assert_eq!(record["toolUseId"], id, "{record}");
        assert_eq!(record["gate"], "firewall", "{record}");
        assert_eq!(record["input"]["path"], path, "{record}");
        assert!(
            record["reason"].as_str().unwrap().contains("firewall"),
            "{record}"
        );
    }
}
