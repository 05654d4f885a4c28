//! The `tinyelf` engine: the agent loop. It calls the model (with retries), strips `<think>` tags,
//! runs every tool call of a response concurrently through the security pipeline, persists each
//! iteration, and loops until the model stops, the iteration limit, an interrupt or an error.
//! See docs/tinyelf.md.

mod agent;
pub mod context;
mod history;
mod mcp;
mod pipeline;
mod prepare;
mod runner;
pub mod settings;
mod spawn;
mod subagents;
mod tool_run;

pub use context::skills::{self, Skill, SkillProblem, SkillSet, SkillSource};
pub use elfgate_tools::gate::{ToolRunAnswer, ToolRunError, ToolRuns};
pub use settings::{GuardianConfig, TinyElfConfig};

use crate::chat::ToolLoop;
use crate::providers::ProviderRegistry;
use crate::streaming::fail;
use async_trait::async_trait;
use elfgate_core::sync::lock;
use elfgate_core::{
    Engine, EngineSessionContext, EngineType, ErrorCode, EventPayload, Role, RunOutcome,
};
use elfgate_mcp::McpManager;
use elfgate_store::Store;
use elfgate_tools::process::{ChildEnv, Network};
use elfgate_tools::{
    BuiltinSettings, ExecutionFirewall, FirewallError, HookEvent, HookVerdict, Hooks,
    PermissionBroker, PermissionTier, ToolRegistry,
};
use runner::{Agent, Runner};
use serde_json::json;
use settings::RunSettings;
use std::path::PathBuf;
use std::sync::Arc;

