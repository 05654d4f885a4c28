//! The environment of child processes: an allow-list of the daemon's variables plus what the
//! configuration adds, never the daemon's own `ELFGATE_*` variables nor a provider's API key.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::Path;
use std::sync::{Arc, OnceLock};

/// Variables a child inherits from the daemon: what programs need to find things, speak the
/// user's language and format dates, nothing that could carry a credential.
const INHERITED: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TZ", "TMPDIR", "TMP",
    "TEMP",
];

/// Prefixes of inherited variable families (locale categories).
const INHERITED_PREFIXES: &[&str] = &["LC_"];

/// The daemon's own variables (its token, its configuration overrides).
const DENIED_PREFIX: &str = "ELFGATE_";

/// A child's whole environment. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ChildEnv {
    vars: Arc<BTreeMap<String, String>>,
    /// Names that must never reach a child (compared case-insensitively), on top of `ELFGATE_*`.
    secrets: Arc<BTreeSet<String>>,
}

impl Default for ChildEnv {
    /// The allow-listed part of the daemon's environment, nothing added (read once).
    fn default() -> Self {
        static DEFAULT: OnceLock<ChildEnv> = OnceLock::new();
        DEFAULT
            .get_or_init(|| ChildEnv::from_daemon(&BTreeMap::new(), &[], &BTreeSet::new()))
            .clone()
    }
}

impl ChildEnv {
    /// The allow-listed variables of the daemon's environment, then the `passthrough` names taken
    /// from it, then `set`; any `ELFGATE_*` variable and any name in `secrets` is left out (with a
    /// warning when the configuration asked for it).
    pub fn from_daemon(
        set: &BTreeMap<String, String>,
        passthrough: &[String],
        secrets: &BTreeSet<String>,
    ) -> ChildEnv {
        Self::build(std::env::vars_os(), set, passthrough, secrets)
    }

    fn build(
        daemon: impl Iterator<Item = (OsString, OsString)>,
        set: &BTreeMap<String, String>,
        passthrough: &[String],
        secrets: &BTreeSet<String>,
    ) -> ChildEnv {
        let daemon: BTreeMap<String, String> = daemon
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        let mut env = ChildEnv {
            vars: Arc::new(BTreeMap::new()),
            secrets: Arc::new(secrets.iter().map(|s| s.to_ascii_uppercase()).collect()),
        };
        for (k, v) in &daemon {
            let inherited = INHERITED.contains(&k.as_str())
                || INHERITED_PREFIXES.iter().any(|p| k.starts_with(p));
            if inherited && env.allowed(k) {
                env.insert(k.clone(), v.clone());
            }
        }
        for k in passthrough {
            if let Some(v) = daemon.get(k) {
                env.set(k, v);
            } else if !env.allowed(k) {
                env.warn_denied(k);
            }
        }
        env.extend(set);
        env
    }

    /// Whether `name` may reach a child at all.
    pub fn allowed(&self, name: &str) -> bool {
        let upper = name.to_ascii_uppercase();
        !upper.starts_with(DENIED_PREFIX) && !self.secrets.contains(&upper)
    }

    fn warn_denied(&self, name: &str) {
        tracing::warn!(
            variable = name,
            "not passing {name} to shell commands and hooks: the daemon's ELFGATE_* variables and \
             providers' API key variables never reach them"
        );
    }

    fn insert(&mut self, name: String, value: String) {
        Arc::make_mut(&mut self.vars).insert(name, value);
    }

    /// Sets a variable; refused (false, with a warning) for a denied or malformed name or a value
    /// with a NUL byte.
    pub fn set(&mut self, name: &str, value: &str) -> bool {
        if !self.allowed(name) {
            self.warn_denied(name);
            return false;
        }
        if name.is_empty() || name.contains(['=', '\0']) || value.contains('\0') {
            tracing::warn!(
                variable = name,
                "not passing a variable with a malformed name or value to shell commands and hooks"
            );
            return false;
        }
        self.insert(name.to_string(), value.to_string());
        true
    }

