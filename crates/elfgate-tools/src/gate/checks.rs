//! The gates before a tool runs, each a small function: what it looks at goes in, a permit or a
//! [`Refusal`] naming the gate comes out.

use super::{Refusal, Stop};
use crate::firewall::ExecutionFirewall;
use crate::guardian::GuardianVerdict;
use crate::hooks::{HookEvent, HookVerdict, Hooks};
use crate::permission::{CallFacts, PermissionOutcome, PolicyDecision, TierPolicy};
use crate::tool::{FirewallTargets, PermissionTier};
use elfgate_core::{ChannelPermissions, Gate, PermissionMode};
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// The names of providers' own search tools. No run asks a provider to search yet, so a call to
/// one (without a local tool of that name) is answered as what it is: not run, and why, rather
/// than as a search that happened.
pub const NATIVE_SEARCH_TOOLS: &[&str] = &["web_search", "web_search_preview", "google_search"];

/// The native-search skip: a call by a provider's own search tool's name is not run here when
/// there is no local tool of that name (`local_tool` false), or when the run asked the provider
/// to search itself (`native_search`: the local one was not offered). Err: the error the model
/// reads, naming the tools it has (`available`).
pub fn native_search(
    name: &str,
    local_tool: bool,
    native_search: bool,
    available: &[String],
) -> Result<(), String> {
    if (local_tool && !native_search) || !NATIVE_SEARCH_TOOLS.contains(&name) {
        return Ok(());
    }
    Err(if native_search {
        let others: Vec<&str> = available
            .iter()
            .map(String::as_str)
            .filter(|n| !NATIVE_SEARCH_TOOLS.contains(n))
            .collect();
        format!(
            "Error: {name} is the provider's own search, which this run asked the provider to run \
             itself (nativeSearchEnabled); it came back as a call instead, and nothing was \
             searched here. Available tools: {}",
            others.join(", ")
        )
    } else {
        format!(
            "Error: {name} is a model provider's own search tool, and this run did not ask the \
             provider to search: nothing was searched. Available tools: {}",
            available.join(", ")
        )
    })
}

/// The channel role: a chat channel's user whose `canUseTool` is false runs no tool.
pub fn channel_role(channel: Option<ChannelPermissions>) -> Result<(), Refusal> {
    if channel.is_some_and(|c| !c.can_use_tool) {
        return Err(Refusal::new(
            Gate::Channel,
            "this channel user may not use tools (canUseTool is false)",
        ));
    }
    Ok(())
}

/// A session without a project runs no file or shell tool (`works_in_project`): there is no
/// folder the firewall could confine it to.
pub fn project(has_project: bool, works_in_project: bool, name: &str) -> Result<(), Refusal> {
    if !has_project && works_in_project {
        return Err(Refusal::new(
            Gate::Project,
            format!(
                "this session has no projectPath, so {name} cannot run: the file and shell tools \
                 work only in a project (set projectPath when starting the session, or the \
                 x-elfgate-project-path header on the gateway)"
            ),
        ));
    }
    Ok(())
}

/// The PreToolUse hooks matching `tool`, run on `payload` in `cwd`: the first deny refuses (a
/// hook that fails denies).
pub async fn pre_tool_use(
    hooks: &Hooks,
    tool: &str,
    payload: &Value,
    cwd: &Path,
) -> Result<(), Refusal> {
    if !hooks.has(HookEvent::PreToolUse) {
        return Ok(());
    }
    match hooks
        .run(HookEvent::PreToolUse, Some(tool), payload, cwd)
        .await
    {
        HookVerdict::Allow => Ok(()),
        HookVerdict::Deny(reason) => Err(Refusal::new(
            Gate::Hook,
            format!("a PreToolUse hook refused it: {reason}"),
        )),
    }
}

/// The ExecutionFirewall: every path the call touches resolves inside `project` and outside the
/// deny zones, and its command matches no denied pattern.
pub fn firewall(
    firewall: &ExecutionFirewall,
    project: &Path,
    targets: &FirewallTargets,
) -> Result<(), Refusal> {
    let blocked = |e: crate::FirewallError| {
        Refusal::new(Gate::Firewall, format!("blocked by the firewall: {e}"))
    };
    for p in &targets.paths {
        firewall.resolve_path(project, p).map_err(blocked)?;
    }
    if let Some(cmd) = &targets.command {
        firewall.check_command(cmd).map_err(blocked)?;
    }
    Ok(())
}

/// Whether the guardian reviews a call of `tier`: every tier but read_only, and read_only too
/// with `review_read_only`.
pub fn guardian_reviews(tier: PermissionTier, review_read_only: bool) -> bool {
    tier != PermissionTier::ReadOnly || review_read_only
}

