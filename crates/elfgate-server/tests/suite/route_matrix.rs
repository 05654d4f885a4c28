//! The route matrix: every operation of the OpenAPI document declares who may call it
//! (`x-elfgate-authorization`), and each holds to its rule for four principals (the root key, a
//! member and a viewer of team A, a member of team B), on a session of each visibility (both owned
//! by team A's member) and on team A's workflow. What is checked is the authorization outcome:
//! answered as missing (404, worded exactly as for an id that does not exist), refused (403), or
//! let through (any other answer: the dummy bodies may well be refused for what they say).

use crate::common;

use common::{Daemon, Opts, chat};
use elfgate_mockllm::MockServer;
use elfgate_test_support::keys::key_body;
use reqwest::Method;
use serde_json::{Value, json};

/// What a principal's request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Answered as if what it named did not exist (404).
    Hidden,
    /// Refused (403).
    Refused,
    /// Neither: the route let it through.
    Through,
}

/// One of the four principals.
struct Who {
    name: &'static str,
    /// None: the daemon's root token.
    key: Option<String>,
    role: &'static str,
    team: &'static str,
}

/// What the routes name: team A's member's session and its first run, team A's workflow and one
/// of its runs.
struct Fixtures {
    session: String,
    run: String,
    workflow: String,
    workflow_run: String,
}

fn workflow_def(name: &str) -> Value {
    json!({"name": name, "steps": [
        {"id": "talk", "model": {"model": "mock:tokens=2", "prompt": "Hi."}}
    ]})
}

/// Team A's member's session of `visibility` (its first run ended), and a workflow of team A
/// with one run that ended well.
async fn fixtures(d: &Daemon, alice: &str, visibility: &str, tag: &str) -> Fixtures {
    let alice = d.as_key(alice);
    let mut body = chat("hi", "mock:tokens=2");
    body["visibility"] = json!(visibility);
    let (session, run) = alice.create(body).await;
    d.all_events_until_complete_of(&session, &run).await;
    let workflow = format!("team-a-{tag}");
    let (s, w) = alice.post("/v1/workflows", workflow_def(&workflow)).await;
    assert_eq!(s, 201, "{w}");
    let (s, started) = alice
        .post(&format!("/v1/workflows/{workflow}/runs"), json!({}))
        .await;
    assert_eq!(s, 201, "{started}");
    let wf_session = started["sessionId"].as_str().unwrap().to_string();
    let workflow_run = started["runId"].as_str().unwrap().to_string();
    d.all_events_until_complete_of(&wf_session, &workflow_run)
        .await;
    Fixtures {
        session,
        run,
        workflow,
        workflow_run,
    }
}

/// The path with its parameters filled in from `f`.
fn fill(path: &str, f: &Fixtures) -> String {
    let session_route = path.starts_with("/v1/sessions/");
    let name = if session_route {
        "glob"
    } else if path.starts_with("/v1/workflows/") {
        &f.workflow
    } else {
        "no-such-hook"
    };
    path.replace("{id}", if session_route { &f.session } else { "nokey" })
        .replace(
            "{runId}",
            if session_route {
                &f.run
            } else {
                &f.workflow_run
            },
        )
        .replace("{requestId}", "no-such-request")
        .replace("{name}", name)
        .replace("{call}", "mock:generateContent")
}

/// A body the route takes (what it says matters little: the check comes first or regardless).
fn body_for(method: &str, path: &str, f: &Fixtures, who: &Who) -> Option<Value> {
    Some(match (method, path) {
        ("post", "/v1/sessions") => chat("hi", "mock:tokens=2"),
        ("post", "/v1/sessions/{id}/messages") => json!({"prompt": "again", "onBusy": "enqueue"}),
        ("post", "/v1/sessions/{id}/permissions/{requestId}") => json!({"decision": "allow"}),
        ("post", "/v1/sessions/{id}/tools/{name}") => json!({"arguments": {}}),
        ("post", "/v1/workflows") => workflow_def(&format!("made-by-{}", who.name)),
        ("put", "/v1/workflows/{name}") => workflow_def(&f.workflow),
        ("post", "/v1/admin/keys") => key_body("dora", "c", "member"),
        ("patch", "/v1/admin/keys/{id}") => json!({"name": "renamed"}),
        ("post" | "put" | "patch", _) => json!({}),
        _ => return None,
    })
}

