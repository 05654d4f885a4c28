//! Hooks: commands run at PreToolUse, PostToolUse, SessionStart and SessionEnd. Each gets a JSON
//! description on stdin and may answer `{"decision": "allow"|"deny", "reason": "..."}` on stdout.
//! They run like shell calls (see [`crate::process`]): own process group, clean environment, and
//! the daemon's default network (a session's settings do not change how the operator's hooks run).

use crate::process::{ChildSetup, End, run};
use regex::Regex;
use serde::Deserialize;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// When a hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum HookEvent {
    /// Before a tool call (may deny it).
    PreToolUse,
    /// After a tool call (fire-and-forget).
    PostToolUse,
    /// When a run of the session starts.
    SessionStart,
    /// When a run of the session ends.
    SessionEnd,
}

impl HookEvent {
    /// The name sent to the hook.
    pub fn as_str(self) -> &'static str {
        match self {
            HookEvent::PreToolUse => "PreToolUse",
            HookEvent::PostToolUse => "PostToolUse",
            HookEvent::SessionStart => "SessionStart",
            HookEvent::SessionEnd => "SessionEnd",
        }
    }
}

fn default_hook_timeout() -> f64 {
    10.0
}

/// One configured hook (`[[engines.tinyelf.hooks]]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookConfig {
    /// When it runs.
    pub event: HookEvent,
    /// The command, run with `bash -c` in the project directory.
    pub command: String,
    /// A regex over tool names it applies to (tool events only); all tools when absent.
    #[serde(default)]
    pub matcher: Option<String>,
    /// Seconds it may take.
    #[serde(default = "default_hook_timeout")]
    pub timeout_secs: f64,
}

/// Longest a hook may take, whatever its timeout_secs says.
const MAX_HOOK_SECS: f64 = 86_400.0;

impl HookConfig {
    /// Why its timeout_secs cannot be used, if it cannot (`inf` and `nan` are valid TOML floats).
    pub fn timeout_problem(&self) -> Option<String> {
        let t = self.timeout_secs;
        (!t.is_finite() || t < 0.0)
            .then(|| format!("must be a finite number of seconds, at least 0 (got {t})"))
    }

    /// How long it may take.
    pub fn timeout(&self) -> Duration {
        crate::clamped_secs(self.timeout_secs, 0.001, MAX_HOOK_SECS)
    }
}

/// A hook's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookVerdict {
    /// Go on.
    Allow,
    /// Stop, with a reason for the model.
    Deny(String),
}

/// A hook configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("invalid hook matcher '{0}': {1}")]
pub struct HookConfigError(pub String, pub String);

/// The configured hooks.
#[derive(Debug, Clone, Default)]
pub struct Hooks {
    hooks: Vec<(HookConfig, Option<Regex>)>,
    child: ChildSetup,
}

#[derive(Deserialize)]
struct HookAnswer {
    #[serde(default)]
    decision: Option<String>,
    #[serde(default)]
    reason: Option<String>,
}

impl Hooks {
    /// Compiles the hooks' matchers; the hooks run with `child`'s environment and network.
    pub fn new(configs: Vec<HookConfig>, child: ChildSetup) -> Result<Self, HookConfigError> {
        let mut hooks = Vec::new();
        for c in configs {
            let re = match &c.matcher {
                Some(m) => Some(
                    Regex::new(&format!("^(?:{m})$"))
                        .map_err(|e| HookConfigError(m.clone(), e.to_string()))?,
                ),
                None => None,
            };
            hooks.push((c, re));
        }
        Ok(Hooks { hooks, child })
    }

    /// Whether any hook is configured for `event`.
    pub fn has(&self, event: HookEvent) -> bool {
        self.hooks.iter().any(|(c, _)| c.event == event)
    }

    /// Runs every hook of `event` that matches `tool` in order; the first deny wins. A hook that
    /// fails, times out or answers something unreadable denies (fail closed) for PreToolUse and is
    /// only logged for the other events.
    pub async fn run(
        &self,
        event: HookEvent,
        tool: Option<&str>,
        payload: &Value,
        cwd: &Path,
    ) -> HookVerdict {
        for (c, re) in &self.hooks {
            if c.event != event {
                continue;
            }
            if let (Some(re), Some(t)) = (re, tool)
                && !re.is_match(t)
            {
                continue;
            }
            let verdict = run_one(c, payload, cwd, &self.child).await;
            match verdict {
                Ok(HookVerdict::Allow) => {}
                Ok(HookVerdict::Deny(r)) => return HookVerdict::Deny(r),
                Err(e) => {
                    tracing::warn!(hook = %c.command, error = %e, "hook failed");
                    if event == HookEvent::PreToolUse {
                        return HookVerdict::Deny(format!("the PreToolUse hook failed: {e}"));
                    }
                }
            }
        }
        HookVerdict::Allow
    }
}

