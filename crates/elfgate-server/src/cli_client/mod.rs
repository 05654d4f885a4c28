//! The terminal client: `elfgate chat`, `sessions`, `show ID`, `interrupt ID`. It uses the public
//! HTTP/SSE API only, like any other client, so that it also shows the API is enough.

mod args;
mod chat;
mod commands;
mod conn;
mod render;
mod stream;

pub use args::{ClientArgs, UsageError};
pub use conn::Conn;

/// Exit statuses of the client commands (documented in docs/terminal.md).
pub mod exit {
    /// Everything went well.
    pub const OK: u8 = 0;
    /// A run ended with an error (or a request the daemon refused).
    pub const RUN_ERROR: u8 = 1;
    /// Bad command line.
    pub const USAGE: u8 = 2;
    /// The daemon cannot be reached, or refused the token.
    pub const UNREACHABLE: u8 = 3;
    /// The user pressed Ctrl-C twice (or at the prompt).
    pub const INTERRUPTED: u8 = 130;
}

/// The client subcommands' usage lines.
pub const USAGE: &str =
    "  elfgate chat [--url URL] [--token T] [--engine E] [--model [PROVIDER/]MODEL]
              [--project DIR] [--session ID] [--permission-mode M] [--json]
                                       chat with the daemon (a prompt per line)
  elfgate sessions [--url URL] [--token T] [--json]   list sessions, newest first
  elfgate show ID [--url URL] [--token T] [--json]    print a session's history
  elfgate interrupt ID [--url URL] [--token T]        stop a session's run";

/// Whether `cmd` is one of the client's subcommands.
pub fn is_client_command(cmd: &str) -> bool {
    matches!(cmd, "chat" | "sessions" | "show" | "interrupt")
}

/// Runs client subcommand `cmd` with its arguments; returns the process's exit status.
pub async fn run(cmd: &str, args: &[String]) -> u8 {
    let parsed = match ClientArgs::parse(cmd, args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("elfgate {cmd}: {e}\nusage:\n{USAGE}");
            return exit::USAGE;
        }
    };
    let conn = match Conn::new(&parsed) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("elfgate {cmd}: {e:#}");
            return exit::UNREACHABLE;
        }
    };
    let result = match cmd {
        "chat" => chat::run(&conn, &parsed).await,
        "sessions" => commands::sessions(&conn, &parsed).await,
        "show" => commands::show(&conn, &parsed).await,
        _ => commands::interrupt(&conn, &parsed).await,
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("elfgate {cmd}: {e}");
            e.exit_code()
        }
    }
}
