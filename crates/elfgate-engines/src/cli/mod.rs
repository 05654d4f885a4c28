//! The `cli` engine: a coding CLI (codex, claude-code, gemini-cli) run in the session's project
//! directory as a supervised subprocess, its own event stream mapped to Elfgate's events and
//! stored messages. See docs/cli.md.

mod acp;
mod acp_agents;
mod acp_read;
mod acp_run;
mod acp_terminal;
mod acp_write;
mod adapter;
mod availability;
pub mod backend;
mod begin;
mod claude_code;
mod codex;
mod confine;
mod gemini_cli;
mod limits;
mod lines;
mod relay;
mod run_files;
pub mod sdk;
pub mod settings;
mod start_checks;
mod supervisor;
mod transcript;

pub use acp_agents::AcpStartError;
pub use adapter::CliProvider;
use backend::BackendProgram;
pub use elfgate_core::CliBackend;
use settings::CliRoute;
pub use settings::{BackendConfig, CliConfig, ProviderRefused, ProxyMode};
pub use start_checks::CliStartError;

use crate::prompt::store_user_message;
use crate::streaming::fail;
use adapter::{AdapterEvent, Invocation};
use async_trait::async_trait;
use availability::Found;
use begin::Begun;
use elfgate_core::mcp_config::McpSessionConfig;
use elfgate_core::{
    BackendInfo, Engine, EngineSessionContext, EngineType, ErrorCode, EventPayload, FinishReason,
    Message, PermissionMode, RunOutcome, SessionId, StartRefused, StartRequest,
};
use elfgate_core::{RunGrant, RunToken, RunTokens};
use elfgate_store::Store;
use elfgate_tools::process::{ChildEnv, GroupNote, ProcessSpec, kill_noted_groups};
use elfgate_tools::{Ask, Decision, PermissionBroker, PermissionOutcome, PermissionTier};
use limits::{Limits, Slot};
use relay::Relay;
use run_files::RunFiles;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use supervisor::{Launch, Supervised};
use tokio::sync::OwnedSemaphorePermit;
use transcript::Transcript;

/// The directory under the state directory where running CLI groups are noted.
const RUNNING: &str = "running";

/// The cli engine.
pub struct CliEngine {
    store: Arc<dyn Store>,
    /// Relays the CLIs' permission questions to the client.
    broker: Arc<PermissionBroker>,
    config: CliConfig,
    found: BTreeMap<CliBackend, Found>,
    limits: Limits,
    /// The daemon's allow-listed variables, without any provider's key.
    base_env: ChildEnv,
    /// Run tokens for CLIs that go through the daemon's own door, and where it listens.
    tokens: Arc<RunTokens>,
    /// The shell tool's rules (with the tools' firewall), through which an ACP agent's file
    /// requests and terminals are served.
    shell: elfgate_tools::terminal::ShellRules,
    /// The configured ACP agents' programs, found at start.
    acp_programs: acp_agents::AgentPrograms,
    /// ACP agent processes kept between a session's prompts.
    acp_kept: Arc<acp_run::KeptAgents>,
}

impl CliEngine {
    /// Builds the engine: finds each backend's program and asks it for its version (once).
    pub async fn new(
        store: Arc<dyn Store>,
        config: CliConfig,
        broker: Arc<PermissionBroker>,
        tokens: Arc<RunTokens>,
        shell: elfgate_tools::terminal::ShellRules,
    ) -> CliEngine {
        // Runs a crashed daemon left behind would go on working (and spending) unseen.
        for pgid in kill_noted_groups(&config.state_dir.join(RUNNING)) {
            tracing::warn!(
                pgid,
                "killed a CLI process group left running by an earlier daemon"
            );
        }
        let base_env = ChildEnv::from_daemon(&BTreeMap::new(), &[], &config.secret_env);
        let limits = Limits::new(|b| config.max_concurrent(b));
        let acp_programs = acp_agents::find_agents(&config.acp.agents);
        let mut engine = CliEngine {
            store,
            broker,
            config,
            found: BTreeMap::new(),
            limits,
            base_env,
            tokens,
            shell,
            acp_programs,
            acp_kept: Arc::default(),
        };
        // Each backend's home exists before it is asked for its version.
        for &b in CliBackend::ALL {
            if let Err(e) = engine.write_files(b) {
                tracing::warn!(backend = b.as_str(), error = %e, "cannot write the CLI's home");
            }
        }
        let timeout = std::time::Duration::from_secs(engine.config.version_timeout_secs.max(1));
        // An ACP backend is its agents (found above), not one program with a version.
        let programs = CliBackend::ALL.iter().filter(|b| **b != CliBackend::Acp);
        let probes = programs.map(|&b| {
            let env = engine.child_env(b, None, None, PermissionMode::Default, [None; 3]);
            let cfg = engine.config.backend(b).clone();
            async move { (b, availability::probe(b, &cfg, env, timeout).await) }
        });
        for (b, found) in futures_util::future::join_all(probes).await {
            match &found.version {
                Ok(v) => {
                    tracing::info!(backend = b.as_str(), version = %v, "cli backend available");
                }
                Err(why) => tracing::info!(backend = b.as_str(), %why, "cli backend not available"),
            }
            engine.found.insert(b, found);
        }
        engine
    }

