//! Run tokens: credentials the daemon gives a CLI it runs through its own front door (the
//! proxy), each valid for one run only, on one door, for one route, and revoked when the run
//! ends. Never the daemon's own token.

use crate::{RunId, SessionId};
use dashmap::DashMap;
use std::sync::{Arc, OnceLock};

/// What every run token starts with: the daemon tells a stale run token (403, as a token of the
/// wrong door) from credentials it does not know (401).
pub const RUN_TOKEN_PREFIX: &str = "elfgate-run-";

/// The front door a run token opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyDoor {
    /// `POST /v1/responses` (codex).
    Responses,
    /// `POST /v1/messages` (claude-code).
    Messages,
    /// The Gemini door's method calls (gemini-cli).
    Gemini,
}

/// What one run token allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunGrant {
    /// The session of the run.
    pub session_id: SessionId,
    /// The run.
    pub run_id: RunId,
    /// The only door it opens.
    pub door: ProxyDoor,
    /// The only `model` (route) it may name: `PROVIDER/MODEL`.
    pub route: String,
}

/// The daemon's live run tokens and the address its doors are reached at.
#[derive(Debug, Default)]
pub struct RunTokens {
    tokens: DashMap<String, RunGrant>,
    url: OnceLock<String>,
}

impl RunTokens {
    /// An empty registry.
    pub fn new() -> Arc<RunTokens> {
        Arc::new(RunTokens::default())
    }

    /// Records where the daemon listens (`http://HOST:PORT`), once it does.
    pub fn set_url(&self, url: String) {
        let _ = self.url.set(url);
    }

    /// Where the daemon's doors are, once it listens.
    pub fn url(&self) -> Option<&str> {
        self.url.get().map(String::as_str)
    }

    /// A new token for `grant`, valid until the returned guard is dropped.
    pub fn issue(self: &Arc<Self>, grant: RunGrant) -> RunToken {
        // 244 random bits from the OS's generator (uuid v4).
        let value = format!(
            "{RUN_TOKEN_PREFIX}{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        self.tokens.insert(value.clone(), grant);
        RunToken {
            value,
            tokens: self.clone(),
        }
    }

    /// What `token` allows, if it is a live run token.
    pub fn check(&self, token: &str) -> Option<RunGrant> {
        self.tokens.get(token).map(|g| g.clone())
    }

    /// Live tokens (for tests and metrics).
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether no token is live.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

/// A live run token; dropping it revokes the token.
#[derive(Debug)]
pub struct RunToken {
    value: String,
    tokens: Arc<RunTokens>,
}

impl RunToken {
    /// The token's text, handed to the CLI as its provider key.
    pub fn value(&self) -> &str {
        &self.value
    }
}

impl Drop for RunToken {
    fn drop(&mut self) {
        self.tokens.tokens.remove(&self.value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_lives_as_long_as_its_guard() {
        let tokens = RunTokens::new();
        let grant = RunGrant {
            session_id: SessionId::new(),
            run_id: RunId::new(),
            door: ProxyDoor::Responses,
            route: "p/m".into(),
        };
        let t = tokens.issue(grant.clone());
        assert!(t.value().starts_with("elfgate-run-") && t.value().len() > 70);
        assert_eq!(tokens.check(t.value()), Some(grant));
        let value = t.value().to_string();
        drop(t);
        assert_eq!(tokens.check(&value), None);
        assert!(tokens.is_empty());
    }
}