async fn run_one(
    c: &HookConfig,
    payload: &Value,
    cwd: &Path,
    child: &ChildSetup,
) -> Result<HookVerdict, String> {
    let mut spec = child.spec("bash", &["-c", &c.command], cwd);
    spec.stdin = Some(payload.to_string().into_bytes());
    spec.stdout_cap = 64 * 1024;
    spec.stderr_cap = 0;
    spec.timeout = Some(c.timeout());
    // Not cancellable by itself: a caller that gives up drops the future, which stops the group.
    let out = run(&spec, &CancellationToken::new())
        .await
        .map_err(|e| e.to_string())?;
    let status = match out.end {
        End::Exited(s) => s,
        End::TimedOut | End::Cancelled => {
            return Err(format!("timed out after {:.1}s", c.timeout().as_secs_f64()));
        }
    };
    let out = String::from_utf8_lossy(&out.stdout.bytes);
    let text = out.trim();
    if text.is_empty() {
        return if status.success() {
            Ok(HookVerdict::Allow)
        } else {
            Err(format!("exited with {status} and no answer"))
        };
    }
    let answer: HookAnswer =
        serde_json::from_str(text).map_err(|e| format!("unreadable answer '{text}': {e}"))?;
    match answer.decision.as_deref() {
        Some("allow") | Some("approve") | None if status.success() => Ok(HookVerdict::Allow),
        Some("deny") | Some("block") => {
            Ok(HookVerdict::Deny(answer.reason.unwrap_or_else(|| {
                format!("denied by hook '{}'", c.command)
            })))
        }
        Some(other) => Err(format!("unknown decision '{other}'")),
        None => Err(format!("exited with {status}")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn hook(cmd: &str, timeout: f64) -> Hooks {
        Hooks::new(
            vec![HookConfig {
                event: HookEvent::PreToolUse,
                command: cmd.into(),
                matcher: Some("shell|write_file".into()),
                timeout_secs: timeout,
            }],
            ChildSetup::default(),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn hooks_allow_deny_and_fail_closed() {
        let dir = tempfile::tempdir().unwrap();
        let p = json!({"toolName": "shell"});
        let deny = hook(
            r#"cat >/dev/null; echo '{"decision":"deny","reason":"no shells"}'"#,
            5.0,
        );
        assert_eq!(
            deny.run(HookEvent::PreToolUse, Some("shell"), &p, dir.path())
                .await,
            HookVerdict::Deny("no shells".into())
        );
        // Not matching: not run.
        assert_eq!(
            deny.run(HookEvent::PreToolUse, Some("read_file"), &p, dir.path())
                .await,
            HookVerdict::Allow
        );
        let allow = hook("grep -q '\"toolName\":\"shell\"'", 5.0);
        assert_eq!(
            allow
                .run(HookEvent::PreToolUse, Some("shell"), &p, dir.path())
                .await,
            HookVerdict::Allow
        );
        let slow = hook("sleep 30", 0.2);
        assert!(matches!(
            slow.run(HookEvent::PreToolUse, Some("shell"), &p, dir.path()).await,
            HookVerdict::Deny(r) if r.contains("timed out")
        ));
        let garbage = hook("echo what", 5.0);
        assert!(matches!(
            garbage
                .run(HookEvent::PreToolUse, Some("shell"), &p, dir.path())
                .await,
            HookVerdict::Deny(_)
        ));
    }

    #[tokio::test]
    async fn unusable_timeouts_are_named_and_never_panic() {
        let dir = tempfile::tempdir().unwrap();
        let p = json!({"toolName": "shell"});
        for bad in [f64::INFINITY, f64::NAN, -1.0] {
            let h = hook("true", bad);
            assert!(h.hooks[0].0.timeout_problem().is_some(), "{bad}");
            // Clamped, not a panic.
            let _ = h
                .run(HookEvent::PreToolUse, Some("shell"), &p, dir.path())
                .await;
        }
        assert_eq!(
            hook("true", f64::INFINITY).hooks[0].0.timeout(),
            Duration::from_secs(86_400)
        );
        for good in [0.0, 10.0] {
            assert!(hook("true", good).hooks[0].0.timeout_problem().is_none());
        }
    }
}
