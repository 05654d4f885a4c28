//! Hooks: commands run at PreToolUse, PostToolUse, SessionStart and SessionEnd. Each gets a JSON
//! description on stdin and answers with its exit status and stdout, read by [`read_answer`]:
//! whatever cannot be read as allow is deny (fail closed), for every event.
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
    /// When a prompt arrives, before anything of it is stored (may block or rewrite it).
    UserPromptSubmit,
}

impl HookEvent {
    /// The name sent to the hook.
    pub fn as_str(self) -> &'static str {
        match self {
            HookEvent::PreToolUse => "PreToolUse",
            HookEvent::PostToolUse => "PostToolUse",
            HookEvent::SessionStart => "SessionStart",
            HookEvent::SessionEnd => "SessionEnd",
            HookEvent::UserPromptSubmit => "UserPromptSubmit",
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

/// What the UserPromptSubmit hooks did to a prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptVerdict {
    /// Go on with the prompt as it came.
    Keep,
    /// Go on with this prompt instead.
    Rewrite(String),
    /// Refuse the prompt, with the reason.
    Block(String),
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
    /// fails, times out or answers something unreadable denies (fail closed), whatever the event:
    /// for the events that cannot stop anything the caller reports the deny.
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
            let verdict = run_one(c, event, payload, cwd, &self.child).await;
            match verdict.map(|(v, _)| v) {
                Ok(HookVerdict::Allow) => {}
                Ok(HookVerdict::Deny(r)) => return HookVerdict::Deny(r),
                Err(e) => {
                    tracing::warn!(hook = %c.command, event = event.as_str(), error = %e, "hook failed");
                    return HookVerdict::Deny(format!(
                        "the {} hook '{}' failed: {e}",
                        event.as_str(),
                        c.command
                    ));
                }
            }
        }
        HookVerdict::Allow
    }

    /// Runs the UserPromptSubmit hooks in order on `payload` (whose `prompt` each hook sees as
    /// the hooks before it left it). A hook blocks with any deny (fail closed, as for a tool);
    /// it rewrites with a `prompt` string in its answer, or adds to the prompt with Claude
    /// Code's `hookSpecificOutput.additionalContext` (a paragraph after it).
    pub async fn submit_prompt(&self, payload: &Value, cwd: &Path) -> PromptVerdict {
        let event = HookEvent::UserPromptSubmit;
        let original = payload["prompt"].as_str().unwrap_or_default().to_string();
        let mut payload = payload.clone();
        let mut prompt = original.clone();
        for (c, _) in self.hooks.iter().filter(|(c, _)| c.event == event) {
            payload["prompt"] = Value::String(prompt.clone());
            let said = match run_one(c, event, &payload, cwd, &self.child).await {
                Ok((HookVerdict::Allow, said)) => said,
                Ok((HookVerdict::Deny(r), _)) => return PromptVerdict::Block(r),
                Err(e) => {
                    tracing::warn!(hook = %c.command, event = event.as_str(), error = %e, "hook failed");
                    return PromptVerdict::Block(format!(
                        "the {} hook '{}' failed: {e}",
                        event.as_str(),
                        c.command
                    ));
                }
            };
            // An allow with output is a JSON object (read_answer checked it).
            let Ok(answer @ Value::Object(_)) = serde_json::from_str::<Value>(&said) else {
                continue;
            };
            match answer.get("prompt") {
                None => {}
                Some(Value::String(p)) if !p.trim().is_empty() => prompt = p.clone(),
                Some(other) => {
                    return PromptVerdict::Block(format!(
                        "the {} hook '{}' answered prompt {other}, not a prompt (a non-empty \
                         string)",
                        event.as_str(),
                        c.command
                    ));
                }
            }
            match answer.pointer("/hookSpecificOutput/additionalContext") {
                Some(Value::String(extra)) if !extra.trim().is_empty() => {
                    prompt = format!("{prompt}\n\n{extra}");
                }
                None | Some(Value::String(_)) => {}
                Some(other) => {
                    return PromptVerdict::Block(format!(
                        "the {} hook '{}' answered hookSpecificOutput.additionalContext {other}, \
                         not a string",
                        event.as_str(),
                        c.command
                    ));
                }
            }
        }
        if prompt == original {
            PromptVerdict::Keep
        } else {
            PromptVerdict::Rewrite(prompt)
        }
    }
}