/// What the rule says `who` gets on a session of `visibility` (and on team A's workflow).
fn expected(rule: &str, method: &str, path: &str, who: &Who, visibility: &str) -> Outcome {
    let admin = who.role == "admin";
    let viewer = who.role == "viewer";
    let team_a = who.team == "a";
    let owner = who.name == "alice";
    let as_seen = |sees: bool, read_only: bool| match (sees, read_only) {
        (false, _) => Outcome::Hidden,
        (true, true) => Outcome::Refused,
        (true, false) => Outcome::Through,
    };
    match rule {
        "public" | "principal" => Outcome::Through,
        "admin" if admin => Outcome::Through,
        "admin" => Outcome::Refused,
        "session-create" if viewer => Outcome::Refused,
        "session-create" => Outcome::Through,
        "session-read" | "session-steer" => as_seen(
            admin || owner || (visibility == "team" && team_a),
            rule == "session-steer" && viewer,
        ),
        // Creating one names no workflow: nothing to hide.
        "workflow-manage" if method == "post" && path == "/v1/workflows" => as_seen(true, viewer),
        "workflow-read" | "workflow-run" | "workflow-manage" => {
            as_seen(admin || team_a, rule != "workflow-read" && viewer)
        }
        other => panic!("{method} {path}: no expectation for rule '{other}'"),
    }
}

/// Sends the request as `who` and sorts its answer; a stream's body is not read.
async fn outcome(
    d: &Daemon,
    who: &Who,
    method: &str,
    path: &str,
    body: Option<Value>,
    f: &Fixtures,
) -> (Outcome, u16, Value) {
    let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
    let rb = match &who.key {
        Some(k) => d.as_key(k).builder(method, path, body),
        None => d
            .as_key(d.token.as_deref().expect("the daemon's token"))
            .builder(method, path, body),
    };
    let r = rb.send().await.unwrap();
    let status = r.status().as_u16();
    let json = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let v = if json {
        r.json().await.unwrap_or(Value::Null)
    } else {
        Value::Null
    };
    assert_ne!(status, 401, "{} {path}: credentials refused: {v}", who.name);
    let message = v["error"]["message"].as_str().unwrap_or_default();
    // Exactly what an id that does not exist is answered.
    let missing = [
        format!("unknown session '{}'", f.session),
        format!("unknown workflow '{}'", f.workflow),
        format!("workflow '{}' has no run '{}'", f.workflow, f.workflow_run),
    ];
    let sorted = match status {
        403 => Outcome::Refused,
        404 if missing.iter().any(|m| m == message) => Outcome::Hidden,
        _ => Outcome::Through,
    };
    (sorted, status, v)
}

/// Every operation of the document with its rule; fails on one without.
async fn declared_routes(d: &Daemon) -> Vec<(String, String, String)> {
    let (s, doc) = d.get("/openapi.json").await;
    assert_eq!(s, 200, "{doc}");
    let mut routes = Vec::new();
    let mut without = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            match op["x-elfgate-authorization"].as_str() {
                Some(rule) => routes.push((method.clone(), path.clone(), rule.to_string())),
                None => without.push(format!("{method} {path}")),
            }
        }
    }
    assert!(without.is_empty(), "routes without a rule: {without:?}");
    // What changes its target is checked after the rest.
    routes.sort_by_key(|(method, _, _)| method == "delete");
    routes
}

#[tokio::test]
async fn every_route_holds_to_its_rule_for_every_role_and_visibility() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let alice = d.create_key(key_body("alice", "a", "member")).await;
    let principals = [
        Who {
            name: "root",
            key: None,
            role: "admin",
            team: "root",
        },
        Who {
            name: "alice",
            key: Some(alice.clone()),
            role: "member",
            team: "a",
        },
        Who {
            name: "vera",
            key: Some(d.create_key(key_body("vera", "a", "viewer")).await),
            role: "viewer",
            team: "a",
        },
        Who {
            name: "carol",
            key: Some(d.create_key(key_body("carol", "b", "member")).await),
            role: "member",
            team: "b",
        },
    ];
    let routes = declared_routes(&d).await;

    let mut wrong = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let mut made = 0;
    for visibility in ["private", "team"] {
        made += 1;
        let shared = fixtures(&d, &alice, visibility, &format!("{visibility}{made}")).await;
        for (method, path, rule) in &routes {
            // The hook's caller signs with the hook's secret, whatever key it holds (the hooks'
            // own tests); the gateway doors take their own bodies (the gateway's tests).
            if rule == "hook-signature" || (rule == "session-create" && path != "/v1/sessions") {
                continue;
            }
            for who in &principals {
                let fresh;
                // A delete that goes through takes its target along: each principal gets its own.
                let f = if method == "delete" {
                    made += 1;
                    fresh = fixtures(&d, &alice, visibility, &format!("{visibility}{made}")).await;
                    &fresh
                } else {
                    &shared
                };
                let want = expected(rule, method, path, who, visibility);
                let body = body_for(method, path, f, who);
                let (got, status, v) = outcome(&d, who, method, &fill(path, f), body, f).await;
                seen.insert(format!("{got:?}"));
                if got != want {
                    wrong.push(format!(
                        "{method} {path} ({rule}) as {} on a {visibility} session: want \
                         {want:?}, got {status} {v}",
                        who.name
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // Each way a request can end was met: the matrix did not pass by checking nothing.
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        ["Hidden", "Refused", "Through"]
    );
}