/// A TinyElf configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TinyElfError {
    /// A firewall setting is wrong.
    #[error(transparent)]
    Firewall(#[from] FirewallError),
    /// A hook setting is wrong.
    #[error(transparent)]
    Hooks(#[from] elfgate_tools::hooks::HookConfigError),
    /// The permission policy's settings are wrong.
    #[error("engines.tinyelf.{0}")]
    Policy(#[from] elfgate_tools::TierPolicyError),
    /// A tier override names an unknown tier.
    #[error("engines.tinyelf.tool_tiers: {0}")]
    Tier(String),
    /// `[tools.web_search]` cannot be used.
    #[error(transparent)]
    Search(#[from] elfgate_tools::search::SearchConfigError),
}

/// What a run resolves before anything else (see `TinyElfEngine::prepare`).
pub(crate) struct Prepared {
    pub(crate) provider_name: String,
    pub(crate) provider: Arc<dyn elfgate_llm::LlmProvider>,
    pub(crate) model: String,
    /// None for an agent session without a projectPath.
    pub(crate) project: Option<PathBuf>,
    pub(crate) rs: RunSettings,
}

/// What the engine shares between runs.
pub(crate) struct Inner {
    /// The latest compaction summary of each session (docs/context.md, "auto-compact").
    pub(crate) summaries: context::fit::Summaries,
    /// Tool runs waiting for their answer (tool_run.rs).
    pub(crate) tool_waiters: tool_run::Waiters,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) providers: ProviderRegistry,
    pub(crate) config: TinyElfConfig,
    pub(crate) broker: Arc<PermissionBroker>,
    /// Which calls run, ask or are denied (tier x mode x caller).
    pub(crate) policy: elfgate_tools::TierPolicy,
    pub(crate) firewall: Arc<ExecutionFirewall>,
    pub(crate) hooks: Arc<Hooks>,
    pub(crate) tools: ToolRegistry,
    /// Children's environment before a session's additions.
    child_env: ChildEnv,
    /// MCP servers (none in a daemon built without them).
    mcp: Option<McpManager>,
    /// Sessions with a run going on, for the count a reload answers.
    running: std::sync::Mutex<std::collections::HashSet<elfgate_core::SessionId>>,
}

/// The agent engine.
pub struct TinyElfEngine {
    inner: Arc<Inner>,
}

/// Whose run the loop serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flavor {
    /// A tinyelf session: built-in tools, a project, the agent's system prompt.
    Agent,
    /// A chat session that set mcpConfig: its MCP tools only, its own system prompt, no project
    /// needed.
    Chat,
}

/// The chat engine's tool loop: tinyelf's loop and pipeline with the session's MCP tools only.
struct ChatLoop(TinyElfEngine);

#[async_trait]
impl ToolLoop for ChatLoop {
    async fn run(&self, ctx: EngineSessionContext) -> RunOutcome {
        self.0.run(ctx, Flavor::Chat).await
    }
}

impl TinyElfEngine {
    /// Builds the engine. `data_dir` (the daemon's database directory) becomes a deny zone.
    pub fn new(
        store: Arc<dyn Store>,
        providers: ProviderRegistry,
        config: TinyElfConfig,
        broker: Arc<PermissionBroker>,
        data_dir: Option<PathBuf>,
        mcp: Option<McpManager>,
    ) -> Result<Self, TinyElfError> {
        let mut zones = ExecutionFirewall::default_zones(data_dir);
        zones.extend(config.deny_paths.iter().map(PathBuf::from));
        let firewall = Arc::new(ExecutionFirewall::new(zones, &config.deny_commands)?);
        let child_env = config.child_env();
        // The operator's hooks run with the daemon's defaults, whatever a session asks for.
        let hooks = Arc::new(Hooks::new(
            config.hooks.clone(),
            config.child_setup(child_env.clone(), config.shell_network),
        )?);
        let builtin = BuiltinSettings {
            shell: elfgate_tools::shell::Shell {
                max_output_bytes: config.shell_max_output_bytes.max(1),
                max_listed_changes: config.shell_max_listed_changes,
            },
            web: elfgate_tools::web::WebFetch {
                allow_private: config.web_fetch_allow_private,
                max_bytes: config.web_fetch_max_bytes.max(1),
                timeout: elfgate_tools::clamped_secs(config.web_fetch_timeout_secs, 0.1, 3600.0),
            },
            search: config
                .web_search
                .as_ref()
                .map(elfgate_tools::search::WebSearch::new)
                .transpose()?,
        };
        let mut tools = elfgate_tools::builtin_registry(&builtin);
        for (name, tier) in &config.tool_tiers {
            let t: PermissionTier = tier.parse().map_err(TinyElfError::Tier)?;
            tools.set_tier(name.clone(), t);
        }
        let policy = config.tier_policy()?;
        Ok(TinyElfEngine {
            inner: Arc::new(Inner {
                policy,
                summaries: Default::default(),
                tool_waiters: Default::default(),
                store,
                providers,
                config,
                broker,
                firewall,
                hooks,
                tools,
                child_env,
                mcp,
                running: Default::default(),
            }),
        })
    }

    /// Runs the UserPromptSubmit hooks on a prompt that has just arrived, in `project` (the
    /// daemon's working directory without one), before anything of it is stored; the API calls
    /// this for every engine's prompts (docs/tinyelf.md, "Hooks").
    pub async fn submit_prompt(
        &self,
        payload: &serde_json::Value,
        project: Option<&std::path::Path>,
    ) -> elfgate_tools::PromptVerdict {
        if !self.inner.hooks.has(HookEvent::UserPromptSubmit) {
            return elfgate_tools::PromptVerdict::Keep;
        }
        let cwd = runner::work_dir(project.filter(|p| p.is_dir()));
        self.inner.hooks.submit_prompt(payload, &cwd).await
    }

    /// The loop a chat session whose mcpConfig is set runs its prompts with (see docs/mcp.md).
    pub fn chat_tool_loop(&self) -> Arc<dyn ToolLoop> {
        Arc::new(ChatLoop(TinyElfEngine {
            inner: self.inner.clone(),
        }))
    }

    /// The rules of the shell tool's commands (firewall, hooks, environment, network, output
    /// cap), for other engines that run commands in a project on an agent's behalf (the cli
    /// engine serving an ACP agent's terminals).
    pub fn shell_rules(&self) -> elfgate_tools::terminal::ShellRules {
        let inner = &self.inner;
        elfgate_tools::terminal::ShellRules {
            firewall: inner.firewall.clone(),
            hooks: inner.hooks.clone(),
            env: inner.child_env.clone(),
            network: inner.config.shell_network,
            isolation: inner.config.isolation.clone(),
            sandbox: inner.config.sandbox.clone(),
            max_output_bytes: inner.config.shell_max_output_bytes.max(1),
        }
    }

    /// The sandbox's mode and mechanism, as `GET /v1/engines` and each run's `init` show them.
    pub fn sandbox_facts(&self) -> serde_json::Value {
        elfgate_tools::sandbox::Sandbox::facts_of(self.inner.config.sandbox.as_ref())
    }

    /// A session's projectPath checked as the firewall sees it (see
    /// [`ExecutionFirewall::check_project`]); the daemon applies it to every engine's sessions.
    pub fn check_project(
        &self,
        project: &std::path::Path,
    ) -> Result<PathBuf, elfgate_tools::FirewallError> {
        self.inner.firewall.check_project(project)
    }

    /// The skills a session in `project` would see (configured folders only without one), with
    /// the folders left out and why.
    pub async fn skills(&self, project: Option<&std::path::Path>) -> SkillSet {
        let inner = &self.inner;
        context::skills::discover(&inner.firewall, &inner.config.skills_dirs, project).await
    }

    async fn run(&self, ctx: EngineSessionContext, flavor: Flavor) -> RunOutcome {
        if let Some(call) = ctx.tool_run.clone().filter(|_| flavor == Flavor::Agent) {
            return self.run_tool(ctx, call).await;
        }
        let inner = &self.inner;
        let session_id = ctx.session_id();
        // The prompt is stored and announced first, as a session's first one is with the
        // session: before `init`, the MCP servers and anything else that may fail or take time.
        let (user, parent) =
            match crate::prompt::store_user_message(inner.store.as_ref(), &ctx).await {
                Ok(u) => u,
                Err(e) => return fail(&ctx, ErrorCode::Storage, e).await,
            };
        let Prepared {
            provider_name,
            provider,
            model,
            project,
            mut rs,
        } = match self.prepare(&ctx, flavor).await {
            Ok(p) => p,
            Err(outcome) => return outcome,
        };
        // Where hooks run: the project, or the daemon's working directory without one.
        let workdir = runner::work_dir(project.as_deref());
        let tools = match (&rs.enabled_tools, flavor) {
            (_, Flavor::Chat) => ToolRegistry::new(),
            (Some(names), Flavor::Agent) => inner.tools.only(names),
            (None, Flavor::Agent) => inner.tools.clone(),
        };
        // A chat session's tool loop gets its MCP tools only.
        let skills = Arc::new(match flavor {
            Flavor::Agent => {
                let mut found = context::skills::discover(
                    &inner.firewall,
                    &inner.config.skills_dirs,
                    project.as_deref(),
                )
                .await;
                // engineConfig skills (an agent profile's) narrows what is offered.
                if let Some(names) = &ctx.engine_config.skills {
                    found.skills.retain(|s| names.contains(&s.name));
                }
                found
            }
            Flavor::Chat => SkillSet::default(),
        });
        let tools = context::skill_tools::with_skill_tools(tools, &skills, |name| {
            rs.enabled_tools
                .as_ref()
                .is_none_or(|names| names.iter().any(|n| n == name))
        });
        // The router picks the turn's active skills; when they all declare their tools, the
        // model is offered only those (and the skill tools) of what the session permits.
        let routing = context::router::route(
            &skills,
            &ctx.prompt,
            inner.config.max_active_skills,
            inner.config.active_skills_max_tokens,
        );
        let tool_filter = routing.allowed_tools(&skills).map(|mut allowed| {
            allowed.insert(context::skill_tools::LOAD_SKILL.to_string());
            allowed.insert(context::skill_tools::READ_SKILL_FILE.to_string());
            Arc::new(allowed)
        });
        let tools = match &tool_filter {
            Some(allowed) => tools.retain(|name| allowed.contains(name)),
            None => tools,
        };
        // spawn is bound to the run (below), once there is one; the client sees it listed now.
        let spawn_on = flavor == Flavor::Agent
            && rs
                .enabled_tools
                .as_ref()
                .is_none_or(|names| names.iter().any(|n| n == spawn::SPAWN))
            && tool_filter
                .as_ref()
                .is_none_or(|a| a.contains(spawn::SPAWN));
        // The servers start here, on first use; the loop asks again before each iteration.
        let mcp = inner
            .mcp
            .as_ref()
            .map(|m| Arc::new(mcp::McpRun::new(m, &ctx)));
        // An interrupt meanwhile: the loop ends the run before its first call.
        let first_tools = match &mcp {
            Some(m) => m
                .tools(&tools, &ctx.cancel)
                .await
                .unwrap_or_else(|| tools.clone()),
            None => tools.clone(),
        };
        let first_tools = match &tool_filter {
            Some(allowed) => first_tools.retain(|name| allowed.contains(name)),
            None => first_tools,
        };
        let mut tool_names = first_tools.names();
        if spawn_on {
            tool_names.push(spawn::SPAWN.to_string());
            tool_names.sort();
        }
        ctx.events
            .emit(EventPayload::Init {
                system_info: ctx.system_info(json!({
                    "engine": ctx.session.engine.as_str(),
                    "provider": provider_name,
                    "model": model,
                    "projectPath": project.as_ref().map(|p| p.display().to_string()),
                    "tools": tool_names,
                    "permissionMode": ctx.permission_mode.unwrap_or_default(),
                    "maxIterations": rs.max_iterations,
                    "sandbox": self.sandbox_facts(),
                })),
            })
            .await;

        let history = match parent {
            Some(leaf) => match inner.store.branch(session_id, leaf, rs.max_history).await {
                Ok(h) => h,
                Err(e) => return fail(&ctx, ErrorCode::Storage, e.report()).await,
            },
            None => Vec::new(),
        };
        rs.last_input_tokens = history.iter().rev().find_map(|m| m.input_tokens);
        let mut messages = history::to_llm(&history);
        messages.push(elfgate_llm::LlmMessage {
            role: Role::User,
            blocks: user.blocks.clone(),
        });

        let hook_payload = |event: HookEvent| {
            let mut payload = json!({
                "event": event.as_str(),
                "sessionId": session_id,
                "runId": ctx.run_id,
                "projectPath": project.as_ref().map(|p| p.display().to_string()),
                "prompt": ctx.prompt,
            });
            ctx.channel.add_to(&mut payload);
            payload
        };
        if inner.hooks.has(HookEvent::SessionStart) {
            let verdict = inner
                .hooks
                .run(
                    HookEvent::SessionStart,
                    None,
                    &hook_payload(HookEvent::SessionStart),
                    &workdir,
                )
                .await;
            report_unblockable_hook(&ctx, HookEvent::SessionStart, verdict).await;
        }

        let guardian = self.guardian(&ctx, &provider, &model).await;
        let system = match flavor {
            // A chat session's prompt is its own, as without tools (none: no system prompt).
            Flavor::Chat => {
                context::blocks::SystemPrompt::whole(ctx.system_prompt.clone().unwrap_or_default())
            }
            Flavor::Agent => {
                self.system_prompt(&ctx, project.as_deref(), &skills, &routing)
                    .await
            }
        };
        let runner = Runner::new(
            inner.clone(),
            ctx.clone(),
            provider,
            model.clone(),
            rs.clone(),
            project.clone(),
            guardian,
        );
        let agent = Agent {
            label: None,
            depth: 0,
            tools: subagents::with_spawn(tools, &runner, spawn_on),
            cancel: ctx.cancel.clone(),
            model,
            system,
            max_iterations: rs.max_iterations,
            mcp,
            tool_filter,
        };
        let end = {
            let _running = Running::enter(inner, session_id);
            agent::run_loop(runner.clone(), agent, messages, Some(user.id)).await
        };
        runner.stop_background().await;

        if inner.hooks.has(HookEvent::SessionEnd) {
            let mut p = hook_payload(HookEvent::SessionEnd);
            p["finishReason"] = json!(end.finish.as_str());
            let verdict = inner
                .hooks
                .run(HookEvent::SessionEnd, None, &p, &workdir)
                .await;
            report_unblockable_hook(&ctx, HookEvent::SessionEnd, verdict).await;
        }
        let usage = runner.usage();
        let (input_tokens_estimated, output_tokens_estimated) = runner.tokens_estimated();
        let (model_finish, stop_sequence) = runner.last_finish();
        RunOutcome {
            finish_reason: end.finish,
            usage,
            output_tokens_estimated,
            input_tokens_estimated,
            model_finish,
            stop_sequence,
            iterations: end.iterations,
            error: end.error,
            // Each iteration's messages were stored as they came (tool results follow them).
            answer: None,
            turn: Some(runner.turn_record(end.finish)),
            steps: Vec::new(),
            cost_usd: None,
            model_calls: Vec::new(),
        }
    }
}

/// Marks a session as running for as long as it lives.
struct Running<'a> {
    inner: &'a Inner,
    session: elfgate_core::SessionId,
}

