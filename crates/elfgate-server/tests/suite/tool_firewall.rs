//! The firewall as the model meets it through the file tools: walkers (grep, glob, list_dir) never
//! show what read_file would refuse, and hard-linked files are neither read nor written.

use crate::common;
use crate::scripted;

use common::{Daemon, Ev, Opts};
use elfgate_mockllm::MockServer;
use scripted::{call, ends_by_id, finish_of, run, script, session};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

const MARKER: &str = "SECRET-MARKER-31337";
/// Matches MARKER without containing it, so that tool inputs do not carry the marker themselves.
const MARKER_RE: &str = "SECRET-MARKER-[0-9]+";

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Every event's JSON, the mock's recorded requests and the stored messages, as one text.
async fn everything_seen(d: &Daemon, mock: &MockServer, sid: &str, evs: &[Ev]) -> String {
    let mut all: Vec<String> = evs.iter().map(|e| e.data.to_string()).collect();
    all.extend(mock.requests().into_iter().map(|r| r.body.to_string()));
    let (s, msgs) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    assert_eq!(s, 200);
    all.push(msgs.to_string());
    all.join("\n")
}

/// The paths a walker's result names, joined to the directory they are relative to.
fn result_paths(tool: &str, base: &Path, content: &str) -> Vec<PathBuf> {
    if content == "no matches" {
        return Vec::new();
    }
    content
        .lines()
        .map(|l| match tool {
            // path:line: text
            "grep" => l.split_once(':').unwrap().0,
            "list_dir" => l.trim_end_matches('/'),
            _ => l,
        })
        .map(|p| base.join(p))
        .collect()
}

