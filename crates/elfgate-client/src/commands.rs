//! `elfgate sessions`, `elfgate show ID` and `elfgate interrupt ID`.

use super::conn::{ClientError, Conn};
use super::exit;
use chrono::SecondsFormat;
use elfgate_api::{InterruptRequest, InterruptResponse, MessageList, SessionList, SessionView};
use elfgate_core::ContentBlock;
use serde_json::{Value, json};

/// Lists the sessions, newest first, all pages: with `--json` one object a line as each page
/// comes, else a table whose columns are as wide as their longest value (read once every page
/// is in, so that a long model name does not push one row out of line).
pub async fn sessions(conn: &Conn, json: bool) -> Result<u8, ClientError> {
    let mut cursor: Option<String> = None;
    let mut rows: Vec<[String; 7]> = Vec::new();
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/sessions?limit=500&cursor={c}"),
            None => "/v1/sessions?limit=500".to_string(),
        };
        if json {
            // As the daemon wrote them, fields this client does not know included.
            let page: Value = conn.get(&path).await?;
            for s in page["sessions"].as_array().into_iter().flatten() {
                println!("{s}");
            }
            cursor = page["nextCursor"].as_str().map(str::to_string);
        } else {
            let page: SessionList = conn.get(&path).await?;
            rows.extend(page.sessions.iter().map(row));
            cursor = page.next_cursor.map(|c| c.to_string());
        }
        if cursor.is_none() {
            break;
        }
    }
    if !json && !rows.is_empty() {
        print!("{}", table(HEADER, &rows));
    }
    Ok(exit::OK)
}

/// The header of `elfgate sessions`.
const HEADER: [&str; 7] = [
    "ID", "ENGINE", "STATUS", "PROVIDER", "MODEL", "UPDATED", "TITLE",
];

/// `rows` under `header`, each column padded to its widest cell (counted in characters); the
/// last column is not padded.
pub(super) fn table<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(|h| h.chars().count());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let header = header.map(str::to_string);
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
pub async fn show(conn: &Conn, sid: &str, json: bool) -> Result<u8, ClientError> {
    let session_path = format!("/v1/sessions/{sid}");
    let messages_path = format!("/v1/sessions/{sid}/messages");
    if json {
        let session: Value = conn.get(&session_path).await?;
        let history: Value = conn.get(&messages_path).await?;
        println!(
            "{}",
            json!({"session": session, "messages": history["messages"]})
        );
        return Ok(exit::OK);
    }
    let view: SessionView = conn.get(&session_path).await?;
    let history: MessageList = conn.get(&messages_path).await?;
    println!(
        "session {sid}  {}  {}  {}",
        view.session.engine,
        or_dash(view.session.model.as_deref()),
        view.status.as_str()
    );
    for m in &history.messages {
        println!("\n[{}]", m.role.as_str());
        for b in &m.blocks {
            match b {
                ContentBlock::Text { text } => println!("{text}"),
                // A block may hold only the provider's signature (Gemini's, on a function call).
                ContentBlock::Thinking { thinking, .. } if thinking.is_empty() => {}
                ContentBlock::Thinking { thinking, .. } => println!("(thinking) {thinking}"),
                ContentBlock::ToolUse { name, input, .. } => println!("⚙ {name} {input}"),
                ContentBlock::ToolResult {
                    content, is_error, ..
                } => {
                    let mark = if *is_error { "error" } else { "result" };
                    println!("⚙ {mark}: {content}");
                }
                ContentBlock::Image { .. } => println!("(image block)"),
                ContentBlock::Document {
                    media_type, name, ..
                } => println!("(document {} {media_type})", name.as_deref().unwrap_or("")),
                ContentBlock::ProviderBlock { block, .. } => {
                    println!("(provider) {}", elfgate_core::provider_block_label(block));
                }
            }
        }
    }
    Ok(exit::OK)
}

/// Interrupts the session's run and waits for it to end.
pub async fn interrupt(conn: &Conn, sid: &str) -> Result<u8, ClientError> {
    let v: InterruptResponse = conn
        .post(
            &format!("/v1/sessions/{sid}/interrupt"),
            &InterruptRequest { wait: true },
        )
        .await?;
    match v.run_id {
        Some(run) if v.interrupted => println!("run {run} {}", v.status.as_str()),
        _ => println!("nothing was running"),
    }
    Ok(exit::OK)
}

/// A row of `elfgate sessions`.
fn row(s: &SessionView) -> [String; 7] {
    let x = &s.session;
    [
        x.id.to_string(),
        x.engine.to_string(),
        s.status.as_str().to_string(),
        or_dash(x.provider_id.as_deref()),
        or_dash(x.model.as_deref()),
        x.updated_at.to_rfc3339_opts(SecondsFormat::Millis, true),
        label(s),
    ]
}

fn or_dash(v: Option<&str>) -> String {
    v.unwrap_or("-").to_string()
}

/// What names a session in the list: its title, or else its first prompt on one line.
fn label(s: &SessionView) -> String {
    match s.session.title.as_deref().filter(|t| !t.is_empty()) {
        Some(title) => title.to_string(),
        None => s
            .first_prompt
            .as_deref()
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
        let out = table(
            HEADER,
            &[
                row("m"),
                row("a-very-long-model-name:tokens=400,delay_ms=100"),
            ],
        );
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        let at = |l: &str| l.find("2026").or_else(|| l.find("UPDATED"));
        assert_eq!(at(lines[0]), at(lines[1]), "{out}");
        assert_eq!(at(lines[1]), at(lines[2]), "{out}");
        assert!(lines[0].starts_with("ID"), "{out}");
    }
}
