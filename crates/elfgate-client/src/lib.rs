//! The terminal client: `elfgate chat`, `sessions`, `show ID`, `interrupt ID`, `keys …`. It uses the public
//! HTTP/SSE API only, like any other client, reading and writing the API's own types
//! (elfgate-api), so that it also shows the API is enough.
#![expect(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "the terminal client's job is to write to the terminal it runs in"
)]

mod args;
mod chat;
mod commands;
mod conn;
mod keys;
mod render;
mod stream;

pub use args::{ChatArgs, ClientCommand, ConnArgs, KeyCreateArgs, KeysAction, ModelChoice};
pub use conn::{ClientError, Conn};

use std::path::PathBuf;

/// Exit statuses of the client commands (documented in docs/terminal.md).
pub mod exit {
    /// Everything went well.
    pub const OK: u8 = 0;
    /// A run ended with an error (or a request the daemon refused).
    pub const RUN_ERROR: u8 = 1;
    /// Bad command line (clap's own status for a usage error).
    pub const USAGE: u8 = 2;
    /// The daemon cannot be reached, or refused the token.
    pub const UNREACHABLE: u8 = 3;
    /// The user pressed Ctrl-C twice (or at the prompt).
    pub const INTERRUPTED: u8 = 130;
}

/// Runs a client subcommand; returns the process's exit status. `token_file` is where the
/// daemon this machine's configuration describes keeps its token (the binary knows the
/// configuration; the client does not), tried when neither `--token` nor ELFGATE_TOKEN gives one.
pub async fn run(cmd: ClientCommand, token_file: Option<PathBuf>) -> u8 {
    let name = cmd.name();
    let conn = match Conn::new(cmd.conn(), token_file) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("elfgate {name}: {e}");
            return exit::UNREACHABLE;
        }
    };
    let result = match &cmd {
        ClientCommand::Chat(args) => chat::run(&conn, args).await,
        ClientCommand::Sessions { json, .. } => commands::sessions(&conn, *json).await,
        ClientCommand::Show { id, json, .. } => commands::show(&conn, id, *json).await,
        ClientCommand::Interrupt { id, .. } => commands::interrupt(&conn, id).await,
        ClientCommand::Keys { action } => keys::run(&conn, action).await,
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("elfgate {name}: {e}");
            e.exit_code()
        }
    }
}
