//! A prompt to an ACP agent (the `acp` cli backend): the agent process found or started, the
//! protocol's handshake, the prompt's turn relayed into the run's events, the agent's calls to
//! the client served (permissions through the daemon's prompts, files through the tools'
//! firewall), and the process kept for the session's next prompt. The wire messages are in
//! acp.rs, the configured agents in acp_agents.rs, the agent's reads, writes and terminals in
//! acp_read.rs, acp_write.rs and acp_terminal.rs; see docs/cli.md, "ACP agents".

use super::acp::{self, AcpAdapter, Incoming};
use super::acp_terminal::Terminals;
use super::acp_write::EditGrants;
use super::adapter::{AdapterEvent, str_of};
use super::backend::Polite;
use super::relay::Relay;
use super::settings::AcpAgentConfig;
use super::supervisor::{Launch, Supervised};
use super::transcript::Transcript;
use super::{Begun, CliEngine, RUNNING, cli_session_marker, project_dir, provider_key};
use crate::streaming::fail;
use elfgate_core::{
    CliBackend, EngineSessionContext, ErrorCode, FinishReason, Gate, RunOutcome, SessionId,
};
use elfgate_tools::gate::{self, Permission, Refusal};
use elfgate_tools::process::{GroupNote, ProcessSpec};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The JSON-RPC id of the handshake's `initialize`.
const INITIALIZE_ID: u64 = 1;
/// The JSON-RPC id of the handshake's `session/new` or `session/load`.
const OPEN_ID: u64 = 2;

/// A session's agent process with its conversation open.
pub(crate) struct AcpConn {
    sup: Supervised,
    /// The configured agent's name.
    agent: String,
    /// The directory it was opened in.
    cwd: PathBuf,
    /// The model it was started with (its `model_arg`): a prompt for another model needs
    /// another process.
    model: Option<String>,
    /// The agent's session id.
    session: String,
    /// The next JSON-RPC id of ours.
    next_id: u64,
    /// The agent's `missing_file_as_empty`.
    missing_empty: bool,
    /// What the agent last said its session cost so far (`usage_update`), in US dollars: a
    /// run's cost is what its turn adds to it.
    cost_reported: f64,
    /// Removed when the process ends; left behind only by a daemon that died.
    _note: Option<GroupNote>,
}

/// The agent processes kept between a session's prompts.
#[derive(Default)]
pub(crate) struct KeptAgents {
    conns: Mutex<HashMap<SessionId, (u64, AcpConn)>>,
    generation: AtomicU64,
}

impl KeptAgents {
    /// Takes the session's kept process, if any.
    fn take(&self, session: SessionId) -> Option<AcpConn> {
        self.conns
            .lock()
            .ok()
            .and_then(|mut m| m.remove(&session))
            .map(|(_, c)| c)
    }

    /// Ends the session's kept process, if any (the session was deleted).
    pub(crate) async fn end(&self, session: SessionId) {
        if let Some(conn) = self.take(session) {
            tracing::debug!(agent = %conn.agent, "ending the ACP agent of a deleted session");
            conn.sup.finish().await;
        }
    }

    /// Keeps `conn` for the session's next prompt; it is ended after `keep` unless taken.
    fn keep(self: &Arc<Self>, session: SessionId, conn: AcpConn, keep: Duration) {
        let generation = self.generation.fetch_add(1, Ordering::Relaxed);
        let Ok(mut m) = self.conns.lock() else {
            return;
        };
        m.insert(session, (generation, conn));
        drop(m);
        let kept = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(keep).await;
            let Some(kept) = kept.upgrade() else {
                return;
            };
            let conn = kept.conns.lock().ok().and_then(|mut m| {
                match m.get(&session) {
                    Some((g, _)) if *g == generation => m.remove(&session),
                    _ => None,
                }
                .map(|(_, c)| c)
            });
            if let Some(conn) = conn {
                tracing::debug!(agent = %conn.agent, "ending an ACP agent kept past keep_alive_secs");
                conn.sup.finish().await;
            }
        });
    }
}