#[tokio::test]
async fn walkers_skip_deny_zones_the_data_dir_and_symlinks_out_of_the_project() {
    let mock = MockServer::start().await.unwrap();
    // The project holds the daemon's data directory (database, WAL, config) one level down.
    let project = std::fs::canonicalize(tempfile::tempdir().unwrap().keep()).unwrap();
    let data = project.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let denied = project.join("denied");
    write(&project.join("a.txt"), "hello\n");
    write(&project.join("sub/notes.toml"), "[x]\nkey = 1\n");
    write(&denied.join("keys.txt"), &format!("{MARKER}\n"));
    write(
        &denied.join("inner/more.toml"),
        &format!("k = \"{MARKER}\"\n"),
    );
    let outside = std::fs::canonicalize(tempfile::tempdir().unwrap().keep()).unwrap();
    write(&outside.join("secret.txt"), &format!("{MARKER}\n"));
    write(&outside.join("conf.toml"), &format!("k = \"{MARKER}\"\n"));
    let link = |target: &Path, name: &str| std::os::unix::fs::symlink(target, project.join(name));
    link(&outside, "link-out").unwrap();
    link(&outside.join("secret.txt"), "link-out-file").unwrap();
    link(&denied.join("keys.txt"), "link-zone").unwrap();
    link(&data, "link-data").unwrap();
    link(&project.join("a.txt"), "link-inside").unwrap();

    let d = Daemon::start_in(
        data.clone(),
        &mock,
        Opts {
            extra_toml: format!(
                "[engines.tinyelf]\ndeny_paths = [\"{}\"]\n",
                denied.display()
            ),
            ..Opts::default()
        },
    );
    // Walker calls and where their result paths are relative to.
    let walkers: Vec<(&str, &str, Value, PathBuf)> = vec![
        ("g1", "grep", json!({"pattern": MARKER_RE}), project.clone()),
        (
            "g2",
            "grep",
            json!({"pattern": ".", "glob": "*.toml"}),
            project.clone(),
        ),
        ("g3", "grep", json!({"pattern": "."}), project.clone()),
        ("l1", "glob", json!({"pattern": "**"}), project.clone()),
        (
            "l2",
            "glob",
            json!({"pattern": "**/*.toml"}),
            project.clone(),
        ),
        (
            "l3",
            "glob",
            json!({"pattern": "*", "path": "sub"}),
            project.join("sub"),
        ),
        ("d1", "list_dir", json!({}), project.clone()),
        (
            "d2",
            "list_dir",
            json!({"path": "sub"}),
            project.join("sub"),
        ),
    ];
    let mut calls: Vec<Value> = walkers
        .iter()
        .map(|(id, tool, args, _)| call(id, tool, args.clone()))
        .collect();
    // Aiming a tool straight at a refused place is denied, as before.
    let refused = [
        ("r1", "read_file", json!({"path": "denied/keys.txt"})),
        (
            "r2",
            "grep",
            json!({"pattern": MARKER_RE, "path": "denied"}),
        ),
        ("r3", "list_dir", json!({"path": "link-out"})),
        ("r4", "glob", json!({"pattern": "*", "path": "data"})),
    ];
    calls.extend(refused.iter().map(|(id, t, a)| call(id, t, a.clone())));
    script(
        &mock,
        "walk",
        json!([{"toolCalls": calls}, {"text": "done"}]),
    );

    let (sid, _, evs) = run(
        &d,
        session("look around", "mock:script=walk", &project, json!({})),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop");
    let ends = ends_by_id(&evs);
    assert_eq!(ends.len(), walkers.len() + refused.len(), "{ends:?}");

    for (id, tool, _, base) in &walkers {
        let (status, content) = &ends[*id];
        assert_eq!(status, "success", "{id}: {content}");
        for p in result_paths(tool, base, content) {
            let resolved = std::fs::canonicalize(&p)
                .unwrap_or_else(|e| panic!("{id} named {}: {e}", p.display()));
            assert!(
                resolved.starts_with(&project)
                    && !resolved.starts_with(&denied)
                    && !resolved.starts_with(&data),
                "{id} ({tool}) named {} which leads to {}:\n{content}",
                p.display(),
                resolved.display()
            );
        }
        assert!(
            !content.contains("elfgate."),
            "{id} shows the data dir:\n{content}"
        );
    }
    // The walkers did walk: what is allowed is there.
    assert_eq!(ends["g1"].1, "no matches");
    assert_eq!(
        ends["g2"].1,
        "sub/notes.toml:1: [x]\nsub/notes.toml:2: key = 1"
    );
    for want in ["a.txt", "sub", "sub/notes.toml", "link-inside"] {
        assert!(
            ends["l1"].1.lines().any(|l| l == want),
            "{want}:\n{}",
            ends["l1"].1
        );
    }
    assert_eq!(ends["l2"].1, "sub/notes.toml");
    assert_eq!(ends["l3"].1, "notes.toml");
    assert_eq!(ends["d1"].1, "a.txt\nlink-inside\nsub/");
    assert_eq!(ends["d2"].1, "notes.toml");
    for (id, _, _) in &refused {
        let (status, content) = &ends[*id];
        assert_eq!(status, "denied", "{id}: {content}");
        assert!(content.contains("firewall"), "{id}: {content}");
    }

    let seen = everything_seen(&d, &mock, &sid, &evs).await;
    assert!(!seen.contains(MARKER), "the marker leaked");
}

#[tokio::test]
async fn hard_linked_files_are_neither_read_nor_written() {
    const LINKED: &str = "HARDLINK-MARKER-4242";
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let project = std::fs::canonicalize(tempfile::tempdir().unwrap().keep()).unwrap();
    let outside = std::fs::canonicalize(tempfile::tempdir().unwrap().keep()).unwrap();
    let original = format!("{LINKED} original\n");
    write(&outside.join("creds.txt"), &original);
    std::fs::hard_link(outside.join("creds.txt"), project.join("creds.txt")).unwrap();
    write(&project.join("plain.txt"), "plain\n");
    write(&project.join("other.txt"), "other\n");

    script(
        &mock,
        "links",
        json!([{"toolCalls": [
            call("h1", "read_file", json!({"path": "creds.txt"})),
            call("h2", "write_file", json!({"path": "creds.txt", "content": "overwritten"})),
            call("h3", "edit_file", json!({"path": "creds.txt", "old_string": "original", "new_string": "changed"})),
            call("h4", "grep", json!({"pattern": "HARDLINK-MARKER-[0-9]+"})),
            call("h5", "read_file", json!({"path": "plain.txt"})),
            call("h6", "write_file", json!({"path": "other.txt", "content": "new\n"})),
            call("h7", "glob", json!({"pattern": "*.txt"}))
        ]}, {"text": "done"}]),
    );
    let (sid, _, evs) = run(
        &d,
        session(
            "links",
            "mock:script=links",
            &project,
            json!({"permissionMode": "bypassPermissions"}),
        ),
    )
    .await;
    assert_eq!(finish_of(&evs), "stop");
    let e = ends_by_id(&evs);
    for id in ["h1", "h2", "h3"] {
        assert_eq!(e[id].0, "denied", "{id}: {}", e[id].1);
        assert!(e[id].1.contains("2 hard links"), "{id}: {}", e[id].1);
    }
    assert_eq!(e["h4"], ("success".to_string(), "no matches".to_string()));
    // Files with one link work as before, and a hard link's name is no secret.
    assert_eq!(e["h5"], ("success".to_string(), "plain\n".to_string()));
    assert_eq!(e["h6"].0, "success", "{}", e["h6"].1);
    assert_eq!(
        e["h7"],
        (
            "success".to_string(),
            "creds.txt\nother.txt\nplain.txt".to_string()
        )
    );
    assert_eq!(
        std::fs::read_to_string(project.join("other.txt")).unwrap(),
        "new\n"
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("creds.txt")).unwrap(),
        original
    );
    let seen = everything_seen(&d, &mock, &sid, &evs).await;
    assert!(!seen.contains(LINKED), "the hard-linked file's text leaked");
}
