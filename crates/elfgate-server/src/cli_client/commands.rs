//! `elfgate sessions`, `elfgate show ID` and `elfgate interrupt ID`.

use super::args::ClientArgs;
use super::conn::{ClientError, Conn};
use super::exit;
use serde_json::{Value, json};

/// Lists the sessions, newest first, all pages.
pub async fn sessions(conn: &Conn, args: &ClientArgs) -> Result<u8, ClientError> {
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/sessions?limit=500&cursor={c}"),
            None => "/v1/sessions?limit=500".to_string(),
        };
        let page = conn.get(&path).await?;
        for s in page["sessions"].as_array().into_iter().flatten() {
            if args.json {
                println!("{s}");
            } else {
                println!(
                    "{}  {:<8} {:<7} {:<24} {}  {}",
                    text(&s["id"]),
                    text(&s["engine"]),
                    text(&s["status"]),
                    text(&s["model"]),
                    text(&s["updatedAt"]),
                    label(s)
                );
            }
        }
        match page["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return Ok(exit::OK),
        }
    }
}

/// Prints a session's stored history: each message's role and its blocks.
pub async fn show(conn: &Conn, args: &ClientArgs) -> Result<u8, ClientError> {
    let sid = args.session.clone().unwrap_or_default();
    let session = conn.get(&format!("/v1/sessions/{sid}")).await?;
    let history = conn.get(&format!("/v1/sessions/{sid}/messages")).await?;
    if args.json {
        println!(
            "{}",
            json!({"session": session, "messages": history["messages"]})
        );
        return Ok(exit::OK);
    }
    println!(
        "session {sid}  {}  {}  {}",
        text(&session["engine"]),
        text(&session["model"]),
        text(&session["status"])
    );
    for m in history["messages"].as_array().into_iter().flatten() {
        println!("\n[{}]", text(&m["role"]));
        for b in m["blocks"].as_array().into_iter().flatten() {
            match b["type"].as_str().unwrap_or_default() {
                "text" => println!("{}", text(&b["text"])),
                // A block may hold only the provider's signature (Gemini's, on a function call).
                "thinking" if text(&b["thinking"]).is_empty() => {}
                "thinking" => println!("(thinking) {}", text(&b["thinking"])),
                "tool_use" => println!("⚙ {} {}", text(&b["name"]), b["input"]),
                "tool_result" => {
                    let mark = if b["is_error"] == true {
                        "error"
                    } else {
                        "result"
                    };
                    println!("⚙ {mark}: {}", text(&b["content"]));
                }
                other => println!("({other} block)"),
            }
        }
    }
    Ok(exit::OK)
}

/// Interrupts the session's run and waits for it to end.
pub async fn interrupt(conn: &Conn, args: &ClientArgs) -> Result<u8, ClientError> {
    let sid = args.session.clone().unwrap_or_default();
    let v = conn
        .post(
            &format!("/v1/sessions/{sid}/interrupt"),
            &json!({"wait": true}),
        )
        .await?;
    if v["interrupted"] == true {
        println!("run {} {}", text(&v["runId"]), text(&v["status"]));
    } else {
        println!("nothing was running");
    }
    Ok(exit::OK)
}

fn text(v: &Value) -> String {
    v.as_str().map(str::to_string).unwrap_or_else(|| {
        if v.is_null() {
            "-".to_string()
        } else {
            v.to_string()
        }
    })
}

/// What names a session in the list: its title, or else its first prompt on one line.
fn label(s: &Value) -> String {
    match s["title"].as_str().filter(|t| !t.is_empty()) {
        Some(title) => title.to_string(),
        None => s["firstPrompt"]
            .as_str()
            .unwrap_or("")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
    }
}