impl CliEngine {
    /// Runs one prompt on an ACP agent.
    pub(crate) async fn run_acp(&self, ctx: EngineSessionContext) -> RunOutcome {
        let name = ctx.engine_config.acp_agent.clone();
        let (agent, program) = match self.acp_agent(name.as_deref()) {
            Ok((a, p)) => (a.clone(), p.to_path_buf()),
            Err(why) => return fail(&ctx, ErrorCode::CliUnavailable, why.to_string()).await,
        };
        let name = name.unwrap_or_default();
        // The backend whose home, files and provider set-up the agent shares (gemini-cli for
        // `gemini --acp`), else the acp backend's own home and no provider.
        let setup = agent.provider_setup.unwrap_or(CliBackend::Acp);
        let route = match agent.provider_setup {
            Some(b) => match self
                .config
                .route_for(b, ctx.provider_id.as_deref().or(agent.provider.as_deref()))
            {
                Ok(r) => r,
                Err(why) => return fail(&ctx, ErrorCode::UnknownProvider, why.to_string()).await,
            },
            None => None,
        };
        let info = json!({
            "cliBackend": CliBackend::Acp.as_str(),
            "acpAgent": name,
            "binary": program.display().to_string(),
        });
        // The door, the files and the queue are the set-up backend's (gemini-cli's for
        // `gemini --acp`); ACP prompts at once are limited apart.
        let Begun {
            provider,
            model,
            proxy,
            user,
            slot: _slot,
            resume,
        } = match self
            .begin(&ctx, (setup, CliBackend::Acp), route, info)
            .await
        {
            Ok(begun) => begun,
            Err(outcome) => return *outcome,
        };
        let cwd = match project_dir(&ctx) {
            Ok(d) => d,
            Err(why) => return fail(&ctx, ErrorCode::CliProjectPath, why.to_string()).await,
        };
        let model_arg = match &proxy {
            Some(p) => Some(p.route.clone()),
            None => model.clone(),
        };
        let model_arg = agent.model_arg.as_ref().and(model_arg);
        // A kept process for another agent, directory or model is ended (dropped: its group
        // is killed) and the conversation loaded into a new one.
        let kept = self.acp_kept.take(ctx.session_id()).filter(|c| {
            c.agent == name && c.cwd == cwd && c.model == model_arg && c.sup.listening()
        });
        let mut conn = match kept {
            Some(mut c) => {
                c.sup.rearm();
                c
            }
            None => {
                if let (Some(dir), Some(id)) = (self.markers(&ctx, setup), resume.as_deref())
                    && !cli_session_marker(&dir, id).exists()
                {
                    let why = format!(
                        "cannot load ACP agent '{name}''s session {id} on node {}: the agent \
                         keeps its sessions in the home of the node that started it, which this \
                         node ({}) cannot see",
                        ctx.node.as_deref().unwrap_or_default(),
                        self.home(setup).display()
                    );
                    return fail(&ctx, ErrorCode::CliSetup, why).await;
                }
                let mut args = agent.args.clone();
                if let (Some(flag), Some(m)) = (&agent.model_arg, &model_arg) {
                    args.extend([flag.clone(), m.clone()]);
                }
                let mut spec = ProcessSpec::new(program.display().to_string(), &cwd);
                spec.args = args;
                spec.confinement =
                    super::confine::cli_confinement(&self.shell, &cwd, self.home(setup), None);
                let (cli_provider, key) = match &proxy {
                    Some(p) => (Some(p.provider.clone()), Some(p.token.value().to_string())),
                    None => {
                        let p = provider.as_ref().map(|(_, p)| p.clone());
                        let key = p.as_ref().and_then(provider_key);
                        (p, key)
                    }
                };
                spec.env = self.child_env(
                    setup,
                    cli_provider.as_ref(),
                    key.as_deref(),
                    ctx.permission_mode.unwrap_or_default(),
                    [
                        Some(&agent.env),
                        ctx.engine_config.shell_env.as_ref(),
                        ctx.engine_config.provider_env.as_ref(),
                    ],
                );
                match self
                    .open_acp(
                        &ctx,
                        spec,
                        (&name, &agent),
                        &cwd,
                        model_arg.clone(),
                        resume.as_deref(),
                    )
                    .await
                {
                    Ok(c) => c,
                    Err(outcome) => return *outcome,
                }
            }
        };
        let mut run = Relay::new(
            &ctx,
            Transcript::new(user.id, model.clone()),
            resume.clone(),
            self.markers(&ctx, setup),
        );
        run.apply(AdapterEvent::SessionId(conn.session.clone()))
            .await;
        let answered = self.prompt_acp(&ctx, &mut conn, &mut run).await;
        // A process that answered and still listens is kept for the session's next prompt,
        // unless its provider is the daemon's door (its run token ends with this run).
        let keep = Duration::from_secs(self.config.acp.keep_alive_secs);
        if answered && conn.sup.listening() {
            let ended = conn.sup.ended_alive();
            if keep.is_zero() || proxy.is_some() {
                // Ended by the daemon after a full answer: how it dies is not the run's outcome.
                conn.sup
                    .close_and_wait(Duration::from_millis(self.config.kill_grace_ms))
                    .await;
                conn.sup.finish().await;
                run.end(CliBackend::Acp, ended, &self.config).await
            } else {
                let outcome = run.end(CliBackend::Acp, ended, &self.config).await;
                self.acp_kept.keep(ctx.session_id(), conn, keep);
                outcome
            }
        } else {
            let ended = conn.sup.finish().await;
            run.end(CliBackend::Acp, ended, &self.config).await
        }
    }