    /// The backend's own home directory (HOME of its runs).
    fn home(&self, b: CliBackend) -> PathBuf {
        self.config.state_dir.join(b.as_str())
    }

    /// Where a fleet node notes the CLI sessions its backend's home holds (see
    /// [`cli_session_marker`]); None on a single node, whose home is always the same.
    fn markers(&self, ctx: &EngineSessionContext, b: CliBackend) -> Option<PathBuf> {
        ctx.node.as_ref().map(|_| self.home(b).join(MARKERS_DIR))
    }

    /// A run's environment: the allow-listed variables, the backend's configured ones, the
    /// ACP agent's and the session's (`engineConfig.shellEnv`, `providerEnv`), then the engine's own (home, provider URL and key),
    /// which neither overrides.
    fn child_env(
        &self,
        b: CliBackend,
        provider: Option<&CliProvider>,
        key: Option<&str>,
        mode: PermissionMode,
        session: [Option<&BTreeMap<String, String>>; 3],
    ) -> ChildEnv {
        let home = self.home(b);
        let mut env = self.base_env.clone();
        env.extend(&self.config.backend(b).env);
        for vars in session.into_iter().flatten() {
            env.extend(vars);
        }
        env.set("HOME", &home.display().to_string());
        for (k, v) in b.env(&home, provider, key, mode) {
            env.grant(&k, &v);
        }
        env
    }

    /// Writes the backend's configuration files into its home. The homes and the files are
    /// owner-only: the CLIs keep their transcripts there.
    fn write_files(&self, b: CliBackend) -> std::io::Result<()> {
        use elfgate_core::private_files::{
            create_private_dir_all, ensure_private_dir, write_private,
        };
        let home = self.home(b);
        ensure_private_dir(&self.config.state_dir)?;
        ensure_private_dir(&home)?;
        for (rel, content) in b.files(&self.config.providers) {
            let path = home.join(rel);
            if let Some(dir) = path.parent() {
                create_private_dir_all(dir)?;
            }
            write_private(&path, content.as_bytes())?;
        }
        Ok(())
    }

    fn backend_of(backend: Option<CliBackend>) -> Result<CliBackend, CliStartError> {
        backend.ok_or(CliStartError::NoBackend)
    }

    /// Refuses an argument that is not in the backend's allow list.
    fn check_args(&self, b: CliBackend, args: &[String]) -> Result<(), CliStartError> {
        let allowed = &self.config.backend(b).allowed_args;
        for a in args {
            let ok = allowed.iter().any(|x| {
                x == a || (x.ends_with('=') && a.starts_with(x.as_str()) && a.len() > x.len())
            });
            if !ok {
                let list = if allowed.is_empty() {
                    "none are allowed".to_string()
                } else {
                    format!("allowed: {}", allowed.join(" "))
                };
                return Err(CliStartError::ArgNotAllowed {
                    arg: a.clone(),
                    backend: b,
                    list,
                });
            }
        }
        Ok(())
    }

    async fn run(&self, ctx: EngineSessionContext) -> RunOutcome {
        self.run_with(ctx, RunPolicy::default()).await
    }