/// Runs one hook: its verdict, with its answer (stdout, trimmed) for the events that read more
/// than a decision from it.
async fn run_one(
    c: &HookConfig,
    event: HookEvent,
    payload: &Value,
    cwd: &Path,
    child: &ChildSetup,
) -> Result<(HookVerdict, String), HookFailure> {
    let mut spec = child.spec("bash", &["-c", &c.command], cwd);
    if let Some(confined) = &mut spec.confinement {
        let more = confined.sandbox.hook_writable_paths().to_vec();
        confined.writable.extend(more);
    }
    spec.stdin = Some(payload.to_string().into_bytes());
    spec.stdout_cap = ANSWER_MAX_BYTES;
    spec.stderr_cap = STDERR_MAX_BYTES;
    spec.timeout = Some(c.timeout());
    // Not cancellable by itself: a caller that gives up drops the future, which stops the group.
    let out = run(&spec, &CancellationToken::new())
        .await
        .map_err(|e| HookFailure(e.to_string()))?;
    let status = match out.end {
        End::Exited(s) => s,
        End::TimedOut | End::Cancelled => {
            return Err(HookFailure(format!(
                "timed out after {:.1}s",
                c.timeout().as_secs_f64()
            )));
        }
    };
    if out.stdout.capped() {
        return Err(HookFailure(format!(
            "its answer is longer than {ANSWER_MAX_BYTES} bytes and was not read"
        )));
    }
    let stdout = String::from_utf8_lossy(&out.stdout.bytes);
    let stderr = String::from_utf8_lossy(&out.stderr.bytes);
    read_answer(event, status.code(), stdout.trim(), stderr.trim())
        .map(|v| match v {
            HookVerdict::Deny(r) if r.is_empty() => {
                HookVerdict::Deny(format!("denied by hook '{}'", c.command))
            }
            v => v,
        })
        .map(|v| (v, stdout.trim().to_string()))
        .map_err(|e| match status.code() {
            Some(_) => e,
            // Killed by a signal: no code to show, the status says which signal.
            None => HookFailure(format!("{e} ({status})")),
        })
}

/// Most bytes of a hook's stdout read as its answer; a longer answer is unreadable (deny).
const ANSWER_MAX_BYTES: usize = 64 * 1024;
/// Most bytes of a hook's stderr kept, for the reason of an exit 2 or a failure.
const STDERR_MAX_BYTES: usize = 4 * 1024;