    /// Sets a variable even when its name is one of the secrets: for the one credential a child
    /// is meant to have (a command-line engine's own provider key). `ELFGATE_*` names and
    /// malformed ones are still refused (false).
    pub fn grant(&mut self, name: &str, value: &str) -> bool {
        let upper = name.to_ascii_uppercase();
        if upper.starts_with(DENIED_PREFIX)
            || name.is_empty()
            || name.contains(['=', '\0'])
            || value.contains('\0')
        {
            self.warn_denied(name);
            return false;
        }
        self.insert(name.to_string(), value.to_string());
        true
    }

    /// Sets every variable of `vars` (see [`ChildEnv::set`]).
    pub fn extend(&mut self, vars: &BTreeMap<String, String>) {
        for (k, v) in vars {
            self.set(k, v);
        }
    }

    /// A copy with `vars` set as well.
    pub fn with(&self, vars: &BTreeMap<String, String>) -> ChildEnv {
        let mut env = self.clone();
        env.extend(vars);
        env
    }

    /// A variable's value.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// Whether `program` names an executable this environment would start: a path (relative to
    /// `cwd`) to one, or a name found in its PATH.
    pub fn finds(&self, program: &str, cwd: &Path) -> bool {
        use std::os::unix::fs::PermissionsExt;
        let runnable = |p: &Path| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        };
        if program.contains('/') {
            return runnable(&cwd.join(program));
        }
        let path = self.get("PATH").unwrap_or_default();
        std::env::split_paths(path).any(|d| runnable(&cwd.join(d).join(program)))
    }

    /// Every variable, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.vars.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn daemon() -> impl Iterator<Item = (OsString, OsString)> {
        [
            ("PATH", "/usr/bin:/bin"),
            ("HOME", "/home/elf"),
            ("LC_ALL", "C.UTF-8"),
            ("ELFGATE_TOKEN", "secret-token"),
            ("elfgate_providers__x__base_url", "http://x"),
            ("OPENAI_API_KEY", "sk-1"),
            ("MY_KEY", "sk-2"),
            ("CARGO_HOME", "/cargo"),
            ("SSL_CERT_FILE", "/certs.pem"),
        ]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
    }

    #[test]
    fn only_the_allow_list_and_what_is_added_reaches_a_child() {
        let secrets: BTreeSet<String> = ["OPENAI_API_KEY".to_string(), "my_key".to_string()].into();
        let set: BTreeMap<String, String> = [
            ("ADDED", "yes"),
            ("ELFGATE_BIND", "0.0.0.0:1"),
            ("MY_KEY", "explicit"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let passthrough = [
            "SSL_CERT_FILE".to_string(),
            "OPENAI_API_KEY".to_string(),
            "ELFGATE_TOKEN".to_string(),
            "ABSENT".to_string(),
        ];
        let env = ChildEnv::build(daemon(), &set, &passthrough, &secrets);
        let names: Vec<&str> = env.iter().map(|(k, _)| k).collect();
        assert_eq!(
            names,
            ["ADDED", "HOME", "LC_ALL", "PATH", "SSL_CERT_FILE"],
            "{env:?}"
        );
        assert_eq!(env.get("PATH"), Some("/usr/bin:/bin"));
        let mut more = env.with(
            &[("FROM_SESSION".to_string(), "1".to_string())]
                .into_iter()
                .collect(),
        );
        assert!(!more.set("Elfgate_Token", "x"));
        assert!(!more.set("OPENAI_API_KEY", "x"));
        assert!(more.clone().grant("OPENAI_API_KEY", "x"));
        assert!(!more.clone().grant("ELFGATE_TOKEN", "x"));
        assert!(!more.set("A=B", "x"));
        assert_eq!(more.get("FROM_SESSION"), Some("1"));
        assert_eq!(env.get("FROM_SESSION"), None);
    }
}
