//! `elfgate sessions`, `elfgate show ID` and `elfgate interrupt ID`.

use super::args::ClientArgs;
use super::conn::{ClientError, Conn};
use super::exit;
use serde_json::{Value, json};

/// Lists the sessions, newest first, all pages: with `--json` one object a line as each page
/// comes, else a table whose columns are as wide as their longest value (read once every page
/// is in, so that a long model name does not push one row out of line).
pub async fn sessions(conn: &Conn, args: &ClientArgs) -> Result<u8, ClientError> {
    let mut cursor: Option<String> = None;
    let mut rows: Vec<[String; 7]> = Vec::new();
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
                rows.push([
                    text(&s["id"]),
                    text(&s["engine"]),
                    text(&s["status"]),
                    text(&s["providerId"]),
                    text(&s["model"]),
                    text(&s["updatedAt"]),
                    label(s),
                ]);
            }
        }
        match page["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    if !args.json && !rows.is_empty() {
        print!("{}", table(&rows));
    }
    Ok(exit::OK)
}

/// The header of `elfgate sessions`.
const HEADER: [&str; 7] = [
    "ID", "ENGINE", "STATUS", "PROVIDER", "MODEL", "UPDATED", "TITLE",
];

/// `rows` under [`HEADER`], each column padded to its widest cell (counted in characters); the
/// last column is not padded.
fn table(rows: &[[String; 7]]) -> String {
    let mut widths = HEADER.map(|h| h.chars().count());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let header = HEADER.map(str::to_string);
    let mut out = String::new();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let pad = widths[i].saturating_sub(cell.chars().count());
                line.push_str(cell);
                line.push_str(&" ".repeat(pad + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_longest_cell() {
        let row = |model: &str| {
            [
                "s1",
                "chat",
                "idle",
                "mock",
                model,
                "2026-01-01T00:00:00Z",
                "hi",
            ]
            .map(str::to_string)
        };
        let out = table(&[
            row("m"),
            row("a-very-long-model-name:tokens=400,delay_ms=100"),
        ]);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        let at = |l: &str| l.find("2026").or_else(|| l.find("UPDATED"));
        assert_eq!(at(lines[0]), at(lines[1]), "{out}");
        assert_eq!(at(lines[1]), at(lines[2]), "{out}");
        assert!(lines[0].starts_with("ID"), "{out}");
    }
}