/// The guardian's verdict as the gate's answer.
pub fn guardian_verdict(verdict: GuardianVerdict) -> Result<(), Refusal> {
    match verdict {
        GuardianVerdict::Allow => Ok(()),
        GuardianVerdict::Block(reason) => Err(Refusal::new(Gate::Guardian, reason)),
    }
}

/// What the tier and permission gate lets through without a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    /// It may run.
    Granted,
    /// The client must be asked first.
    Ask,
}

/// The permission policy on one call's facts: granted, to ask, or refused (gate `policy`).
pub fn policy(policy: &TierPolicy, facts: &CallFacts) -> Result<Permission, Refusal> {
    match policy.decide(facts) {
        PolicyDecision::Allow => Ok(Permission::Granted),
        PolicyDecision::Ask => Ok(Permission::Ask),
        PolicyDecision::Deny(reason) => Err(Refusal::new(Gate::Policy, reason)),
    }
}

/// The client's answer to a permission request as the gate's: allowed, interrupted, or refused
/// (gate `permission`; `timeout` is how long the request waited, for the message).
pub fn permission_answer(outcome: &PermissionOutcome, timeout: Duration) -> Result<(), Stop> {
    if *outcome == PermissionOutcome::Interrupted {
        return Err(Stop::Interrupted);
    }
    match outcome.denial(timeout) {
        Some(why) => Err(Refusal::new(Gate::Permission, why).into()),
        None => Ok(()),
    }
}

