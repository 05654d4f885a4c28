//! The closed sets of names a client picks from: thinking levels, permission modes, the shell
//! network and the coding CLIs. Each is defined once here, with the exact wire names, so that request parsing,
//! engines and provider clients cannot disagree about them.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A name that is not one of an enum's wire names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} '{given}' is not one of {expected}")]
pub struct UnknownName {
    /// The field, as the API spells it.
    pub what: &'static str,
    /// What was given.
    pub given: String,
    /// The accepted names, comma separated.
    pub expected: String,
}

/// Declares an enum whose serde names, `as_str`, `Display` and `FromStr` all come from one list
/// of wire names, so they cannot drift apart. The names are `tt`, not `literal`: a `literal`
/// fragment reaches derive macros wrapped in an invisible group, which utoipa does not read, so
/// the OpenAPI document would show the Rust names.
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident as $what:literal {
            $($(#[$vmeta:meta])* $variant:ident = $wire:tt,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize,
            utoipa::ToSchema,
        )]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $wire)] $variant,)+
        }

        impl $name {
            /// Every value, in the documented order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The wire name.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $wire,)+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownName;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::ALL
                    .iter()
                    .copied()
                    .find(|v| v.as_str() == s)
                    .ok_or_else(|| UnknownName {
                        what: $what,
                        given: s.to_string(),
                        expected: Self::ALL
                            .iter()
                            .map(|v| v.as_str())
                            .collect::<Vec<_>>()
                            .join(", "),
                    })
            }
        }
    };
}

wire_enum! {
    /// How much reasoning the model should do (`thinkingLevel`).
    #[derive(Default)]
    pub enum ThinkingLevel as "thinkingLevel" {
        /// No extended reasoning requested.
        #[default]
        None = "none",
        /// A little reasoning.
        Low = "low",
        /// A moderate amount of reasoning.
        Medium = "medium",
        /// A lot of reasoning.
        High = "high",
    }
}

wire_enum! {
    /// Which tool calls run without asking the client (`permissionMode`).
    #[derive(Default)]
    pub enum PermissionMode as "permissionMode" {
        /// Read-only tools run; the others ask (confirm_once tools once per session).
        #[default]
        Default = "default",
        /// Like default, and tools that edit project files run without asking.
        AcceptEdits = "acceptEdits",
        /// Every tool runs without asking (manual_only tools still never run).
        BypassPermissions = "bypassPermissions",
        /// Only read-only tools run; the others are denied.
        Plan = "plan",
    }
}

wire_enum! {
    /// Which network shell commands and hooks get (`shellNetwork`, `shell_network`).
    #[derive(Default)]
    pub enum Network as "shellNetwork" {
        /// A private network namespace (when the host allows one).
        #[default]
        Isolated = "isolated",
        /// The daemon's own network.
        Host = "host",
    }
}

wire_enum! {
    /// A coding CLI the cli engine runs (`cliBackend`).
    #[derive(PartialOrd, Ord)]
    pub enum CliBackend as "cliBackend" {
        /// OpenAI's `codex exec --json`.
        Codex = "codex",
        /// Anthropic's `claude -p` with stream-json in and out.
        ClaudeCode = "claude-code",
        /// Google's `gemini -p` with stream-json out.
        GeminiCli = "gemini-cli",
        /// An agent spoken to with the Agent Client Protocol over its stdio (the session's
        /// `acpAgent`, configured under `[engines.cli.acp.agents]`).
        Acp = "acp",
    }
}

/// A client's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// Run it.
    Allow,
    /// Do not run it.
    Deny,
}

impl Decision {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Deny => "deny",
        }
    }
}

