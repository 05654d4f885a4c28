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
    /// API keys of users and teams (an admin's: the daemon's token is one).
    Keys {
        /// What to do.
        #[command(subcommand)]
        action: KeysAction,
    },
}

/// `elfgate keys …`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum KeysAction {
    /// Create a key and print it: it is shown this once (the daemon keeps only its hash).
    Create(KeyCreateArgs),
    /// List the keys, without their secrets.
    List {
        /// Where the daemon is, and its token.
        #[command(flatten)]
        conn: ConnArgs,
        /// Raw JSON, one key a line.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a key: it stops working at once.
    Revoke {
        /// The key's id (as `list` shows it).
        id: String,
        /// Where the daemon is, and its token.
        #[command(flatten)]
        conn: ConnArgs,
    },
}

/// Flags of `elfgate keys create`.
#[derive(Debug, Clone, clap::Args)]
pub struct KeyCreateArgs {
    /// Where the daemon is, and its token.
    #[command(flatten)]
    pub conn: ConnArgs,
    /// The user the key acts for.
    #[arg(long)]
    pub user: String,
    /// The user's team.
    #[arg(long)]
    pub team: String,
    /// admin, member or viewer.
    #[arg(long)]
    pub role: String,
    /// A name for the key, to tell it apart in lists [default: the user's name].
    #[arg(long)]
    pub name: Option<String>,
    /// When it stops working: an RFC 3339 time, or a delay from now such as 30d, 12h or 45m.
    #[arg(long, value_name = "WHEN", value_parser = parse_expiry)]
    pub expires: Option<chrono::DateTime<chrono::Utc>>,
    /// How far it reaches, as the API's `scopes` JSON object, e.g.
    /// '{"engines": ["chat"], "answerPermissions": false}'.
    #[arg(long, value_name = "JSON", value_parser = parse_scopes)]
    pub scopes: Option<serde_json::Value>,
    /// Print the daemon's whole answer as JSON (the key included).
    #[arg(long)]
    pub json: bool,
}

/// An RFC 3339 time, or `N` followed by `d`, `h` or `m` from now.
fn parse_expiry(v: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(v) {
        return Ok(t.with_timezone(&chrono::Utc));
    }
    let bad = || format!("'{v}' is neither an RFC 3339 time nor a delay such as 30d, 12h or 45m");
    let split = v.len().checked_sub(1).ok_or_else(bad)?;
    let (n, unit) = v.split_at(split);
    let n: i64 = n.parse().map_err(|_| bad())?;
    let delay = match unit {
        "d" => chrono::Duration::try_days(n),
        "h" => chrono::Duration::try_hours(n),
        "m" => chrono::Duration::try_minutes(n),
        _ => None,
    }
    .filter(|d| *d > chrono::Duration::zero())
    .ok_or_else(bad)?;
    chrono::Utc::now().checked_add_signed(delay).ok_or_else(bad)
}

/// A JSON object.
fn parse_scopes(v: &str) -> Result<serde_json::Value, String> {
    match serde_json::from_str::<serde_json::Value>(v) {
        Ok(o @ serde_json::Value::Object(_)) => Ok(o),
        Ok(_) => Err("scopes must be a JSON object".into()),
        Err(e) => Err(format!("not JSON: {e}")),
    }
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
            ClientCommand::Keys { action } => match action {
                KeysAction::Create(_) => "keys create",
                KeysAction::List { .. } => "keys list",
                KeysAction::Revoke { .. } => "keys revoke",
            },
        }
    }

    /// Where the daemon is.
    pub fn conn(&self) -> &ConnArgs {
        match self {
            ClientCommand::Chat(c) => &c.conn,
            ClientCommand::Sessions { conn, .. }
            | ClientCommand::Show { conn, .. }
            | ClientCommand::Interrupt { conn, .. } => conn,
            ClientCommand::Keys { action } => match action {
                KeysAction::Create(args) => &args.conn,
                KeysAction::List { conn, .. } | KeysAction::Revoke { conn, .. } => conn,
            },
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
    fn key_expiry_and_scopes() {
        let words =
            |line: &str| -> Vec<String> { line.split_whitespace().map(str::to_string).collect() };
        let create = "keys create --user alice --team research --role member";
        let mut args = words(&format!("{create} --expires 30d --scopes"));
        args.push(r#"{"engines": ["chat"]}"#.into());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let Ok(ClientCommand::Keys {
            action: KeysAction::Create(a),
        }) = parse(&args)
        else {
            panic!("not parsed");
        };
        let days = (a.expires.unwrap() - chrono::Utc::now()).num_days();
        assert!((29..=30).contains(&days), "{days}");
        assert_eq!(a.scopes.unwrap()["engines"][0], "chat");
        let at = parse_expiry("2030-01-02T03:04:05Z").unwrap();
        assert_eq!(at.to_rfc3339(), "2030-01-02T03:04:05+00:00");
        for bad in [
            format!("{create} --expires soon"),
            format!("{create} --expires -3d"),
            format!("{create} --scopes [1]"),
            "keys create --user a --team t".to_string(),
            "keys revoke".to_string(),
        ] {
            let args = words(&bad);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let e = parse(&args).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad}: {e}");
        }
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