    /// Starts the agent and opens its session: `initialize`, then `session/new`, or
    /// `session/load` of `resume`. The failure is the run's outcome (its error emitted).
    async fn open_acp(
        &self,
        ctx: &EngineSessionContext,
        spec: ProcessSpec,
        (name, agent): (&str, &AcpAgentConfig),
        cwd: &Path,
        model: Option<String>,
        resume: Option<&str>,
    ) -> Result<AcpConn, Box<RunOutcome>> {
        let replay_settle = Duration::from_millis(agent.load_replay_settle_ms);
        let launch = Launch {
            spec,
            stdin: Some(acp::initialize(INITIALIZE_ID)),
            polite: Polite::Sigint,
            timeouts: self.config.timeouts(),
            label: CliBackend::Acp.as_str(),
        };
        let mut sup = match Supervised::start(launch).await {
            Ok(s) => s,
            Err(e) => {
                return Err(Box::new(
                    fail(ctx, ErrorCode::CliSpawn, e.to_string()).await,
                ));
            }
        };
        let note = GroupNote::new(&self.config.state_dir.join(RUNNING), sup.pgid());
        let cwd_text = cwd.display().to_string();
        let mut session = None;
        let failure = loop {
            let Some(line) = sup.next(&ctx.cancel).await else {
                break None;
            };
            tracing::trace!(%line, "from the ACP agent (handshake)");
            match acp::classify(&line) {
                Incoming::Answer {
                    id: INITIALIZE_ID,
                    result,
                } => {
                    let result = match result {
                        Ok(r) => r,
                        Err(why) => break Some(format!("initialize failed: {why}")),
                    };
                    let open = match resume {
                        Some(id) => {
                            let loads = result
                                .get("agentCapabilities")
                                .and_then(|c| c.get("loadSession"))
                                .and_then(Value::as_bool)
                                .unwrap_or(false);
                            if !loads {
                                break Some(format!(
                                    "agent '{name}' cannot load its earlier session {id} (it does \
                                     not offer loadSession) and its process is no longer kept; \
                                     start a new session"
                                ));
                            }
                            acp::load_session(OPEN_ID, id, &cwd_text)
                        }
                        None => acp::new_session(OPEN_ID, &cwd_text),
                    };
                    sup.send(&open).await;
                }
                Incoming::Answer {
                    id: OPEN_ID,
                    result,
                } => match (result, resume) {
                    (Ok(_), Some(id)) => {
                        session = Some(id.to_string());
                        drain_replay(&mut sup, ctx, replay_settle).await;
                        break None;
                    }
                    (Ok(r), None) => match str_of(r, "sessionId") {
                        Some(id) => {
                            session = Some(id.to_string());
                            break None;
                        }
                        None => break Some("session/new answered no sessionId".to_string()),
                    },
                    (Err(why), Some(id)) => {
                        break Some(format!(
                            "agent '{name}' could not load its earlier session {id}: {why}; \
                             nothing was sent to it (start a new session to go on)"
                        ));
                    }
                    (Err(why), None) => break Some(format!("session/new failed: {why}")),
                },
                // A loaded session's history, replayed as updates: already stored.
                Incoming::Update(_) | Incoming::Other | Incoming::Answer { .. } => {}
                Incoming::Call { id, method, .. } => {
                    sup.send(&acp::error_response(
                        id,
                        acp::METHOD_NOT_FOUND,
                        &format!("{method} is not served before a session is open"),
                    ))
                    .await;
                }
            }
        };
        match (session, failure) {
            (Some(session), None) => {
                sup.set_polite(Polite::Stdin(acp::cancel(&session)));
                Ok(AcpConn {
                    sup,
                    agent: name.to_string(),
                    cwd: cwd.to_path_buf(),
                    model,
                    session,
                    next_id: OPEN_ID + 1,
                    missing_empty: agent.missing_file_as_empty,
                    cost_reported: 0.0,
                    _note: note,
                })
            }
            (_, Some(why)) => {
                let ended = sup.finish().await;
                let why = if ended.stderr_tail.is_empty() {
                    why
                } else {
                    format!("{why}; stderr:\n{}", ended.stderr_tail.join("\n"))
                };
                Err(Box::new(fail(ctx, ErrorCode::CliSetup, why).await))
            }
            (None, None) => {
                let ended = sup.finish().await;
                if ended.interrupted {
                    return Err(Box::new(RunOutcome::new(FinishReason::Interrupted)));
                }
                let why = format!(
                    "agent '{name}' ended before its session was open{}",
                    if ended.stderr_tail.is_empty() {
                        String::new()
                    } else {
                        format!("; stderr:\n{}", ended.stderr_tail.join("\n"))
                    }
                );
                Err(Box::new(fail(ctx, ErrorCode::CliFailed, why).await))
            }
        }
    }

