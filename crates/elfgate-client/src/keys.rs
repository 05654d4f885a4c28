//! `elfgate keys create|list|revoke`: the admin routes `/v1/admin/keys`, with the daemon's token
//! (or any admin's key) as every other client command finds it.

use super::args::{KeyCreateArgs, KeysAction};
use super::commands::{or_dash, table};
use super::conn::{ClientError, Conn};
use super::exit;
use serde_json::{Value, json};

/// Runs a `keys` subcommand.
pub async fn run(conn: &Conn, action: &KeysAction) -> Result<u8, ClientError> {
    match action {
        KeysAction::Create(args) => create(conn, args).await,
        KeysAction::List { json, .. } => list(conn, *json).await,
        KeysAction::Revoke { id, .. } => {
            conn.delete(&format!("/v1/admin/keys/{id}")).await?;
            println!("key {id} revoked");
            Ok(exit::OK)
        }
    }
}

/// Creates the key and prints it alone on stdout (so that `KEY=$(elfgate keys create …)`
/// holds just the key); what it is goes to stderr.
async fn create(conn: &Conn, args: &KeyCreateArgs) -> Result<u8, ClientError> {
    let body = json!({
        "name": args.name.as_deref().unwrap_or(&args.user),
        "user": args.user,
        "team": args.team,
        "role": args.role,
        "expiresAt": args.expires,
        "scopes": args.scopes.clone().unwrap_or_else(|| json!({})),
    });
    let created: Value = conn.post("/v1/admin/keys", &body).await?;
    if args.json {
        println!("{created}");
        return Ok(exit::OK);
    }
    let Some(key) = created["key"].as_str() else {
        return Err(ClientError::Refused {
            status: 200,
            message: "the daemon's answer holds no key".into(),
        });
    };
    println!("{key}");
    eprintln!(
        "key {} for {} (team {}, {}){}: shown only this once, keep it now",
        text(&created["id"]),
        args.user,
        args.team,
        args.role,
        match args.expires {
            Some(at) => format!(", expires {}", at.to_rfc3339()),
            None => String::new(),
        }
    );
    Ok(exit::OK)
}

/// The header of `elfgate keys list`.
const HEADER: [&str; 7] = ["ID", "NAME", "USER", "TEAM", "ROLE", "EXPIRES", "CREATED"];

/// Lists the keys: a table, or with `--json` one object a line as the daemon wrote it.
async fn list(conn: &Conn, json: bool) -> Result<u8, ClientError> {
    let answer: Value = conn.get("/v1/admin/keys").await?;
    let keys = answer
        .get("keys")
        .unwrap_or(&answer)
        .as_array()
        .cloned()
        .unwrap_or_default();
    if json {
        for k in &keys {
            println!("{k}");
        }
        return Ok(exit::OK);
    }
    let rows: Vec<[String; 7]> = keys
        .iter()
        .map(|k| {
            [
                text(&k["id"]),
                text(&k["name"]),
                text(&k["user"]),
                text(&k["team"]),
                text(&k["role"]),
                text(&k["expiresAt"]),
                text(&k["createdAt"]),
            ]
        })
        .collect();
    if !rows.is_empty() {
        print!("{}", table(HEADER, &rows));
    }
    Ok(exit::OK)
}

/// A string field, or `-`.
fn text(v: &Value) -> String {
    or_dash(v.as_str())
}
