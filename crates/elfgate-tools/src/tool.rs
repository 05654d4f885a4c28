//! The Tool trait, the context a tool runs in, and the registry of tools.

use crate::firewall::{ExecutionFirewall, FirewallError};
use crate::process::{ChildSetup, ProcessError};
use async_trait::async_trait;
use elfgate_core::SessionId;
use elfgate_llm::ToolSpec;
use elfgate_store::SessionReads;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// How much asking a tool needs before it runs (defined in elfgate-core, which events name it in).
pub use elfgate_core::PermissionTier;

/// What a tool does, for permission modes (`acceptEdits` allows edits, `plan` only reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolKind {
    /// Reads only.
    Read,
    /// Changes files in the project.
    Edit,
    /// Runs commands.
    Execute,
    /// Reaches the network.
    Network,
    /// Starts sub-agents (their own calls go through the pipeline).
    Agent,
}

/// What the firewall must check before a call runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FirewallTargets {
    /// Paths the call touches, as the model gave them.
    pub paths: Vec<String>,
    /// A shell command the call runs.
    pub command: Option<String>,
}

/// What a tool returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    /// The text the model sees.
    pub content: String,
    /// Whether the call failed.
    pub is_error: bool,
    /// The tool asks the loop to stop after this iteration (YieldSignal).
    pub yield_run: bool,
}

impl ToolOutput {
    /// A successful result.
    pub fn ok(content: impl Into<String>) -> Self {
        ToolOutput {
            content: content.into(),
            is_error: false,
            yield_run: false,
        }
    }

    /// A failed result the model can act on.
    pub fn error(content: impl Into<String>) -> Self {
        ToolOutput {
            content: content.into(),
            is_error: true,
            yield_run: false,
        }
    }
}

/// Why a tool failed.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The input does not match the schema.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The firewall refused a path or command.
    #[error(transparent)]
    Firewall(#[from] FirewallError),
    /// An I/O error.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A command could not be run.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// The call was interrupted.
    #[error("interrupted")]
    Interrupted,
    /// Anything else.
    #[error("{0}")]
    Failed(String),
}

/// A tool's input parsed into its argument struct; a mismatch is an input error the model sees.
pub fn parse_args<T: serde::de::DeserializeOwned>(input: Value) -> Result<T, ToolError> {
    serde_json::from_value(input).map_err(|e| ToolError::InvalidInput(e.to_string()))
}

/// Where and for whom a tool runs.
#[derive(Clone)]
pub struct ToolContext {
    /// The session's project directory.
    pub project_path: PathBuf,
    /// The session.
    pub session_id: SessionId,
    /// Fired on interrupt or timeout; a tool stops promptly when it fires.
    pub cancel: CancellationToken,
    /// Checks paths and commands.
    pub firewall: Arc<ExecutionFirewall>,
    /// Read access to stored sessions (session tools).
    pub store: Option<Arc<dyn SessionReads>>,
    /// The environment and network of the commands the call runs (shell).
    pub child: ChildSetup,
}

impl fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolContext")
            .field("project_path", &self.project_path)
            .field("session_id", &self.session_id)
            .finish()
    }
}

impl ToolContext {
    /// Resolves a path the model gave against the project, through the firewall.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, FirewallError> {
        self.firewall.resolve_path(&self.project_path, path)
    }
}