/// How long a decision holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// This call only.
    #[default]
    Once,
    /// Every later call of this tool in this session.
    Session,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_round_trip_through_serde_and_from_str() {
        for l in ThinkingLevel::ALL {
            let v = serde_json::to_value(l).unwrap();
            assert_eq!(v, l.as_str());
            assert_eq!(serde_json::from_value::<ThinkingLevel>(v).unwrap(), *l);
            assert_eq!(l.as_str().parse::<ThinkingLevel>().unwrap(), *l);
        }
        for m in PermissionMode::ALL {
            assert_eq!(serde_json::to_value(m).unwrap(), m.as_str());
            assert_eq!(m.as_str().parse::<PermissionMode>().unwrap(), *m);
        }
        assert_eq!(
            serde_json::to_value(PermissionMode::AcceptEdits).unwrap(),
            "acceptEdits"
        );
        assert_eq!(ThinkingLevel::default(), ThinkingLevel::None);
        assert_eq!(PermissionMode::default(), PermissionMode::Default);
        assert_eq!(Network::default(), Network::Isolated);
    }

    #[test]
    fn typed_event_fields_keep_their_wire_names() {
        use crate::event::{EventPayload, StepKind};
        let resolved = EventPayload::PermissionResolved {
            request_id: "r".into(),
            decision: Decision::Deny,
        };
        assert_eq!(
            serde_json::to_value(&resolved).unwrap(),
            serde_json::json!({"type": "permissionResolved", "requestId": "r", "decision": "deny"})
        );
        for tier in [
            PermissionTier::ReadOnly,
            PermissionTier::ConfirmOnce,
            PermissionTier::AlwaysConfirm,
            PermissionTier::ManualOnly,
        ] {
            assert_eq!(serde_json::to_value(tier).unwrap(), tier.as_str());
            assert_eq!(tier.as_str().parse::<PermissionTier>().unwrap(), tier);
        }
        assert_eq!(
            serde_json::to_value(PermissionTier::ConfirmOnce).unwrap(),
            "confirm_once"
        );
        for kind in [
            StepKind::Tool,
            StepKind::Model,
            StepKind::Agent,
            StepKind::If,
        ] {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.as_str());
        }
        assert_eq!(serde_json::to_value(StepKind::If).unwrap(), "if");
    }

    #[test]
    fn an_unknown_name_lists_the_accepted_ones() {
        let e = "yolo".parse::<PermissionMode>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "permissionMode 'yolo' is not one of default, acceptEdits, bypassPermissions, plan"
        );
        let e = "huge".parse::<ThinkingLevel>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "thinkingLevel 'huge' is not one of none, low, medium, high"
        );
    }
}

wire_enum! {
    /// Which gate of the tool pipeline blocked a call (`gate` of an audit record).
    pub enum Gate as "gate" {
        /// The channel's user may not use tools (canUseTool false).
        Channel = "channel",
        /// The session has no projectPath for a file or shell tool.
        Project = "project",
        /// A PreToolUse hook denied it (or failed: fail closed).
        Hook = "hook",
        /// The ExecutionFirewall refused a path or a command.
        Firewall = "firewall",
        /// The guardian model judged it unsafe (or could not judge: fail closed).
        Guardian = "guardian",
        /// The permission policy denied it without asking (manual_only, plan mode, a
        /// remembered deny).
        Policy = "policy",
        /// The client was asked and denied it, nobody answered in time, or nobody could.
        Permission = "permission",
    }
}

/// How much asking a tool needs before it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PermissionTier {
    /// Never asks.
    ReadOnly,
    /// Asks once per session and tool.
    ConfirmOnce,
    /// Asks every time.
    AlwaysConfirm,
    /// The model can never run it.
    ManualOnly,
}

impl PermissionTier {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionTier::ReadOnly => "read_only",
            PermissionTier::ConfirmOnce => "confirm_once",
            PermissionTier::AlwaysConfirm => "always_confirm",
            PermissionTier::ManualOnly => "manual_only",
        }
    }
}

impl fmt::Display for PermissionTier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PermissionTier {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "read_only" => Ok(PermissionTier::ReadOnly),
            "confirm_once" => Ok(PermissionTier::ConfirmOnce),
            "always_confirm" => Ok(PermissionTier::AlwaysConfirm),
            "manual_only" => Ok(PermissionTier::ManualOnly),
            other => Err(format!("unknown permission tier '{other}'")),
        }
    }
}

wire_enum! {
    /// What a principal may do (`role`): see docs/security.md, "Principals and keys".
    pub enum PrincipalRole as "role" {
        /// Everything, key management included (the daemon's token is the admin `root`).
        Admin = "admin",
        /// Starts and steers its own sessions and its team's shared ones.
        Member = "member",
        /// Reads its team's shared sessions; changes nothing.
        Viewer = "viewer",
    }
}

wire_enum! {
    /// Who besides its owner sees a session (`visibility`).
    #[derive(Default)]
    pub enum Visibility as "visibility" {
        /// The owner's team: its members steer it, its viewers read it.
        #[default]
        Team = "team",
        /// The owner alone (and admins).
        Private = "private",
    }
}

wire_enum! {
    /// How far a key may go with workflows (its `scopes.workflows`).
    pub enum WorkflowScope as "scopes.workflows" {
        /// Start runs of its team's workflows.
        Run = "run",
        /// Start runs, and create, change and delete its team's workflows.
        Manage = "manage",
    }
}

wire_enum! {
    /// How long a budget's spending adds up before it starts again from zero (UTC calendar
    /// periods; `total` never starts again).
    pub enum BudgetPeriod as "period" {
        /// A UTC calendar day.
        Day = "day",
        /// A week from Monday, UTC.
        Week = "week",
        /// A UTC calendar month.
        Month = "month",
        /// Never starts again.
        Total = "total",
    }
}

wire_enum! {
    /// Where a budget was set.
    pub enum BudgetSource as "source" {
        /// `POST /v1/admin/budgets`: changed and deleted through the API.
        Api = "api",
        /// `[[budgets]]` in the configuration: read-only through the API.
        Config = "config",
        /// A session's own account (engineConfig `maxCostUsd`): not listed.
        Session = "session",
    }
}