/// Reads a hook's answer: its exit code (None when a signal ended it), stdout and stderr, both
/// trimmed. Ok(Deny("")) is a deny that gave no reason. Err is an answer that cannot be read,
/// which the caller treats as deny. The rules (docs/security.md):
/// - exit 2: deny, stderr the reason (Claude Code's convention);
/// - any other non-zero exit or a signal: a failure (deny);
/// - exit 0 and no output: no objection (allow);
/// - exit 0 and a JSON object: its decision fields, any of `decision` (allow | approve | deny |
///   block, with `reason`), `behavior` (allow | deny, with `message`) and
///   `hookSpecificOutput.permissionDecision` (allow | deny | ask, with
///   `permissionDecisionReason`), and `continue: false` (with `stopReason`). Every field given
///   must be readable, and one deny among them wins. A PreToolUse answer must hold at least one
///   decision; other fields (systemMessage, suppressOutput...) are ignored;
/// - anything else (not JSON, not an object, an unknown value): unreadable.
pub fn read_answer(
    event: HookEvent,
    code: Option<i32>,
    stdout: &str,
    stderr: &str,
) -> Result<HookVerdict, HookFailure> {
    match code {
        Some(0) => {}
        Some(2) => return Ok(HookVerdict::Deny(stderr.to_string())),
        Some(n) => {
            return Err(HookFailure::failed(
                &format!("exited with status {n}"),
                stderr,
            ));
        }
        None => return Err(HookFailure::failed("was ended by a signal", stderr)),
    }
    if stdout.is_empty() {
        return Ok(HookVerdict::Allow);
    }
    let answer: Value = serde_json::from_str(stdout)
        .map_err(|_| HookFailure(format!("its answer is not JSON: '{}'", excerpt(stdout))))?;
    let Value::Object(answer) = answer else {
        return Err(HookFailure(format!(
            "its answer is not a JSON object: '{}'",
            excerpt(stdout)
        )));
    };
    // Each decision field as (field, value, the answers that mean allow, that mean deny, reason).
    let mut votes: Vec<HookVerdict> = Vec::new();
    let text_of = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_string();
    let mut vote = |field: &str,
                    value: &Value,
                    allow: &[&str],
                    deny: &[&str],
                    reason: String|
     -> Result<(), HookFailure> {
        match value.as_str() {
            Some(v) if allow.contains(&v) => votes.push(HookVerdict::Allow),
            Some(v) if deny.contains(&v) => votes.push(HookVerdict::Deny(reason)),
            _ => {
                let mut known: Vec<&str> = allow.to_vec();
                known.extend_from_slice(deny);
                return Err(HookFailure(format!(
                    "its answer's {field} is {value}, not one of {}",
                    known.join(", ")
                )));
            }
        }
        Ok(())
    };
    if let Some(v) = answer.get("decision") {
        let reason = text_of(answer.get("reason"));
        vote(
            "decision",
            v,
            &["allow", "approve"],
            &["deny", "block"],
            reason,
        )?;
    }
    if let Some(v) = answer.get("behavior") {
        let reason = text_of(answer.get("message"));
        vote("behavior", v, &["allow"], &["deny"], reason)?;
    }
    if let Some(specific) = answer.get("hookSpecificOutput") {
        let Value::Object(specific) = specific else {
            return Err(HookFailure(format!(
                "its answer's hookSpecificOutput is {specific}, not an object"
            )));
        };
        if let Some(name) = specific.get("hookEventName")
            && name.as_str() != Some(event.as_str())
        {
            return Err(HookFailure(format!(
                "its answer's hookSpecificOutput.hookEventName is {name}, not \"{}\"",
                event.as_str()
            )));
        }
        if let Some(v) = specific.get("permissionDecision") {
            let mut reason = text_of(specific.get("permissionDecisionReason"));
            // A hook cannot make the daemon ask the user: "ask" is no allow, so it denies.
            if v.as_str() == Some("ask") {
                reason = format!(
                    "the hook asked for the user's confirmation (permissionDecision \"ask\"), which a hook cannot request here{}",
                    if reason.is_empty() {
                        String::new()
                    } else {
                        format!(": {reason}")
                    }
                );
            }
            vote(
                "hookSpecificOutput.permissionDecision",
                v,
                &["allow"],
                &["deny", "ask"],
                reason,
            )?;
        }
    }
    if let Some(v) = answer.get("continue") {
        match v.as_bool() {
            Some(true) => {}
            Some(false) => votes.push(HookVerdict::Deny(text_of(answer.get("stopReason")))),
            None => {
                return Err(HookFailure(format!(
                    "its answer's continue is {v}, not true or false"
                )));
            }
        }
    }
    if let Some(deny) = votes.iter().find(|v| matches!(v, HookVerdict::Deny(_))) {
        return Ok(deny.clone());
    }
    if votes.is_empty() && event == HookEvent::PreToolUse {
        return Err(HookFailure(format!(
            "its answer has no decision (decision, behavior or hookSpecificOutput.permissionDecision): '{}'",
            excerpt(stdout)
        )));
    }
    Ok(HookVerdict::Allow)
}

/// Why a hook's answer cannot be read (it failed, timed out, or said something that is no
/// answer); the caller denies, with this as the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HookFailure(String);

impl HookFailure {
    /// How a hook failed, with the end of what it said on stderr.
    fn failed(what: &str, stderr: &str) -> Self {
        if stderr.is_empty() {
            HookFailure(what.to_string())
        } else {
            HookFailure(format!("{what}: {}", excerpt(stderr)))
        }
    }
}