    /// Sends the prompt and relays the agent's turn until it answers it; true when it did.
    async fn prompt_acp(
        &self,
        ctx: &EngineSessionContext,
        conn: &mut AcpConn,
        run: &mut Relay<'_>,
    ) -> bool {
        let prompt_id = conn.next_id;
        conn.next_id += 1;
        let prompt = acp::prompt(prompt_id, &conn.session, &ctx.prompt);
        tracing::trace!(line = %String::from_utf8_lossy(&prompt), "to the ACP agent");
        conn.sup.send(&prompt).await;
        let mut adapter = AcpAdapter::default();
        let cost_before = conn.cost_reported;
        // Killed when the turn ends, however it ends.
        let mut terms = Terminals::new(&ctx.cancel);
        let mut edits = EditGrants::default();
        loop {
            let busy = terms.busy();
            let Some(line) = conn
                .sup
                .next_or_answer(&ctx.cancel, Some(&mut terms.answers), busy)
                .await
            else {
                break;
            };
            tracing::trace!(%line, "from the ACP agent");
            match acp::classify(&line) {
                Incoming::Update(u) => {
                    for ev in adapter.on_update(u, &|id| terms.text(id)) {
                        // The agent's figure is its session's so far: the run's is what this
                        // turn added to it.
                        let ev = match ev {
                            AdapterEvent::Cost(total) => {
                                let added = (total - cost_before).max(0.0);
                                conn.cost_reported = total;
                                AdapterEvent::Cost(added)
                            }
                            other => other,
                        };
                        run.apply(ev).await;
                    }
                }
                Incoming::Answer { id, result } if id == prompt_id => {
                    match result {
                        Ok(r) => {
                            if let Some(u) = acp::usage_of(r) {
                                run.apply(AdapterEvent::Usage(u)).await;
                            }
                            match str_of(r, "stopReason").unwrap_or("end_turn") {
                                "refusal" => {
                                    run.apply(AdapterEvent::Failed(
                                        "the agent refused to go on (stopReason refusal)".into(),
                                    ))
                                    .await;
                                }
                                reason @ ("max_tokens" | "max_turn_requests") => {
                                    run.apply(AdapterEvent::Notice(format!(
                                        "the agent stopped its turn: {reason}"
                                    )))
                                    .await;
                                }
                                _ => {}
                            }
                        }
                        Err(why) => run.apply(AdapterEvent::Failed(why)).await,
                    }
                    run.apply(AdapterEvent::Finished).await;
                    return !run.storage_failed();
                }
                Incoming::Answer { .. } | Incoming::Other => {}
                Incoming::Call { id, method, params } => {
                    let answer = match method {
                        "session/request_permission" => {
                            let mut answer = None;
                            for ev in adapter.on_permission(id, params) {
                                match ev {
                                    AdapterEvent::PermissionAsk {
                                        request_id,
                                        tool_name,
                                        input,
                                    } => {
                                        let allowed = self
                                            .acp_permission(ctx, &tool_name, &input)
                                            .await
                                            .is_ok();
                                        if allowed && tool_name == "execute" {
                                            terms.grant();
                                        }
                                        if allowed && tool_name == "edit" {
                                            edits.grant();
                                        }
                                        answer = adapter.permission_answer(&request_id, !allowed);
                                    }
                                    ev => run.apply(ev).await,
                                }
                            }
                            conn.sup.touch();
                            answer
                        }
                        "fs/read_text_file" => Some(
                            self.read_text_file(ctx, &conn.cwd, id, params, conn.missing_empty)
                                .await,
                        ),
                        "fs/write_text_file" => {
                            let answer = self
                                .write_text_file(ctx, &mut edits, &conn.cwd, id, params)
                                .await;
                            // The client may have been asked: its time is not the agent's.
                            conn.sup.touch();
                            Some(answer)
                        }
                        "terminal/create" => Some(
                            self.create_terminal(ctx, &mut terms, &conn.cwd, id, params)
                                .await,
                        ),
                        "terminal/output" => Some(terms.output(id, params)),
                        "terminal/wait_for_exit" => terms.wait_for_exit(id, params),
                        "terminal/kill" => Some(terms.kill(id, params)),
                        "terminal/release" => Some(terms.release(id, params)),
                        other => Some(acp::error_response(
                            id,
                            acp::METHOD_NOT_FOUND,
                            &format!("the client does not offer {other}"),
                        )),
                    };
                    if let Some(answer) = answer {
                        conn.sup.send(&answer).await;
                    }
                }
            }
            if run.storage_failed() {
                break;
            }
        }
        false
    }