impl<'a> Running<'a> {
    fn enter(inner: &'a Inner, session: elfgate_core::SessionId) -> Self {
        lock(&inner.running).insert(session);
        Running { inner, session }
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        lock(&self.inner.running).remove(&self.session);
    }
}

#[async_trait]
impl Engine for TinyElfEngine {
    fn engine_type(&self) -> EngineType {
        EngineType::TinyElf
    }

    fn description(&self) -> &'static str {
        "Agent loop: model calls tools in the project through a security pipeline, loops until done"
    }

    fn capabilities(&self) -> Vec<&'static str> {
        let config = &self.inner.config;
        let isolated = config.shell_network == Network::Isolated && config.isolation.is_some();
        let mut caps = vec![
            "streaming",
            "interrupt",
            "thinking",
            "history",
            "tools",
            "permissions",
            "sub-agents",
            "hooks",
            // What a session's shell commands get unless its engineConfig says otherwise.
            if isolated {
                "shell-network-isolated"
            } else {
                "shell-network-host"
            },
        ];
        if self.inner.mcp.is_some() {
            caps.push("mcp");
        }
        caps
    }

    async fn run_prompt(&self, ctx: EngineSessionContext) -> RunOutcome {
        self.run(ctx, Flavor::Agent).await
    }

    /// The MCP manager already holds the new server set (the daemon reloaded it); every running
    /// session's loop asks for its tools before each iteration, so this only counts them.
    async fn reload_mcp_for_all_active(&self) -> usize {
        if self.inner.mcp.is_none() {
            return 0;
        }
        lock(&self.inner.running).len()
    }
}

/// A SessionStart or SessionEnd hook cannot stop anything (the run is starting or over), so its
/// deny, failure or unreadable answer becomes a `processing` event (and a warning in the log)
/// instead of being dropped without a trace.
async fn report_unblockable_hook(ctx: &EngineSessionContext, event: HookEvent, v: HookVerdict) {
    if let HookVerdict::Deny(reason) = v {
        tracing::warn!(event = event.as_str(), %reason, "hook objected; ignored");
        ctx.events
            .emit(EventPayload::Processing {
                message: format!(
                    "{} hook: {reason} (ignored: a {} hook cannot stop the run)",
                    event.as_str(),
                    event.as_str()
                ),
            })
            .await;
    }
}