    /// Runs a prompt under `policy` (the claude-sdk engine's: claude-code through the door, with
    /// the session's MCP servers), once the budgets let it start (its CLI's model calls are its
    /// own: the budgets are asked before it starts and told its cost when it ended).
    pub(crate) async fn run_with(
        &self,
        ctx: EngineSessionContext,
        policy: RunPolicy,
    ) -> RunOutcome {
        let opened = match crate::metering::open_run(&ctx).await {
            Ok(opened) => opened,
            Err(paused) => return paused,
        };
        let meters = ctx.meters.clone();
        // Boxed: the run's future is large, and the callers' would hold it inline.
        let outcome = Box::pin(self.run_started(ctx, policy)).await;
        crate::metering::close_run(&meters, opened, &outcome).await;
        outcome
    }

    /// [`Self::run_with`] once the budgets let the run start.
    async fn run_started(&self, ctx: EngineSessionContext, policy: RunPolicy) -> RunOutcome {
        let b = match Self::backend_of(ctx.cli_backend) {
            Ok(CliBackend::Acp) => return self.run_acp(ctx).await,
            Ok(b) => b,
            Err(why) => return fail(&ctx, ErrorCode::CliBackend, why.to_string()).await,
        };
        let Some(binary) = self
            .found
            .get(&b)
            .and_then(Found::usable)
            .map(Path::to_path_buf)
        else {
            let why = self.unavailable(b);
            return fail(&ctx, ErrorCode::CliUnavailable, why.to_string()).await;
        };
        let route = match self.config.route_for(b, ctx.provider_id.as_deref()) {
            Ok(r) => r.map(|mut r| {
                r.proxied |= policy.through_door;
                r
            }),
            Err(why) => return fail(&ctx, ErrorCode::UnknownProvider, why.to_string()).await,
        };
        let info = json!({
            "cliBackend": b.as_str(),
            "binary": binary.display().to_string(),
            "version": self.found.get(&b).and_then(|f| f.version.as_ref().ok()),
        });
        let Begun {
            provider,
            model,
            proxy,
            user,
            slot: _slot,
            resume,
        } = match self.begin(&ctx, (b, b), route, info).await {
            Ok(begun) => begun,
            Err(outcome) => return *outcome,
        };
        // In a fleet the CLI's own session files are in the home of the node that ran it: a
        // resume on a node that cannot see them would make the CLI fail or start afresh.
        if let (Some(dir), Some(id)) = (self.markers(&ctx, b), resume.as_deref())
            && !cli_session_marker(&dir, id).exists()
        {
            let why = format!(
                "cannot resume {}'s session {id} on node {}: the CLI keeps its session files in \
                 the home of the node that started it, and this node's ({}) does not have them; \
                 in a fleet, the data directory's cli/ must be on storage every node shares",
                b.as_str(),
                ctx.node.as_deref().unwrap_or_default(),
                self.home(b).display()
            );
            return fail(&ctx, ErrorCode::CliSetup, why).await;
        }
        let cwd = match project_dir(&ctx) {
            Ok(d) => d,
            Err(why) => return fail(&ctx, ErrorCode::CliProjectPath, why.to_string()).await,
        };
        let inv = Invocation {
            prompt: &ctx.prompt,
            model: match &proxy {
                Some(p) => Some(p.route.as_str()),
                None => model.as_deref(),
            },
            resume: resume.as_deref(),
            permission_mode: ctx.permission_mode.unwrap_or_default(),
            provider_name: match &proxy {
                Some(_) => Some(backend::PROXY_PROVIDER),
                None => provider.as_ref().map(|(n, _)| n.as_str()),
            },
        };
        let cfg = self.config.backend(b);
        let mut extra = match &proxy {
            Some(p) => b.proxy_args(&p.provider, p.searches),
            None => Vec::new(),
        };
        // Kept to the run's end: the directory of the MCP servers' file goes with it.
        let mut _run_files = None;
        if policy.mcp
            && let Some(servers) = b.mcp_config(&McpSessionConfig::merged(
                ctx.engine_config.mcp_config.as_ref(),
                &self.config.mcp_servers,
            ))
        {
            let handed = RunFiles::create(&self.config.state_dir, &ctx.run_id).and_then(|files| {
                let path = files.write("mcp.json", &servers)?;
                Ok((files, path))
            });
            match handed {
                Ok((files, path)) => {
                    extra.extend(b.mcp_args(&path));
                    _run_files = Some(files);
                }
                Err(e) => {
                    let why = format!("cannot write the MCP servers' file for the CLI: {e}");
                    return fail(&ctx, ErrorCode::CliSetup, why).await;
                }
            }
        }
        if ctx.engine_config.use_extended_context == Some(true) {
            extra.extend(b.long_context_args().unwrap_or_default());
        }
        extra.extend(cfg.args.clone());
        extra.extend(ctx.engine_config.cli_args.clone().unwrap_or_default());
        let mut spec = ProcessSpec::new(binary.display().to_string(), &cwd);
        spec.args = b.args(&inv, &extra);
        let run_dir = _run_files.as_ref().map(RunFiles::dir);
        spec.confinement = confine::cli_confinement(&self.shell, &cwd, self.home(b), run_dir);
        let (cli_provider, key) = match &proxy {
            Some(p) => (Some(p.provider.clone()), Some(p.token.value().to_string())),
            None => {
                let p = provider.as_ref().map(|(_, p)| p.clone());
                let key = p.as_ref().and_then(provider_key);
                (p, key)
            }
        };
        spec.env = self.child_env(
            b,
            cli_provider.as_ref(),
            key.as_deref(),
            inv.permission_mode,
            [
                None,
                ctx.engine_config.shell_env.as_ref(),
                ctx.engine_config.provider_env.as_ref(),
            ],
        );
        let launch = Launch {
            spec,
            stdin: b.stdin(&inv),
            polite: b.polite_stop(),
            timeouts: self.config.timeouts(),
            label: b.as_str(),
        };
        let mut sup = match Supervised::start(launch).await {
            Ok(s) => s,
            Err(e) => return fail(&ctx, ErrorCode::CliSpawn, e.to_string()).await,
        };
        tracing::debug!(backend = b.as_str(), pgid = sup.pgid(), "cli run started");
        // Removed once the group has ended (below); left behind only by a daemon that died.
        let _note = GroupNote::new(&self.config.state_dir.join(RUNNING), sup.pgid());
        let mut run = Relay::new(
            &ctx,
            Transcript::new(user.id, model.clone()),
            resume.clone(),
            self.markers(&ctx, b),
        );
        let mut adapter = b.adapter();
        while let Some(line) = sup.next(&ctx.cancel).await {
            for ev in adapter.on_line(&line) {
                match ev {
                    AdapterEvent::PermissionAsk {
                        request_id,
                        tool_name,
                        input,
                    } => {
                        let denied = self.ask(&ctx, &tool_name, &input).await;
                        if let Some(answer) =
                            b.permission_answer(&request_id, &input, denied.as_deref())
                        {
                            sup.send(&answer).await;
                        }
                        sup.touch();
                    }
                    AdapterEvent::Finished => {
                        // claude-code waits for more input until its stdin closes.
                        sup.close_stdin();
                        run.apply(AdapterEvent::Finished).await;
                    }
                    ev => run.apply(ev).await,
                }
            }
            if run.storage_failed() {
                break;
            }
        }
        let ended = sup.finish().await;
        run.end(b, ended, &self.config).await
    }