    /// Whether the agent may run a tool of `kind` (the tool gate's tier and permission step for
    /// an ACP agent): the session's mode where it decides (bypassPermissions allows all;
    /// acceptEdits allows edits; plan refuses all but reads), else the client's answer.
    pub(crate) async fn acp_permission(
        &self,
        ctx: &EngineSessionContext,
        kind: &str,
        input: &Value,
    ) -> Result<(), Refusal> {
        match gate::acp_mode(ctx.permission_mode.unwrap_or_default(), kind)? {
            Permission::Granted => Ok(()),
            Permission::Ask => match self.ask(ctx, kind, input).await {
                None => Ok(()),
                Some(why) => Err(Refusal::new(Gate::Permission, why)),
            },
        }
    }
}

/// Drops what an agent replays of a loaded session after answering `session/load` (the protocol
/// has the replay come before the answer; gemini-cli 0.61 sends most of it after): lines until
/// the agent has been silent for `settle`. The history is already stored.
async fn drain_replay(sup: &mut Supervised, ctx: &EngineSessionContext, settle: Duration) {
    if settle.is_zero() {
        return;
    }
    while let Ok(Some(line)) = tokio::time::timeout(settle, sup.next(&ctx.cancel)).await {
        tracing::trace!(%line, "from the ACP agent (replay)");
        if let Incoming::Call { id, method, .. } = acp::classify(&line) {
            sup.send(&acp::error_response(
                id,
                acp::METHOD_NOT_FOUND,
                &format!("{method} is not served while a session loads"),
            ))
            .await;
        }
    }
}
