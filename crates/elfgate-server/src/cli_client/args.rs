//! The client subcommands' flags.

/// A command line the client cannot use.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Flags of `chat`, `sessions`, `show` and `interrupt` (each uses the ones that apply to it).
#[derive(Debug, Default, Clone)]
pub struct ClientArgs {
    /// The daemon's base URL.
    pub url: Option<String>,
    /// The bearer token.
    pub token: Option<String>,
    /// The engine of a new session.
    pub engine: Option<String>,
    /// The provider of a new session (the part of `--model` before the first `/`).
    pub provider: Option<String>,
    /// The model of a new session.
    pub model: Option<String>,
    /// The project directory of a new session.
    pub project: Option<String>,
    /// The session to resume (chat) or to act on (show, interrupt).
    pub session: Option<String>,
    /// The permission mode of a new session.
    pub permission_mode: Option<String>,
    /// Raw events (chat) or raw JSON answers (sessions, show), one object per line.
    pub json: bool,
}

impl ClientArgs {
    /// Parses `args` (after the subcommand's name).
    pub fn parse(cmd: &str, args: &[String]) -> Result<Self, UsageError> {
        let mut a = ClientArgs::default();
        let mut i = 0;
        let chat = cmd == "chat";
        while i < args.len() {
            let flag = args[i].as_str();
            if !flag.starts_with('-') && !chat && a.session.is_none() {
                a.session = Some(flag.to_string());
                i += 1;
                continue;
            }
            let takes_value = !matches!(flag, "--json");
            let value = if takes_value {
                let v = args
                    .get(i + 1)
                    .ok_or_else(|| UsageError(format!("{flag} needs a value")))?;
                i += 2;
                Some(v.clone())
            } else {
                i += 1;
                None
            };
            match (flag, value) {
                ("--json", _) => a.json = true,
                ("--url", v) => a.url = v,
                ("--token", v) => a.token = v,
                ("--engine", v) if chat => a.engine = v,
                ("--model", Some(v)) if chat => match v.split_once('/') {
                    Some((p, m)) if !p.is_empty() && !m.is_empty() => {
                        a.provider = Some(p.to_string());
                        a.model = Some(m.to_string());
                    }
                    _ => a.model = Some(v),
                },
                ("--project", v) if chat => a.project = v,
                ("--session", v) if chat => a.session = v,
                ("--permission-mode", v) if chat => a.permission_mode = v,
                _ => return Err(UsageError(format!("unknown argument '{flag}'"))),
            }
        }
        if matches!(cmd, "show" | "interrupt") && a.session.is_none() {
            return Err(UsageError(format!("{cmd} needs a session id")));
        }
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(std::string::ToString::to_string).collect()
    }

    #[test]
    fn model_splits_at_the_first_slash() {
        let a = ClientArgs::parse("chat", &strings(&["--model", "or/anthropic/claude"])).unwrap();
        assert_eq!(a.provider.as_deref(), Some("or"));
        assert_eq!(a.model.as_deref(), Some("anthropic/claude"));
        let a = ClientArgs::parse("chat", &strings(&["--model", "mock:tokens=3"])).unwrap();
        assert_eq!(a.provider, None);
        assert_eq!(a.model.as_deref(), Some("mock:tokens=3"));
    }

    #[test]
    fn positional_id_and_errors() {
        let a = ClientArgs::parse("show", &strings(&["abc", "--json"])).unwrap();
        assert_eq!(a.session.as_deref(), Some("abc"));
        assert!(a.json);
        assert!(ClientArgs::parse("show", &[]).is_err());
        assert!(ClientArgs::parse("chat", &strings(&["--url"])).is_err());
        assert!(ClientArgs::parse("chat", &strings(&["stray"])).is_err());
        assert!(ClientArgs::parse("sessions", &strings(&["--engine", "x"])).is_err());
    }
}
