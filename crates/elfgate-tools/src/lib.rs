//! Elfgate's tools: the [`Tool`] trait and registry, the built-in tools, and the security pipeline
//! pieces the agent engine runs every call through: [`ExecutionFirewall`], [`Hooks`], [`Guardian`]
//! and the [`PermissionBroker`]; [`gate`] puts them in order for every tool-like action.

#![warn(missing_docs)]

pub mod address_class;
pub mod ask;
pub mod confined;
mod file_access;
pub mod firewall;
pub mod fs_tools;
pub mod gate;
pub mod guardian;
pub mod hooks;
pub mod outbound;
pub mod permission;
pub mod process;
pub mod project_changes;
pub mod sandbox;
pub mod schema;
pub mod search;
pub mod session_tools;
pub mod shell;
pub mod terminal;
pub mod tool;
mod walk;
pub mod web;

pub use firewall::{Confinement, ExecutionFirewall, FirewallError};
pub use guardian::{Guardian, GuardianVerdict};
pub use hooks::{HookConfig, HookEvent, HookVerdict, Hooks, PromptVerdict};
pub use permission::{
    Ask, CallFacts, Caller, DEFAULT_MAX_REMEMBERED_DECISIONS, Decision, PendingRequest,
    PermissionAnswer, PermissionBroker, PermissionOutcome, PolicyDecision, ResolveError, Scope,
    TierPolicy, TierPolicyError,
};
pub use tool::{
    BuiltinTool, FirewallTargets, PermissionTier, Tool, ToolContext, ToolDecl, ToolError, ToolKind,
    ToolOutput, ToolRegistry, parse_args, truncate_result,
};

use std::sync::Arc;
use std::time::Duration;

/// Seconds from the configuration as a duration within `min..=max`; a value that is not a number
/// (NaN) or below `min` gives `min`, infinity gives `max` (`Duration::from_secs_f64` panics on
/// both).
pub fn clamped_secs(secs: f64, min: f64, max: f64) -> Duration {
    let s = if secs.is_nan() {
        min
    } else {
        secs.clamp(min, max)
    };
    Duration::from_secs_f64(s)
}

/// Settings of the built-in tools.
#[derive(Debug, Clone, Default)]
pub struct BuiltinSettings {
    /// shell's output cap.
    pub shell: shell::Shell,
    /// web_fetch's limits.
    pub web: web::WebFetch,
    /// web_search and its backend; without one there is no web_search tool.
    pub search: Option<search::WebSearch>,
}

/// A registry with every built-in tool (spawn is added by the engine).
pub fn builtin_registry(settings: &BuiltinSettings) -> ToolRegistry {
    let mut r = ToolRegistry::new();
    r.register(Arc::new(fs_tools::ReadFile));
    r.register(Arc::new(fs_tools::WriteFile));
    r.register(Arc::new(fs_tools::EditFile));
    r.register(Arc::new(fs_tools::ListDir));
    r.register(Arc::new(fs_tools::Glob));
    r.register(Arc::new(fs_tools::Grep));
    r.register(Arc::new(settings.shell.clone()));
    r.register(Arc::new(settings.web.clone()));
    if let Some(search) = &settings.search {
        r.register(Arc::new(search.clone()));
    }
    r.register(Arc::new(session_tools::ListSessions));
    r.register(Arc::new(session_tools::ReadSessionMessages));
    r.register(Arc::new(ask::AskUser));
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::check_args_schema;
    use serde_json::Value;

    /// Checks a tool's schema against the argument struct it parses its input into.
    type Check = fn(&Value) -> Result<(), crate::schema::SchemaMismatch>;

    #[test]
    fn every_builtin_tool_schema_says_what_its_arguments_need() {
        let checks: [(&str, Check); 11] = [
            ("read_file", check_args_schema::<fs_tools::ReadArgs>),
            ("write_file", check_args_schema::<fs_tools::WriteArgs>),
            ("edit_file", check_args_schema::<fs_tools::EditArgs>),
            ("list_dir", check_args_schema::<fs_tools::ListArgs>),
            ("glob", check_args_schema::<fs_tools::GlobArgs>),
            ("grep", check_args_schema::<fs_tools::GrepArgs>),
            ("shell", check_args_schema::<shell::ShellArgs>),
            ("web_fetch", check_args_schema::<web::WebArgs>),
            (
                "list_sessions",
                check_args_schema::<session_tools::ListSessionsArgs>,
            ),
            (
                "read_session_messages",
                check_args_schema::<session_tools::ReadSessionArgs>,
            ),
            ("ask_user", check_args_schema::<ask::AskArgs>),
        ];
        let registry = builtin_registry(&BuiltinSettings::default());
        let mut names = registry.names();
        names.sort();
        let mut checked: Vec<String> = checks.iter().map(|(n, _)| n.to_string()).collect();
        checked.sort();
        assert_eq!(names, checked, "a built-in tool without a schema check");
        for (name, check) in checks {
            let tool = registry.get(name).unwrap();
            check(&tool.schema()).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        // web_search is there when a backend is configured.
        let search = search::WebSearch::new(&search::WebSearchConfig {
            backend: search::SearchBackendKind::Searxng,
            url: Some("http://127.0.0.1:9".into()),
            api_key_env: None,
            max_results: 5,
            timeout_secs: 1.0,
        })
        .unwrap();
        let registry = builtin_registry(&BuiltinSettings {
            search: Some(search),
            ..BuiltinSettings::default()
        });
        let tool = registry.get("web_search").unwrap();
        check_args_schema::<search::SearchArgs>(&tool.schema()).unwrap();
    }
}