/// At most 200 characters of `text`, for messages.
fn excerpt(text: &str) -> String {
    let mut out: String = text.chars().take(200).collect();
    if out.len() < text.len() {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
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

    /// Prompt hooks chain: each sees the prompt as the one before left it; an answer they
    /// cannot read blocks, as an unreadable tool hook denies.
    #[tokio::test]
    async fn prompt_hooks_chain_and_fail_closed() {
        let hooks = |cmds: &[&str]| {
            Hooks::new(
                cmds.iter()
                    .map(|c| HookConfig {
                        event: HookEvent::UserPromptSubmit,
                        command: (*c).into(),
                        matcher: None,
                        timeout_secs: 10.0,
                    })
                    .collect(),
                ChildSetup::default(),
            )
            .unwrap()
        };
        let dir = std::env::temp_dir();
        let payload = json!({"event": "UserPromptSubmit", "prompt": "hello"});
        let upper = r#"cat > /dev/null; echo '{"prompt": "HELLO"}'"#;
        let echo = r#"python3 -c 'import json,sys; p=json.load(sys.stdin)["prompt"]; print(json.dumps({"prompt": p + "!"}))'"#;
        assert_eq!(
            hooks(&[upper, echo]).submit_prompt(&payload, &dir).await,
            PromptVerdict::Rewrite("HELLO!".into())
        );
        assert_eq!(
            hooks(&["cat > /dev/null"])
                .submit_prompt(&payload, &dir)
                .await,
            PromptVerdict::Keep
        );
        for bad in [
            r#"cat > /dev/null; echo '{"prompt": 5}'"#,
            r#"cat > /dev/null; echo '{"prompt": ""}'"#,
            "cat > /dev/null; echo not json",
            "cat > /dev/null; exit 1",
        ] {
            assert!(
                matches!(
                    hooks(&[bad]).submit_prompt(&payload, &dir).await,
                    PromptVerdict::Block(_)
                ),
                "{bad}"
            );
        }
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

    #[test]
    fn answers_read_as_allow_only_when_they_say_so() {
        use HookEvent::{PostToolUse, PreToolUse};
        let pre = |code, out: &str| read_answer(PreToolUse, Some(code), out, "why");
        let allow = Ok(HookVerdict::Allow);
        assert_eq!(pre(0, ""), allow);
        for yes in [
            r#"{"decision":"allow"}"#,
            r#"{"decision":"approve","reason":"fine"}"#,
            r#"{"behavior":"allow"}"#,
            r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow"}}"#,
            r#"{"behavior":"allow","systemMessage":"extra fields are ignored"}"#,
        ] {
            assert_eq!(pre(0, yes), allow, "{yes}");
        }
        let deny = |r: &str| Ok(HookVerdict::Deny(r.to_string()));
        assert_eq!(pre(2, ""), deny("why"));
        assert_eq!(pre(2, r#"{"decision":"allow"}"#), deny("why"));
        assert_eq!(pre(0, r#"{"decision":"block","reason":"r"}"#), deny("r"));
        assert_eq!(pre(0, r#"{"behavior":"deny","message":"m"}"#), deny("m"));
        assert_eq!(pre(0, r#"{"behavior":"deny"}"#), deny(""));
        assert_eq!(
            pre(
                0,
                r#"{"hookSpecificOutput":{"permissionDecision":"deny","permissionDecisionReason":"p"}}"#
            ),
            deny("p")
        );
        // One deny among several fields wins.
        assert_eq!(
            pre(0, r#"{"decision":"allow","behavior":"deny"}"#),
            deny("")
        );
        assert_eq!(
            pre(
                0,
                r#"{"decision":"allow","continue":false,"stopReason":"s"}"#
            ),
            deny("s")
        );
        assert!(matches!(
            pre(0, r#"{"hookSpecificOutput":{"permissionDecision":"ask"}}"#),
            Ok(HookVerdict::Deny(r)) if r.contains("\"ask\"")
        ));
        for (bad, says) in [
            ("yes", "not JSON"),
            ("[1]", "not a JSON object"),
            ("{}", "no decision"),
            (r#"{"continue":true}"#, "no decision"),
            (r#"{"decision":"maybe"}"#, "decision is \"maybe\""),
            (r#"{"decision":true}"#, "decision is true"),
            (r#"{"behavior":"ask"}"#, "behavior is \"ask\""),
            (r#"{"hookSpecificOutput":"allow"}"#, "not an object"),
            (
                r#"{"hookSpecificOutput":{"hookEventName":"PostToolUse","permissionDecision":"allow"}}"#,
                "hookEventName",
            ),
            (r#"{"decision":"allow","behavior":"maybe"}"#, "behavior is"),
        ] {
            let e = pre(0, bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let e = pre(1, r#"{"decision":"allow"}"#).unwrap_err().to_string();
        assert!(e.contains("status 1") && e.contains("why"), "{e}");
        assert!(read_answer(PreToolUse, None, "", "").is_err());
        // An event that cannot stop anything need not decide, but a deny is still a deny.
        assert_eq!(read_answer(PostToolUse, Some(0), "{}", ""), allow);
        assert_eq!(
            read_answer(
                PostToolUse,
                Some(0),
                r#"{"decision":"block","reason":"r"}"#,
                ""
            ),
            deny("r")
        );
    }

    #[tokio::test]
    async fn a_deny_without_a_reason_names_the_hook() {
        let dir = tempfile::tempdir().unwrap();
        let p = json!({"toolName": "shell"});
        let h = hook(r#"cat >/dev/null; echo '{"behavior":"deny"}'"#, 5.0);
        assert!(matches!(
            h.run(HookEvent::PreToolUse, Some("shell"), &p, dir.path()).await,
            HookVerdict::Deny(r) if r.starts_with("denied by hook")
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