/// A tool the model may call.
#[async_trait]
pub trait Tool: Send + Sync {
    /// Its name, as the model calls it.
    fn name(&self) -> &str;
    /// What it does, for the model.
    fn description(&self) -> &str;
    /// JSON Schema of its input object.
    fn schema(&self) -> Value;
    /// Its default permission tier.
    fn tier(&self) -> PermissionTier;
    /// What kind of thing it does.
    fn kind(&self) -> ToolKind;
    /// The paths and command the firewall must check for this input.
    fn firewall_targets(&self, _input: &Value) -> FirewallTargets {
        FirewallTargets::default()
    }
    /// Whether it works on the session's project directory (the file and shell tools): a session
    /// without a projectPath refuses such calls instead of letting them reach some other folder.
    fn works_in_project(&self) -> bool {
        false
    }
    /// Runs it. Must stop promptly when `ctx.cancel` fires.
    async fn execute(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError>;
}

/// What a built-in tool is, declared once: its [`Tool`] metadata comes from here, its schema from
/// its argument type.
#[derive(Debug, Clone, Copy)]
pub struct ToolDecl {
    /// Its name, as the model calls it.
    pub name: &'static str,
    /// What it does, for the model.
    pub description: &'static str,
    /// Its default permission tier.
    pub tier: PermissionTier,
    /// What kind of thing it does.
    pub kind: ToolKind,
    /// Whether it works on the session's project directory (see [`Tool::works_in_project`]).
    pub works_in_project: bool,
}

/// A tool whose name, description and schema are known when the daemon is built: one
/// [`ToolDecl`], typed arguments (parsed before [`BuiltinTool::run`], so that a wrong one is an
/// `InvalidInput` the same way for every tool), and the work. Every such type is a [`Tool`].
/// Tools learned at run time (an MCP server's) implement [`Tool`] themselves.
#[async_trait]
pub trait BuiltinTool: Send + Sync {
    /// The arguments, as the model sends them; their JSON schema is the tool's.
    type Args: serde::de::DeserializeOwned + schemars::JsonSchema + Send;
    /// What it is.
    const DECL: ToolDecl;
    /// The paths and command the firewall must check for this input (none by default).
    fn targets(&self, _input: &Value) -> FirewallTargets {
        FirewallTargets::default()
    }
    /// Runs it. Must stop promptly when `ctx.cancel` fires.
    async fn run(&self, args: Self::Args, ctx: &ToolContext) -> Result<ToolOutput, ToolError>;
}

#[async_trait]
impl<T: BuiltinTool> Tool for T {
    fn name(&self) -> &str {
        T::DECL.name
    }
    fn description(&self) -> &str {
        T::DECL.description
    }
    fn schema(&self) -> Value {
        crate::schema::schema_of::<T::Args>()
    }
    fn tier(&self) -> PermissionTier {
        T::DECL.tier
    }
    fn kind(&self) -> ToolKind {
        T::DECL.kind
    }
    fn firewall_targets(&self, input: &Value) -> FirewallTargets {
        self.targets(input)
    }
    fn works_in_project(&self) -> bool {
        T::DECL.works_in_project
    }
    async fn execute(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: T::Args = parse_args(input)?;
        self.run(args, ctx).await
    }
}

/// Tools by name, with per-name tier overrides.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
    tiers: BTreeMap<String, PermissionTier>,
}

impl fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolRegistry")
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a tool.
    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.name().to_string(), tool);
    }

    /// Overrides a tool's tier.
    pub fn set_tier(&mut self, name: impl Into<String>, tier: PermissionTier) {
        self.tiers.insert(name.into(), tier);
    }

    /// A tool by name.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.get(name).cloned()
    }

    /// The tier that applies to a tool (override, else the tool's own).
    pub fn tier_of(&self, tool: &dyn Tool) -> PermissionTier {
        self.tiers
            .get(tool.name())
            .copied()
            .unwrap_or_else(|| tool.tier())
    }

    /// The tool names.
    pub fn names(&self) -> Vec<String> {
        self.tools.keys().cloned().collect()
    }

    /// The registry without the tools `keep` refuses (by name).
    pub fn retain(mut self, keep: impl Fn(&str) -> bool) -> ToolRegistry {
        self.tools.retain(|name, _| keep(name));
        self
    }

    /// A registry with only the named tools (unknown names are ignored).
    pub fn only(&self, names: &[String]) -> ToolRegistry {
        ToolRegistry {
            tools: self
                .tools
                .iter()
                .filter(|(k, _)| names.iter().any(|n| n == *k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            tiers: self.tiers.clone(),
        }
    }

    /// A registry without the named tools.
    pub fn without(&self, names: &[&str]) -> ToolRegistry {
        ToolRegistry {
            tools: self
                .tools
                .iter()
                .filter(|(k, _)| !names.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            tiers: self.tiers.clone(),
        }
    }

    /// The specs the model sees.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .values()
            .map(|t| ToolSpec {
                name: t.name().to_string(),
                description: t.description().to_string(),
                input_schema: t.schema(),
            })
            .collect()
    }
}

/// Truncates `text` to at most `max` characters, with a visible marker saying how much was cut.
pub fn truncate_result(text: &str, max: usize) -> String {
    let total = text.chars().count();
    if total <= max {
        return text.to_string();
    }
    let kept: String = text.chars().take(max).collect();
    format!(
        "{kept}\n\n[... output truncated: showing {max} of {total} characters ({} omitted) ...]",
        total - max
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_short_text_and_marks_long_text() {
        assert_eq!(truncate_result("abc", 3), "abc");
        let t = truncate_result("abcdef", 4);
        assert!(t.starts_with("abcd\n"));
        assert!(t.contains("output truncated: showing 4 of 6 characters (2 omitted)"));
        // Multi-byte characters are never split.
        let t = truncate_result("ééé", 2);
        assert!(t.starts_with("éé\n"));
    }
}