    /// Asks the client whether the CLI may run a tool (a session-wide answer given earlier
    /// stands); returns why it may not, or None when it may.
    async fn ask(
        &self,
        ctx: &EngineSessionContext,
        tool_name: &str,
        input: &serde_json::Value,
    ) -> Option<String> {
        let session_id = ctx.session_id();
        match self.broker.remembered(session_id, tool_name) {
            Some(Decision::Allow) => return None,
            Some(Decision::Deny) => return Some("the user denied permission".to_string()),
            None => {}
        }
        let timeout = ctx.permission_answers.wait(std::time::Duration::from_secs(
            self.config.permission_timeout_secs.max(1),
        ));
        let ask = Ask {
            tool_name,
            input,
            tier: PermissionTier::AlwaysConfirm,
            timeout,
            answers: ctx.permission_answers,
        };
        match self
            .broker
            .request(&ctx.events, session_id, ask, &ctx.cancel)
            .await
        {
            PermissionOutcome::Interrupted => Some("the run was interrupted".to_string()),
            outcome => outcome.denial(timeout),
        }
    }

    /// The CLI session the run resumes: the session's, as stored now.
    async fn resume_id(&self, ctx: &EngineSessionContext) -> Result<Option<String>, String> {
        if !ctx.is_resume {
            return Ok(None);
        }
        let stored = self
            .store
            .get_session(ctx.session_id())
            .await
            .map_err(|e| e.report())?;
        Ok(stored
            .and_then(|s| s.cli_session_id)
            .or_else(|| ctx.session.cli_session_id.clone()))
    }