/// The permission mode's word on an ACP agent's request of `kind` (the protocol's tool kinds:
/// read, edit, execute, ...): bypassPermissions allows all, acceptEdits allows edits, plan
/// allows only reading (and refuses the rest, gate `policy`); anything else asks the client.
pub fn acp_mode(mode: PermissionMode, kind: &str) -> Result<Permission, Refusal> {
    match (mode, kind) {
        (PermissionMode::BypassPermissions, _)
        | (PermissionMode::AcceptEdits, "edit")
        | (PermissionMode::Plan, "read" | "search" | "fetch" | "think") => Ok(Permission::Granted),
        (PermissionMode::Plan, _) => Err(Refusal::new(
            Gate::Policy,
            "the session is in plan mode: only reading is allowed",
        )),
        _ => Ok(Permission::Ask),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::HookConfig;
    use crate::permission::Caller;
    use crate::process::ChildSetup;
    use crate::tool::ToolKind;
    use serde_json::json;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| (*s).to_string()).collect()
    }

    #[test]
    fn a_providers_search_is_not_run_here() {
        let tools = names(&["read_file", "web_search"]);
        // A local web_search runs, unless the provider was asked to search itself.
        assert_eq!(native_search("web_search", true, false, &tools), Ok(()));
        let asked = native_search("web_search", true, true, &tools).unwrap_err();
        assert!(asked.contains("nativeSearchEnabled"), "{asked}");
        assert!(asked.ends_with("Available tools: read_file"), "{asked}");
        let unasked = native_search("google_search", false, false, &tools).unwrap_err();
        assert!(unasked.contains("did not ask the provider"), "{unasked}");
        assert!(unasked.ends_with("read_file, web_search"), "{unasked}");
        // Other names are not this gate's.
        assert_eq!(native_search("nope", false, true, &tools), Ok(()));
    }

    #[test]
    fn a_channel_user_without_tools_is_refused() {
        assert_eq!(channel_role(None), Ok(()));
        let allowed = ChannelPermissions {
            can_use_tool: true,
            require_confirmation: true,
        };
        assert_eq!(channel_role(Some(allowed)), Ok(()));
        let refused = channel_role(Some(ChannelPermissions {
            can_use_tool: false,
            require_confirmation: false,
        }))
        .unwrap_err();
        assert_eq!(refused.gate, Gate::Channel);
        assert!(refused.why.contains("canUseTool"), "{refused}");
    }

    #[test]
    fn file_tools_need_a_project() {
        assert_eq!(project(true, true, "read_file"), Ok(()));
        assert_eq!(project(false, false, "web_fetch"), Ok(()));
        let refused = project(false, true, "shell").unwrap_err();
        assert_eq!(refused.gate, Gate::Project);
        assert!(
            refused.why.contains("no projectPath, so shell"),
            "{refused}"
        );
    }

    #[tokio::test]
    async fn a_denying_hook_refuses_and_others_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let hooks = |cmd: &str| {
            Hooks::new(
                vec![HookConfig {
                    event: HookEvent::PreToolUse,
                    command: cmd.into(),
                    matcher: Some("shell".into()),
                    timeout_secs: 10.0,
                }],
                ChildSetup::default(),
            )
            .unwrap()
        };
        let payload = json!({"event": "PreToolUse", "toolName": "shell"});
        let deny = hooks(r#"cat > /dev/null; echo '{"decision": "deny", "reason": "no"}'"#);
        let refused = pre_tool_use(&deny, "shell", &payload, dir.path())
            .await
            .unwrap_err();
        assert_eq!(refused.gate, Gate::Hook);
        assert!(
            refused.why.starts_with("a PreToolUse hook refused it"),
            "{refused}"
        );
        // The matcher leaves other tools alone; no hook at all allows.
        assert_eq!(
            pre_tool_use(&deny, "read_file", &payload, dir.path()).await,
            Ok(())
        );
        let none = Hooks::new(vec![], ChildSetup::default()).unwrap();
        assert_eq!(
            pre_tool_use(&none, "shell", &payload, dir.path()).await,
            Ok(())
        );
    }

    #[test]
    fn the_firewall_refuses_paths_and_commands() {
        let dir = tempfile::tempdir().unwrap();
        let fw = ExecutionFirewall::new(vec![], &["forbidden-cmd".to_string()]).unwrap();
        let inside = FirewallTargets {
            paths: vec!["a.txt".into()],
            command: Some("ls".into()),
        };
        assert_eq!(firewall(&fw, dir.path(), &inside), Ok(()));
        for targets in [
            FirewallTargets {
                paths: vec!["../outside.txt".into()],
                command: None,
            },
            FirewallTargets {
                paths: vec![],
                command: Some("forbidden-cmd --now".into()),
            },
        ] {
            let refused = firewall(&fw, dir.path(), &targets).unwrap_err();
            assert_eq!(refused.gate, Gate::Firewall);
            assert!(
                refused.why.starts_with("blocked by the firewall"),
                "{refused}"
            );
        }
    }

    #[test]
    fn the_guardian_reviews_all_but_reads_unless_asked_and_its_block_refuses() {
        assert!(guardian_reviews(PermissionTier::AlwaysConfirm, false));
        assert!(!guardian_reviews(PermissionTier::ReadOnly, false));
        assert!(guardian_reviews(PermissionTier::ReadOnly, true));
        assert_eq!(guardian_verdict(GuardianVerdict::Allow), Ok(()));
        let refused = guardian_verdict(GuardianVerdict::Block("unsafe".into())).unwrap_err();
        assert_eq!(refused, Refusal::new(Gate::Guardian, "unsafe"));
    }

    #[test]
    fn the_policy_grants_asks_or_refuses() {
        let p = TierPolicy::default();
        let facts = |tier, mode| CallFacts {
            tier,
            kind: ToolKind::Execute,
            mode,
            require_confirmation: false,
            remembered: None,
            caller: Caller::Model,
        };
        let read = facts(PermissionTier::ReadOnly, PermissionMode::Default);
        assert_eq!(policy(&p, &read), Ok(Permission::Granted));
        let confirm = facts(PermissionTier::AlwaysConfirm, PermissionMode::Default);
        assert_eq!(policy(&p, &confirm), Ok(Permission::Ask));
        let plan = facts(PermissionTier::AlwaysConfirm, PermissionMode::Plan);
        assert_eq!(policy(&p, &plan).unwrap_err().gate, Gate::Policy);
    }

    #[test]
    fn the_clients_answer_allows_refuses_or_interrupts() {
        let t = Duration::from_secs(2);
        assert_eq!(permission_answer(&PermissionOutcome::Allowed, t), Ok(()));
        assert_eq!(
            permission_answer(&PermissionOutcome::Interrupted, t),
            Err(Stop::Interrupted)
        );
        for outcome in [
            PermissionOutcome::Denied(Some("not now".into())),
            PermissionOutcome::TimedOut,
            PermissionOutcome::Unanswerable,
        ] {
            match permission_answer(&outcome, t) {
                Err(Stop::Refused(r)) => assert_eq!(r.gate, Gate::Permission, "{outcome:?}"),
                other => panic!("{outcome:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn an_acp_agents_request_follows_the_mode() {
        use PermissionMode::*;
        assert_eq!(
            acp_mode(BypassPermissions, "execute"),
            Ok(Permission::Granted)
        );
        assert_eq!(acp_mode(AcceptEdits, "edit"), Ok(Permission::Granted));
        assert_eq!(acp_mode(AcceptEdits, "execute"), Ok(Permission::Ask));
        assert_eq!(acp_mode(Default, "edit"), Ok(Permission::Ask));
        assert_eq!(acp_mode(Plan, "read"), Ok(Permission::Granted));
        let refused = acp_mode(Plan, "edit").unwrap_err();
        assert_eq!(refused.gate, Gate::Policy);
        assert!(refused.why.contains("plan mode"), "{refused}");
    }
}
