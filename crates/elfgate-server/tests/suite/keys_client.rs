//! The binary's client with keys: `elfgate keys create|list|revoke` (the admin routes, with the
//! daemon's token from the token file as the other commands find it), and a teammate's
//! `ELFGATE_TOKEN=egk_… elfgate chat` and `sessions` with the key it was given.

use crate::common;

use super::terminal_client::run_with_stdin;
use common::{Daemon, Opts};
use elfgate_mockllm::MockServer;
use serde_json::{Value, json};
use std::process::{Command, Output};

/// `elfgate ARGS` against `d` as a user of this machine runs it: the daemon's address in
/// ELFGATE_URL, and the token in ELFGATE_TOKEN when given (else the client reads the daemon's
/// token file, found through the daemon's database URL).
fn elfgate(d: &Daemon, token: Option<&str>, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_elfgate"));
    cmd.args(args);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("ELFGATE_") {
            cmd.env_remove(key);
        }
    }
    cmd.env("ELFGATE_URL", &d.base).env(
        "ELFGATE_DATABASE_URL",
        format!("sqlite://{}", d.dir.join("elfgate.db").display()),
    );
    if let Some(t) = token {
        cmd.env("ELFGATE_TOKEN", t);
    }
    cmd
}

fn out(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// GET /v1/me with `key`.
async fn me(d: &Daemon, key: &str) -> (u16, Value) {
    let r = d
        .anon
        .get(d.url("/v1/me"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// Creates a key with `elfgate keys create ARGS` (the root key from the token file): the key
/// it printed.
pub(crate) async fn create_key(d: &Daemon, args: &[&str]) -> String {
    let mut all = vec!["keys", "create"];
    all.extend_from_slice(args);
    let o = run_with_stdin(elfgate(d, None, &all), "").await;
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let key = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(
        key.starts_with("egk_") && !key.contains('\n'),
        "{}",
        out(&o)
    );
    key
}

#[tokio::test]
async fn keys_create_list_revoke_and_a_teammate_chats_with_the_key() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());

    // The README's two commands: a key for a teammate, and the teammate's chat with it.
    let key = create_key(
        &d,
        &[
            "--user",
            "alice",
            "--team",
            "research",
            "--role",
            "member",
            "--name",
            "alice-laptop",
            "--expires",
            "30d",
        ],
    )
    .await;
    let (status, who) = me(&d, &key).await;
    assert_eq!(status, 200, "{who}");
    assert_eq!(
        (&who["user"], &who["team"], &who["role"]),
        (&json!("alice"), &json!("research"), &json!("member"))
    );
    let chat = run_with_stdin(
        elfgate(&d, Some(&key), &["chat", "--model", "mock/mock:echo=1"]),
        "hello from alice\n",
    )
    .await;
    assert_eq!(chat.status.code(), Some(0), "{}", out(&chat));
    assert!(
        out(&chat).contains("You said: hello from alice"),
        "{}",
        out(&chat)
    );
    // Alice's session is alice's.
    let sessions = run_with_stdin(elfgate(&d, Some(&key), &["sessions", "--json"]), "").await;
    assert_eq!(sessions.status.code(), Some(0), "{}", out(&sessions));
    let listed: Vec<Value> = String::from_utf8_lossy(&sessions.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(listed.len(), 1, "{listed:?}");
    let sid = listed[0]["id"].as_str().unwrap().to_string();

    // A viewer of the team lists alice's session and reads it, and its prompt is refused with
    // the daemon's 403 (exit 1), not taken for a refused token.
    let viewer = create_key(
        &d,
        &["--user", "victor", "--team", "research", "--role", "viewer"],
    )
    .await;
    let seen = run_with_stdin(elfgate(&d, Some(&viewer), &["sessions"]), "").await;
    assert_eq!(seen.status.code(), Some(0), "{}", out(&seen));
    assert!(out(&seen).contains(&sid), "{}", out(&seen));
    let shown = run_with_stdin(elfgate(&d, Some(&viewer), &["show", &sid]), "").await;
    assert!(out(&shown).contains("hello from alice"), "{}", out(&shown));
    let steer = run_with_stdin(
        elfgate(&d, Some(&viewer), &["chat", "--session", &sid]),
        "may I?\n",
    )
    .await;
    assert_eq!(steer.status.code(), Some(1), "{}", out(&steer));
    assert!(out(&steer).contains("403"), "{}", out(&steer));

    // The list shows the key without its secret.
    let list = run_with_stdin(elfgate(&d, None, &["keys", "list"]), "").await;
    assert_eq!(list.status.code(), Some(0), "{}", out(&list));
    let table = String::from_utf8_lossy(&list.stdout).into_owned();
    assert!(table.starts_with("ID "), "{table}");
    assert!(
        table.contains("alice-laptop") && table.contains("research"),
        "{table}"
    );
    // The secret is everything after `egk_<id>_`; it may itself hold `_` (base64url).
    let secret = key.splitn(3, '_').nth(2).unwrap();
    assert!(secret.len() >= 43, "{key}");
    assert!(!out(&list).contains(secret), "{table}");
    let json_list = run_with_stdin(elfgate(&d, None, &["keys", "list", "--json"]), "").await;
    let rows: Vec<Value> = String::from_utf8_lossy(&json_list.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!out(&json_list).contains(secret));
    let id = rows
        .iter()
        .find(|r| r["name"] == "alice-laptop")
        .and_then(|r| r["id"].as_str())
        .unwrap_or_else(|| panic!("{rows:?}"))
        .to_string();
    assert!(key.contains(&id), "the key's public id is in the key: {id}");

    // A key for a role that does not exist: the daemon's refusal, exit 1.
    let bad = run_with_stdin(
        elfgate(
            &d,
            None,
            &[
                "keys", "create", "--user", "bob", "--team", "research", "--role", "owner",
            ],
        ),
        "",
    )
    .await;
    assert_eq!(bad.status.code(), Some(1), "{}", out(&bad));
    assert!(out(&bad).contains("role"), "{}", out(&bad));
    // A member's key cannot manage keys.
    let refused = run_with_stdin(elfgate(&d, Some(&key), &["keys", "list"]), "").await;
    assert_ne!(refused.status.code(), Some(0), "{}", out(&refused));

    // Revoked: the key stops working.
    let revoke = run_with_stdin(elfgate(&d, None, &["keys", "revoke", &id]), "").await;
    assert_eq!(revoke.status.code(), Some(0), "{}", out(&revoke));
    assert_eq!(me(&d, &key).await.0, 401);
    let chat = run_with_stdin(
        elfgate(&d, Some(&key), &["chat", "--model", "mock/mock:echo=1"]),
        "still there?\n",
    )
    .await;
    assert_eq!(chat.status.code(), Some(3), "{}", out(&chat));
}
