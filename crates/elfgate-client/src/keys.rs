//! `elfgate keys create|list|revoke`: the admin routes `/v1/admin/keys`, with the daemon's token
//! (or any admin's key) as every other client command finds it.

use super::args::{KeyCreateArgs, KeysAction};
use super::commands::table;
use super::conn::{ClientError, Conn};
use super::exit;
use chrono::{DateTime, SecondsFormat, Utc};
use elfgate_api::keys::{CreatedKey, KeyList};
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
    if args.json {
        let created: Value = conn.post("/v1/admin/keys", &body).await?;
        println!("{created}");
        return Ok(exit::OK);
    }
    let created: CreatedKey = conn.post("/v1/admin/keys", &body).await?;
    println!("{}", created.key);
    let view = &created.view;
    eprintln!(
        "key {} for {} (team {}, {}){}: shown only this once, keep it now",
        view.id,
        view.user,
        view.team,
        view.role.as_str(),
        match view.expires_at {
            Some(at) => format!(
                ", expires {}",
                at.to_rfc3339_opts(SecondsFormat::Secs, true)
            ),
            None => String::new(),
        }
    );
    Ok(exit::OK)
}

/// The header of `elfgate keys list`.
const HEADER: [&str; 8] = [
    "ID", "NAME", "USER", "TEAM", "ROLE", "STATE", "EXPIRES", "CREATED",
];

/// Lists the keys: a table, or with `--json` one object a line as the daemon wrote it.
async fn list(conn: &Conn, json: bool) -> Result<u8, ClientError> {
    if json {
        let answer: Value = conn.get("/v1/admin/keys").await?;
        for k in answer["keys"].as_array().into_iter().flatten() {
            println!("{k}");
        }
        return Ok(exit::OK);
    }
    let answer: KeyList = conn.get("/v1/admin/keys").await?;
    let now = Utc::now();
    let time = |t: Option<DateTime<Utc>>| {
        t.map_or_else(
            || "-".to_string(),
            |t| t.to_rfc3339_opts(SecondsFormat::Secs, true),
        )
    };
    let rows: Vec<[String; 8]> = answer
        .keys
        .iter()
        .map(|k| {
            let state = match (k.revoked_at, k.expires_at) {
                (Some(_), _) => "revoked",
                (None, Some(at)) if at <= now => "expired",
                _ => "active",
            };
            [
                k.id.clone(),
                k.name.clone(),
                k.user.clone(),
                k.team.clone(),
                k.role.as_str().to_string(),
                state.to_string(),
                time(k.expires_at),
                time(Some(k.created_at)),
            ]
        })
        .collect();
    if !rows.is_empty() {
        print!("{}", table(HEADER, &rows));
    }
    Ok(exit::OK)
}
