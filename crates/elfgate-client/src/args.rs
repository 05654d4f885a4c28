//! The client subcommands' command lines (clap), and what the commands read from them.

use std::path::PathBuf;

/// The client's subcommands, for the `elfgate` binary to flatten into its own.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum ClientCommand {
    /// Chat with the daemon: a prompt per line, from the terminal or a pipe.
    Chat(ChatArgs),
    /// List sessions, newest first.
    Sessions {
        /// Where the daemon is, and its token.
        #[command(flatten)]
        conn: ConnArgs,
        /// Raw JSON, one session a line.
        #[arg(long)]
        json: bool,
    },
    /// Print a session's history.
    Show {
        /// The session.
        id: String,
        /// Where the daemon is, and its token.
        #[command(flatten)]
        conn: ConnArgs,
        /// Raw JSON: the session and its messages.
        #[arg(long)]
        json: bool,
    },
    /// Stop a session's run and wait for it to end.
    Interrupt {
        /// The session.
        id: String,
        /// Where the daemon is, and its token.
        #[command(flatten)]
        conn: ConnArgs,
    },
}

/// Where the daemon is and how to prove who we are.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ConnArgs {
    /// The daemon's base URL [default: ELFGATE_URL, else http://127.0.0.1:7420].
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// The bearer token [default: ELFGATE_TOKEN, else the daemon's token file].
    #[arg(long, value_name = "T")]
    pub token: Option<String>,
}

/// Flags of `elfgate chat`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ChatArgs {
    /// Where the daemon is, and its token.
    #[command(flatten)]
    pub conn: ConnArgs,
    /// The engine of a new session [default: chat].
    #[arg(long, value_name = "E")]
    pub engine: Option<String>,
    /// The model of a new session, optionally after its provider and a `/` (split at the
    /// first `/`).
    #[arg(long, value_name = "[PROVIDER/]MODEL", value_parser = parse_model)]
    pub model: Option<ModelChoice>,
    /// The project directory of a new session.
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
    /// Resume this session instead of starting one.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// The permission mode of a new session.
    #[arg(long, value_name = "M")]
    pub permission_mode: Option<String>,
    /// Raw events, one JSON object a line.
    #[arg(long)]
    pub json: bool,
}

/// A model, with the provider the user named before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelChoice {
    /// The part before the first `/`, when both parts are non-empty.
    pub provider: Option<String>,
    /// The model.
    pub model: String,
}

/// `PROVIDER/MODEL` splits at the first `/` (a model name may hold more of them); anything else
/// is a model of the default provider.
fn parse_model(v: &str) -> Result<ModelChoice, String> {
    Ok(match v.split_once('/') {
        Some((p, m)) if !p.is_empty() && !m.is_empty() => ModelChoice {
            provider: Some(p.to_string()),
            model: m.to_string(),
        },
        _ => ModelChoice {
            provider: None,
            model: v.to_string(),
        },
    })
}

impl ClientCommand {
    /// The subcommand's name, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            ClientCommand::Chat(_) => "chat",
            ClientCommand::Sessions { .. } => "sessions",
            ClientCommand::Show { .. } => "show",
            ClientCommand::Interrupt { .. } => "interrupt",
        }
    }

    /// Where the daemon is.
    pub fn conn(&self) -> &ConnArgs {
        match self {
            ClientCommand::Chat(c) => &c.conn,
            ClientCommand::Sessions { conn, .. }
            | ClientCommand::Show { conn, .. }
            | ClientCommand::Interrupt { conn, .. } => conn,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: ClientCommand,
    }

    fn parse(args: &[&str]) -> Result<ClientCommand, clap::Error> {
        Cli::try_parse_from(std::iter::once("elfgate").chain(args.iter().copied())).map(|c| c.cmd)
    }

    #[test]
    fn model_splits_at_the_first_slash() {
        let Ok(ClientCommand::Chat(a)) = parse(&["chat", "--model", "or/anthropic/claude"]) else {
            panic!("not parsed");
        };
        let m = a.model.unwrap();
        assert_eq!(m.provider.as_deref(), Some("or"));
        assert_eq!(m.model, "anthropic/claude");
        let Ok(ClientCommand::Chat(a)) = parse(&["chat", "--model", "mock:tokens=3"]) else {
            panic!("not parsed");
        };
        assert_eq!(
            a.model,
            Some(ModelChoice {
                provider: None,
                model: "mock:tokens=3".into()
            })
        );
    }

    #[test]
    fn positional_id_and_errors() {
        let Ok(ClientCommand::Show { id, json, .. }) = parse(&["show", "abc", "--json"]) else {
            panic!("not parsed");
        };
        assert_eq!((id.as_str(), json), ("abc", true));
        for bad in [
            &["show"][..],
            &["chat", "--url"],
            &["chat", "stray"],
            &["sessions", "--engine", "x"],
        ] {
            let e = parse(bad).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad:?}: {e}");
        }
    }
}