    /// The provider as the CLI is given it: the provider itself, or the daemon's door for the
    /// CLI's own format when the run goes through it (its key then a run token).
    fn cli_provider(&self, b: CliBackend, route: &CliRoute) -> CliProvider {
        match (route.proxied, self.tokens.url()) {
            (true, Some(url)) => b.proxy_provider(url),
            _ => route.provider.clone(),
        }
    }

    fn unavailable(&self, b: CliBackend) -> CliStartError {
        let why = match self.found.get(&b).map(|f| &f.version) {
            Some(Err(why)) => why.to_string(),
            _ => "it was not probed".to_string(),
        };
        CliStartError::Unavailable { backend: b, why }
    }
}

/// How the engine runs a prompt beyond its configuration (the claude-sdk engine's differences).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RunPolicy {
    /// Through the daemon's door whatever the provider's kind.
    pub through_door: bool,
    /// Hand the session's MCP servers to the CLI.
    pub mcp: bool,
}

/// A provider's key, from the daemon's environment.
fn provider_key(p: &CliProvider) -> Option<String> {
    p.api_key_env
        .as_deref()
        .and_then(|var| std::env::var(var).ok())
        .filter(|k| !k.is_empty())
}

/// The directory, in a backend's home, of a fleet node's notes of the CLI sessions there.
const MARKERS_DIR: &str = ".elfgate-cli-sessions";

/// The note that CLI session `id` was started with the home `dir` is in: seen by a node, it means
/// the CLI's files are reachable there (the same node, or a home every node shares).
pub(crate) fn cli_session_marker(dir: &std::path::Path, id: &str) -> PathBuf {
    let safe: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    dir.join(safe)
}

/// Why the CLI has no directory to run in.
#[derive(Debug, thiserror::Error)]
enum NoProjectDir {
    /// No projectPath and the daemon's own directory is gone.
    #[error("no working directory: {0}")]
    NoWorkingDirectory(std::io::Error),
    /// The projectPath is no directory (any more).
    #[error("projectPath '{0}' is not a directory")]
    NotADirectory(String),
}

/// The directory the CLI runs in: the session's projectPath, which must exist.
fn project_dir(ctx: &EngineSessionContext) -> Result<PathBuf, NoProjectDir> {
    let Some(p) = ctx.project_path.as_deref() else {
        return std::env::current_dir().map_err(NoProjectDir::NoWorkingDirectory);
    };
    let path = PathBuf::from(p);
    if path.is_dir() {
        Ok(path)
    } else {
        Err(NoProjectDir::NotADirectory(p.to_string()))
    }
}

#[async_trait]
impl Engine for CliEngine {
    fn engine_type(&self) -> EngineType {
        EngineType::Cli
    }

    fn description(&self) -> &'static str {
        "A coding CLI (codex, claude-code, gemini-cli) run as a supervised subprocess"
    }

    fn capabilities(&self) -> Vec<&'static str> {
        vec!["streaming", "interrupt", "tools", "resume", "thinking"]
    }

    async fn run_prompt(&self, ctx: EngineSessionContext) -> RunOutcome {
        self.run(ctx).await
    }

    async fn forget_session(&self, session_id: SessionId) {
        self.acp_kept.end(session_id).await;
    }

    fn backends(&self) -> Option<Vec<BackendInfo>> {
        Some(
            CliBackend::ALL
                .iter()
                .map(|&b| {
                    if b == CliBackend::Acp {
                        return self.acp_backend_info();
                    }
                    let found = self.found.get(&b);
                    BackendInfo {
                        name: b,
                        available: found.and_then(Found::usable).is_some(),
                        binary: found
                            .and_then(|f| f.binary.as_ref())
                            .map(|p| p.display().to_string()),
                        version: found.and_then(|f| f.version.clone().ok()),
                        reason: found
                            .and_then(|f| f.version.as_ref().err().map(ToString::to_string)),
                        max_concurrent: self.limits.max(b),
                        agents: None,
                    }
                })
                .collect(),
        )
    }

    fn check_start(&self, req: &StartRequest<'_>) -> Result<(), StartRefused> {
        self.start_problem(req)
            .map_err(|e| StartRefused(Box::new(e)))
    }
}
