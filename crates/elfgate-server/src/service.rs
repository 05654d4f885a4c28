//! The business layer under the handlers: validation, sessions, runs, interrupts. The requests
//! and answers it takes and gives are the API's types (elfgate_api).

use crate::error::ApiError;
use crate::state::AppState;
use chrono::Utc;
use elfgate_api::{
    CreateSessionRequest, CreateSessionResponse, InterruptResponse, InterruptStatus,
    PermissionAnswered, PermissionBody, RunOverrides, SendMessageRequest, SendMessageResponse,
    SessionStatus, SessionView,
};
use elfgate_core::{
    ChannelPermissions, CliBackend, EngineConfig, EngineSessionContext, EngineType, EventEmitter,
    EventPayload, HeadStart, MessageId, OnBusy, PermissionAnswers, PermissionMode, Run, RunId,
    RunStatus, Session, SessionBus, SessionId, StartRequest, ThinkingLevel, UnknownName,
};
use elfgate_tools::PromptVerdict;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Parses a session id from a path; a malformed id is an unknown session.
pub fn parse_session_id(s: &str) -> Result<SessionId, ApiError> {
    s.parse()
        .map_err(|_| ApiError::NotFound(format!("unknown session '{s}'")))
}

/// A prompt's settings once validated: names parsed into their enums, engineConfig into its
/// struct.
struct Checked {
    thinking_level: Option<ThinkingLevel>,
    permission_mode: Option<PermissionMode>,
    engine_config: EngineConfig,
}

impl Checked {
    /// These settings over those stored with `session`, for a later prompt of it.
    fn over_session(self, session: &Session) -> Result<Checked, ApiError> {
        // Both were checked when the session was created; only a row written by an older daemon,
        // which took any keys, can fail here.
        let stored = |e: &dyn std::fmt::Display| {
            ApiError::Unprocessable(format!("the session's stored {e}"))
        };
        let base = EngineConfig::from_json(&session.engine_config).map_err(|e| stored(&e))?;
        let permission_mode = match self.permission_mode {
            Some(m) => Some(m),
            None => session.permission_mode,
        };
        Ok(Checked {
            thinking_level: self.thinking_level,
            permission_mode,
            engine_config: self.engine_config.over(&base),
        })
    }
}

/// The channel permissions stored with `session`.
fn stored_channel(session: &Session) -> Option<ChannelPermissions> {
    session
        .engine_config
        .get("channelPermissions")
        .and_then(|v| serde_json::from_value(v.clone()).ok())
}

/// An optional wire name parsed into its enum.
fn parse_name<T: FromStr<Err = UnknownName>>(name: Option<&str>) -> Result<Option<T>, UnknownName> {
    name.map(str::parse).transpose()
}

fn check_overrides(
    state: &AppState,
    engine: EngineType,
    o: &RunOverrides,
) -> Result<Checked, ApiError> {
    if let Some(why) = o.channel().problem() {
        return Err(ApiError::Unprocessable(why));
    }
    let bad = |e: UnknownName| ApiError::BadRequest(e.to_string());
    let permission_mode = parse_name(o.permission_mode.as_deref()).map_err(bad)?;
    let thinking_level = parse_name(o.thinking_level.as_deref()).map_err(bad)?;
    let engine_config = match &o.engine_config {
        None => EngineConfig::default(),
        Some(cfg) if !cfg.is_object() => {
            return Err(ApiError::BadRequest(
                "engineConfig must be a JSON object".into(),
            ));
        }
        Some(cfg) => {
            EngineConfig::from_json(cfg).map_err(|e| ApiError::Unprocessable(e.to_string()))?
        }
    };
    if let Some(url) = &engine_config.notify_url {
        if state.config.webhooks.notify_secret_env.is_none() {
            return Err(ApiError::Unprocessable(
                "engineConfig.notifyUrl: the daemon has no webhooks.notify_secret_env to sign \
                 its POSTs with"
                    .into(),
            ));
        }
        match reqwest::Url::parse(url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => {}
            _ => {
                return Err(ApiError::Unprocessable(format!(
                    "engineConfig.notifyUrl: '{url}' is not an http or https URL"
                )));
            }
        }
    }
    if engine_config.workflow.is_some() {
        return Err(ApiError::Unprocessable(
            "engineConfig.workflow: set by the daemon; a workflow's run is started with POST \
             /v1/workflows/{name}/runs"
                .into(),
        ));
    }
    if engine_config.search_orchestration == Some(true) && state.config.tools.web_search.is_none() {
        return Err(ApiError::Unprocessable(
            "engineConfig.searchOrchestration: no search backend is configured (the daemon's \
             [tools.web_search])"
                .into(),
        ));
    }
    let mut engine_config = engine_config;
    if let Some(args) = &o.cli_args {
        engine_config.cli_args = Some(args.clone());
    }
    if let Some(p) = o.channel_permissions {
        if engine_config.channel_permissions.is_some_and(|c| c != p) {
            return Err(ApiError::Unprocessable(
                "channelPermissions and engineConfig.channelPermissions differ: send one".into(),
            ));
        }
        engine_config.channel_permissions = Some(p);
    }
    if !engine.runs_a_cli() {
        state
            .providers
            .resolve(o.provider_id.as_deref())
            .map_err(|e| ApiError::Unprocessable(e.to_string()))?;
    }
    Ok(Checked {
        thinking_level,
        permission_mode,
        engine_config,
    })
}

/// The engine's own checks of a request (the cli engine's backend, arguments and provider).
fn check_engine(
    state: &AppState,
    engine: EngineType,
    cli_backend: Option<CliBackend>,
    checked: &Checked,
    provider_id: Option<&str>,
) -> Result<(), ApiError> {
    let Some(e) = state.dispatcher.get_engine(engine) else {
        return Ok(());
    };
    e.check_start(&StartRequest {
        cli_backend,
        cli_args: checked.engine_config.cli_args.as_deref(),
        provider_id,
        channel_permissions: checked.engine_config.channel_permissions,
        provider_env: checked.engine_config.provider_env.as_ref(),
        acp_agent: checked.engine_config.acp_agent.as_deref(),
        use_extended_context: checked.engine_config.use_extended_context == Some(true),
    })
    .map_err(|e| ApiError::Unprocessable(e.to_string()))
}

/// One projectPath check for every engine (see `ExecutionFirewall::check_project`): 422 naming
/// `field` (as the caller gave it), before anything is stored. An empty string is no project.
fn check_project_path(
    state: &AppState,
    project: Option<&str>,
    field: &str,
) -> Result<(), ApiError> {
    match project.filter(|p| !p.is_empty()) {
        None => Ok(()),
        Some(p) => state
            .tinyelf
            .check_project(std::path::Path::new(p))
            .map(drop)
            .map_err(|e| match &state.fleet {
                // Which node looked matters in a fleet: the path must exist on every node that
                // may run the session.
                Some(fleet) => ApiError::Unprocessable(format!(
                    "{field}: {e} (on node {}: in a fleet, a project must be on storage every \
                     node shares)",
                    fleet.node_id
                )),
                None => ApiError::Unprocessable(format!("{field}: {e}")),
            }),
    }
}

/// In a fleet, a later run may land on a node other than the session's first: its project must
/// be there too (shared storage), else a 422 naming the node, before anything is stored. (A
/// single node checked it when the session was created.)
fn check_project_here(state: &AppState, session: &Session) -> Result<(), ApiError> {
    if state.fleet.is_none() {
        return Ok(());
    }
    check_project_path(
        state,
        session.project_path.as_deref(),
        "the session's projectPath",
    )
}

/// Secrets shorter than this are not looked for (a short value would match ordinary text).
const MIN_SECRET_LEN: usize = 8;

/// The built-in input scan: a prompt that carries the daemon's own API token or a configured
/// provider's key is refused before anything is stored or sent, since a model provider (and the
/// session's history) would get the secret. The answer names what was found, never the value.
fn check_prompt_secrets(state: &AppState, prompt: &str) -> Result<(), ApiError> {
    SecretScan::new(state).check(prompt, "prompt")
}

/// The input scan of the system prompt a request sets, which is sent to the model too.
fn check_system_prompt_secrets(state: &AppState, o: &RunOverrides) -> Result<(), ApiError> {
    match &o.system_prompt {
        Some(system) => SecretScan::new(state).check(system, "systemPrompt"),
        None => Ok(()),
    }
}

/// The secrets the input scan looks for, read once for a request's many texts.
pub(crate) struct SecretScan {
    /// The daemon's token.
    token: Option<String>,
    /// Each provider's key: (provider, its variable, the key).
    keys: Vec<(String, String, String)>,
}

impl SecretScan {
    /// The daemon's token and the providers' keys now set.
    pub(crate) fn new(state: &AppState) -> SecretScan {
        let long_enough = |s: &String| s.len() >= MIN_SECRET_LEN;
        let keys = state
            .config
            .providers
            .iter()
            .filter_map(|(name, p)| {
                let var = p.api_key_env.as_deref()?;
                let key = std::env::var(var).ok().filter(long_enough)?;
                Some((name.clone(), var.to_string(), key))
            })
            .collect();
        SecretScan {
            token: state.config.token.clone().filter(long_enough),
            keys,
        }
    }

    /// One text a request sends (`field` names where it is): 422 naming the field and which
    /// secret, never its value.
    pub(crate) fn check(&self, text: &str, field: &str) -> Result<(), ApiError> {
        if self.token.as_deref().is_some_and(|t| text.contains(t)) {
            return Err(ApiError::Unprocessable(format!(
                "{field}: it carries this daemon's API token, which is never sent to a model; \
                 remove it (and consider the token exposed if it was pasted from elsewhere)"
            )));
        }
        for (name, var, key) in &self.keys {
            if text.contains(key.as_str()) {
                return Err(ApiError::Unprocessable(format!(
                    "{field}: it carries the API key of provider '{name}' ({var}), which is \
                     never sent to a model; remove it"
                )));
            }
        }
        Ok(())
    }
}

/// The agent profile a new session names (`agentId`, `[agents.NAME]`), applied wherever the
/// request is silent: its system prompt, provider, model and permission mode, and its
/// engineConfig keys (tools and skills among them) under the request's own keys. An unknown id
/// is 422 naming the profiles there are.
fn apply_agent_profile(state: &AppState, req: &mut CreateSessionRequest) -> Result<(), ApiError> {
    let Some(id) = req.agent_id.as_deref() else {
        return Ok(());
    };
    let profile = state.config.agents.get(id).ok_or_else(|| {
        let known: Vec<&str> = state.config.agents.keys().map(String::as_str).collect();
        ApiError::Unprocessable(format!(
            "agentId: no agent profile '{id}' is configured (have: {})",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        ))
    })?;
    let o = &mut req.overrides;
    if o.system_prompt.is_none() {
        o.system_prompt.clone_from(&profile.system_prompt);
    }
    if o.provider_id.is_none() {
        o.provider_id.clone_from(&profile.provider);
    }
    if o.model.is_none() {
        o.model.clone_from(&profile.model);
    }
    if o.permission_mode.is_none() {
        o.permission_mode = profile.permission_mode.map(|m| m.as_str().to_string());
    }
    // Both parsed, so that older key names (maxTurns, tools...) meet their current ones, and
    // the request's keys go over the profile's one by one (EngineConfig::over).
    let Ok(mut base) = EngineConfig::from_json(&serde_json::Value::Object(profile.engine_config()))
    else {
        // Checked at start; a profile that no longer parses adds nothing.
        return Ok(());
    };
    if o.channel_permissions.is_some() {
        // The request's top-level channelPermissions win over the profile's.
        base.channel_permissions = None;
    }
    o.engine_config = match o.engine_config.take() {
        None => Some(base.to_json()),
        Some(own) => match EngineConfig::from_json(&own) {
            Ok(own) => Some(own.over(&base).to_json()),
            // Left as it came, for check_overrides to refuse by name.
            Err(_) => Some(own),
        },
    };
    Ok(())
}

/// The input scan's hook point: the UserPromptSubmit hooks see the prompt (and the checked
/// channel fields) before anything of it is stored, and may refuse it (422 naming the hook's reason) or rewrite it (the rewritten
/// prompt is the one stored, sent and scanned for secrets). None: the prompt stands as it came.
async fn submit_prompt(
    state: &AppState,
    prompt: &str,
    session_id: Option<SessionId>,
    engine: EngineType,
    project: Option<&str>,
    channel: &elfgate_core::ChannelOrigin,
) -> Result<Option<String>, ApiError> {
    let mut payload = serde_json::json!({
        "event": "UserPromptSubmit",
        "sessionId": session_id,
        "engine": engine.as_str(),
        "projectPath": project,
        "prompt": prompt,
    });
    channel.add_to(&mut payload);
    match state
        .tinyelf
        .submit_prompt(&payload, project.map(std::path::Path::new))
        .await
    {
        PromptVerdict::Keep => Ok(None),
        PromptVerdict::Block(reason) => Err(ApiError::Unprocessable(format!(
            "prompt: refused by a UserPromptSubmit hook: {reason}"
        ))),
        PromptVerdict::Rewrite(p) => {
            check_prompt(&p)?;
            check_prompt_secrets(state, &p)?;
            Ok(Some(p))
        }
    }
}

/// A prompt's attachments, checked before anything is stored: each has content (base64 data, an
/// http(s) URL or text) within `server.attachment_max_bytes` (413 past it), and a file that is
/// neither an image nor text is a type the run's provider kind takes as a document (422 naming
/// the attachment and the provider). The cli engine passes none to its CLI: any is 422.
fn check_attachments(
    state: &AppState,
    engine: EngineType,
    provider_id: Option<&str>,
    attachments: &[elfgate_core::Attachment],
) -> Result<(), ApiError> {
    if attachments.is_empty() {
        return Ok(());
    }
    if engine.runs_a_cli() {
        return Err(ApiError::Unprocessable(
            "attachments: the cli engine cannot hand attachments to a CLI; put the files in the \
             project and name them in the prompt"
                .into(),
        ));
    }
    let max = state.config.server.attachment_max_bytes;
    for (i, a) in attachments.iter().enumerate() {
        let what = format!(
            "attachments[{i}] ({}{})",
            a.name
                .as_deref()
                .map(|n| format!("{n}, "))
                .unwrap_or_default(),
            a.media_type
        );
        let size = match (&a.data, &a.url, &a.text) {
            (Some(d), None, None) => base64_len(d)
                .ok_or_else(|| ApiError::Unprocessable(format!("{what}: data is not base64")))?,
            (None, Some(u), None) => {
                if !(u.starts_with("https://") || u.starts_with("http://")) {
                    return Err(ApiError::Unprocessable(format!(
                        "{what}: url must be an http(s) URL"
                    )));
                }
                0
            }
            (None, None, Some(t)) => t.len(),
            _ => {
                return Err(ApiError::Unprocessable(format!(
                    "{what}: give exactly one of data (base64), url or text"
                )));
            }
        };
        if size > max {
            return Err(ApiError::AttachmentTooLarge(format!(
                "{what} is {size} bytes, more than server.attachment_max_bytes ({max})"
            )));
        }
        let document = !a.media_type.starts_with("image/") && a.text.is_none();
        if document {
            let (name, provider) = state
                .providers
                .resolve(provider_id)
                .map_err(|e| ApiError::Unprocessable(e.to_string()))?;
            let kind = provider.kind();
            kind.takes_document(&a.media_type, a.url.is_some())
                .map_err(|takes| {
                    ApiError::Unprocessable(format!(
                        "{what}: provider '{name}' ({kind}) cannot take this file: it takes {takes}"
                    ))
                })?;
        }
    }
    Ok(())
}

/// engineConfig nativeSearchEnabled needs a provider kind that can search itself: 422 naming the
/// provider otherwise (the cli engine's CLIs search as they do, and are refused too).
fn check_native_search(
    state: &AppState,
    engine: EngineType,
    provider_id: Option<&str>,
    cfg: &EngineConfig,
) -> Result<(), ApiError> {
    if cfg.native_search_enabled != Some(true) {
        return Ok(());
    }
    let refused =
        |why: String| ApiError::Unprocessable(format!("engineConfig.nativeSearchEnabled: {why}"));
    if engine.runs_a_cli() {
        return Err(refused(
            "a CLI searches as it does; the cli engine cannot ask it".into(),
        ));
    }
    let (name, provider) = state
        .providers
        .resolve(provider_id)
        .map_err(|e| ApiError::Unprocessable(e.to_string()))?;
    let kind = provider.kind();
    if !kind.searches_natively() {
        return Err(refused(format!(
            "provider '{name}' ({kind}) cannot be asked to search itself here (openai-responses, \
             anthropic and gemini can); use the web_search tool ([tools.web_search]) instead"
        )));
    }
    Ok(())
}

/// The decoded length of standard base64 text, None when it is not base64.
fn base64_len(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let body = text.trim_end_matches('=');
    let padding = bytes.len() - body.len();
    let valid = bytes.len().is_multiple_of(4)
        && padding <= 2
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/');
    valid.then(|| bytes.len() / 4 * 3 - padding)
}

fn check_prompt(prompt: &str) -> Result<(), ApiError> {
    if prompt.trim().is_empty() {
        return Err(ApiError::BadRequest("prompt must not be empty".into()));
    }
    Ok(())
}

fn check_serving(state: &AppState) -> Result<(), ApiError> {
    if state.is_shutting_down() {
        return Err(ApiError::shutting_down());
    }
    Ok(())
}

/// The session's bus, opened at the current last seq if none is open.
pub async fn open_bus(
    state: &AppState,
    session_id: SessionId,
) -> Result<Arc<SessionBus>, ApiError> {
    let hub = state.dispatcher.hub();
    if let Some(bus) = hub.get(session_id) {
        return Ok(bus);
    }
    flush_before_open(state).await?;
    let (last, reserved) = state.store.open_seq_range(session_id).await?;
    Ok(hub.open(session_id, last, reserved))
}

/// Before a bus is opened from the log: a bus closed moments ago may still have events and its
/// release on their way to the log. While the log cannot be written, the seqs read back could be
/// below events not yet written: refused, rather than numbered twice.
async fn flush_before_open(state: &AppState) -> Result<(), ApiError> {
    if state.dispatcher.hub().flush().await {
        Ok(())
    } else {
        Err(ApiError::Storage(elfgate_store::StoreError::LogBehind(
            "events wait to be written".into(),
        )))
    }
}

/// The bus a client follows the session on. On a fleet node it reserves no seqs (it publishes
/// nothing unless this node runs the session, and then [`open_run_bus`] reserves): a follower's
/// reservation would make the next owner's numbering jump.
pub async fn open_follow_bus(
    state: &AppState,
    session_id: SessionId,
) -> Result<Arc<SessionBus>, ApiError> {
    if state.fleet.is_none() {
        return open_bus(state, session_id).await;
    }
    let hub = state.dispatcher.hub();
    if let Some(bus) = hub.get(session_id) {
        return Ok(bus);
    }
    flush_before_open(state).await?;
    let logged = state.store.last_seq(session_id).await?;
    Ok(hub.open(session_id, logged, logged))
}

/// The bus a run of this node publishes on. On a fleet node, a bus opened earlier by a follower of
/// another node's run numbers from where the log stood then: when the log has gone past it (the
/// other node's events), it is moved above what the log and the reservation hold now, so that no
/// seq is handed out twice. A bus that numbered the session's last events itself stays as it is.
async fn open_run_bus(
    state: &AppState,
    session_id: SessionId,
) -> Result<Arc<SessionBus>, ApiError> {
    // A bus whose runs lost the session to another node publishes nothing more: a new run
    // numbers from the log, on a bus of its own.
    if state
        .dispatcher
        .hub()
        .get(session_id)
        .is_some_and(|b| b.lease().is_lost())
    {
        state.dispatcher.hub().remove(session_id);
    }
    let existed = state.dispatcher.hub().get(session_id).is_some();
    let bus = open_bus(state, session_id).await?;
    // A bus of this node's active run numbers on as it is (a queued prompt).
    if existed
        && state.fleet.is_some()
        && !state.dispatcher.active().contains(session_id)
        && state.store.last_seq(session_id).await? > bus.last_seq()
    {
        let (last, reserved) = state.store.open_seq_range(session_id).await?;
        bus.rebase(last, reserved);
    }
    guard_by_lease(state, &bus);
    Ok(bus)
}

/// Guards what a run of this node does for the session by the lease it claimed when the run was
/// stored (a fleet node; nothing on a single node): see `elfgate_core::lease`.
fn guard_by_lease(state: &AppState, bus: &SessionBus) {
    if let Some(fleet) = &state.fleet {
        bus.hold_lease(fleet.store.lease_guard(bus.session_id()));
    }
}

/// The prompt side of a run about to be built.
struct Prompt {
    run_id: RunId,
    text: String,
    is_resume: bool,
    parent_id: Option<MessageId>,
}

fn build_ctx(
    state: &AppState,
    session: &Session,
    p: Prompt,
    o: RunOverrides,
    checked: Checked,
    bus: Arc<SessionBus>,
) -> EngineSessionContext {
    let Prompt {
        run_id,
        text: prompt,
        is_resume,
        parent_id,
    } = p;
    let channel = o.channel();
    EngineSessionContext {
        session: session.clone(),
        run_id,
        prompt,
        is_resume,
        user_message_id: MessageId::new(),
        recorder: state.dispatcher.recorder(session.id, run_id),
        head_start: Default::default(),
        client_msg_id: o.client_msg_id.clone(),
        parent_id,
        provider_id: o
            .provider_id
            .clone()
            .or_else(|| session.provider_id.clone()),
        model: o.model.clone().or_else(|| session.model.clone()),
        system_prompt: o
            .system_prompt
            .clone()
            .or_else(|| session.system_prompt.clone()),
        thinking_level: checked.thinking_level,
        project_path: session.project_path.clone(),
        agent_id: session.agent_id.clone(),
        engine_config: checked.engine_config,
        permission_mode: checked.permission_mode,
        cli_backend: session.cli_backend,
        attachments: o.attachments.unwrap_or_default(),
        stored_input: None,
        permission_answers: Default::default(),
        events: EventEmitter::new(bus, run_id),
        cancel: CancellationToken::new(),
        metrics: state.metrics.clone(),
        tool_run: None,
        node: state.fleet.as_ref().map(|f| f.node_id.clone()),
        channel,
    }
}

fn new_run(
    session_id: SessionId,
    client_msg_id: Option<String>,
    channel: elfgate_core::ChannelOrigin,
) -> Run {
    Run {
        id: RunId::new(),
        session_id,
        status: RunStatus::Queued,
        finish_reason: None,
        usage: elfgate_core::TokenUsage::default(),
        iterations: 0,
        started_at: Utc::now(),
        ended_at: None,
        error: None,
        client_msg_id,
        channel,
    }
}

/// A prompt rewritten by a UserPromptSubmit hook, in the upstream request a gateway door built
/// before the hooks ran: the last user turn's text becomes the rewritten prompt (its images and
/// files stay), and the caller's own wire-format copy of the messages is dropped so that the
/// rewritten request is the one sent.
fn rewrite_gateway_prompt(gateway: &mut Option<GatewayCall>, prompt: &str) {
    let Some(call) = gateway else {
        return;
    };
    let Some(work) = &call.head_start else {
        return;
    };
    let Some(mut turn) = work.take::<elfgate_engines::GatewayTurn>() else {
        return;
    };
    if let Some(last) = turn
        .request
        .messages
        .iter_mut()
        .rev()
        .find(|m| m.role == elfgate_core::Role::User)
    {
        last.blocks
            .retain(|b| !matches!(b, elfgate_core::ContentBlock::Text { .. }));
        last.blocks
            .insert(0, elfgate_core::ContentBlock::text(prompt.to_string()));
    }
    turn.request.passthrough = None;
    call.head_start = Some(HeadStart::new(turn));
}

/// What a gateway door hands to the run it starts.
#[derive(Debug, Default)]
pub struct GatewayCall {
    /// Work done in place of the engine's own head start (the door's whole upstream request).
    pub head_start: Option<HeadStart>,
    /// How the door's caller gave the project path (its header), for the refusal to name.
    pub project_field: &'static str,
    /// What the run stores as its user message, when more than the prompt's text.
    pub stored_input: Option<Vec<elfgate_core::ContentBlock>>,
}

impl GatewayCall {
    /// Applies the call to the run's context: its head start, and that its caller cannot answer
    /// permission requests (asked only while a client follows the session).
    fn apply(self, ctx: &mut EngineSessionContext) {
        if let Some(work) = self.head_start {
            ctx.head_start = work;
        }
        if self.stored_input.is_some() {
            ctx.stored_input = self.stored_input;
        }
        ctx.permission_answers = PermissionAnswers::WatchersOnly;
    }
}

/// Creates a session and starts its first run; `gateway` when a front door's call does.
pub async fn create_session(
    state: &AppState,
    req: CreateSessionRequest,
    gateway: Option<GatewayCall>,
) -> Result<CreateSessionResponse, ApiError> {
    create_session_running(state, req, gateway, None).await
}

/// Starts a run of a workflow's version: a new session of the `workflow` engine.
pub async fn start_workflow_run(
    state: &AppState,
    req: CreateSessionRequest,
    workflow: elfgate_core::WorkflowRef,
) -> Result<CreateSessionResponse, ApiError> {
    create_session_running(state, req, None, Some(workflow)).await
}

/// A new session and its first run; `workflow` is the workflow a `workflow` session runs (only
/// the daemon names one).
async fn create_session_running(
    state: &AppState,
    req: CreateSessionRequest,
    gateway: Option<GatewayCall>,
    workflow: Option<elfgate_core::WorkflowRef>,
) -> Result<CreateSessionResponse, ApiError> {
    check_serving(state)?;
    let engine: EngineType =
        req.engine
            .parse()
            .map_err(|e: elfgate_core::engine_type::UnknownEngine| {
                ApiError::Unprocessable(e.to_string())
            })?;
    if !state.dispatcher.has_engine(engine) {
        return Err(ApiError::Unprocessable(format!(
            "engine '{engine}' is not available in this build"
        )));
    }
    check_prompt(&req.prompt)?;
    check_prompt_secrets(state, &req.prompt)?;
    check_system_prompt_secrets(state, &req.overrides)?;
    let project_field = gateway.as_ref().map_or("projectPath", |g| g.project_field);
    check_project_path(state, req.project_path.as_deref(), project_field)?;
    let mut req = req;
    apply_agent_profile(state, &mut req)?;
    let mut checked = check_overrides(state, engine, &req.overrides)?;
    match (engine, workflow) {
        (EngineType::Workflow, None) => {
            return Err(ApiError::Unprocessable(
                "engine: a workflow's run is started with POST /v1/workflows/{name}/runs".into(),
            ));
        }
        (_, workflow) => checked.engine_config.workflow = workflow,
    }
    if let Some(mcp) = &req.mcp_config {
        checked.engine_config.mcp_config = Some(
            elfgate_core::McpSessionConfig::from_json(mcp)
                .map_err(|e| ApiError::Unprocessable(e.to_string()))?,
        );
    }
    if let Some(agent) = &req.acp_agent {
        match &checked.engine_config.acp_agent {
            Some(other) if other != agent => {
                return Err(ApiError::Unprocessable(format!(
                    "acpAgent: '{agent}' differs from engineConfig.acpAgent '{other}'; give one"
                )));
            }
            _ => checked.engine_config.acp_agent = Some(agent.clone()),
        }
    }
    if let Some(extended) = req.use_extended_context {
        match checked.engine_config.use_extended_context {
            Some(other) if other != extended => {
                return Err(ApiError::Unprocessable(format!(
                    "useExtendedContext: {extended} differs from engineConfig.useExtendedContext \
                     {other}; give one"
                )));
            }
            _ => checked.engine_config.use_extended_context = Some(extended),
        }
    }
    let cli_backend = parse_name(req.cli_backend.as_deref())
        .map_err(|e| ApiError::Unprocessable(e.to_string()))?;
    check_engine(
        state,
        engine,
        cli_backend,
        &checked,
        req.overrides.provider_id.as_deref(),
    )?;
    check_attachments(
        state,
        engine,
        req.overrides.provider_id.as_deref(),
        req.overrides.attachments.as_deref().unwrap_or_default(),
    )?;
    check_native_search(
        state,
        engine,
        req.overrides.provider_id.as_deref(),
        &checked.engine_config,
    )?;
    // Held until the session is stored: a retry racing this request waits, then finds it.
    let _key = match req.overrides.client_msg_id.as_deref() {
        Some(key) => Some(state.client_keys.acquire(None, key).await),
        None => None,
    };
    if let Some(key) = req.overrides.client_msg_id.as_deref()
        && let Some(run) = state.store.run_by_client_msg_id(None, key).await?
    {
        return Ok(CreateSessionResponse {
            session_id: run.session_id,
            run_id: run.id,
            events_url: format!("/v1/sessions/{}/events", run.session_id),
            duplicate: true,
        });
    }
    // The prompt hooks last among the checks: a refused or repeated request runs none.
    let mut gateway = gateway;
    if let Some(p) = submit_prompt(
        state,
        &req.prompt,
        None,
        engine,
        req.project_path.as_deref(),
        &req.overrides.channel(),
    )
    .await?
    {
        rewrite_gateway_prompt(&mut gateway, &p);
        req.prompt = p;
    }
    let now = Utc::now();
    let session = Session {
        id: SessionId::new(),
        engine,
        title: req.title.clone(),
        provider_id: req.overrides.provider_id.clone(),
        model: req.overrides.model.clone(),
        cli_backend,
        project_path: req.project_path.clone(),
        agent_id: req.agent_id.clone(),
        system_prompt: req.overrides.system_prompt.clone(),
        permission_mode: checked.permission_mode,
        // Stored as understood: canonical key names, so that an alias reads back the same.
        engine_config: checked.engine_config.to_json(),
        cli_session_id: None,
        created_at: now,
        updated_at: now,
    };
    let mut run = new_run(
        session.id,
        req.overrides.client_msg_id.clone(),
        req.overrides.channel(),
    );
    // A new session has no other run: its first one starts at once, so it is stored as running.
    run.status = RunStatus::Running;
    // create_session stores the first seq reservation with the session.
    let bus = state
        .dispatcher
        .hub()
        .open(session.id, 0, elfgate_core::SEQ_RESERVE_BLOCK);
    let prompt = Prompt {
        run_id: run.id,
        text: req.prompt,
        is_resume: false,
        parent_id: None,
    };
    let mut ctx = build_ctx(state, &session, prompt, req.overrides, checked, bus.clone());
    // The first prompt is stored in the same commit as the session and its running run: one wait
    // instead of three before the request goes upstream. The run's recorder is told so, and
    // neither it nor the engine writes them again.
    let user = elfgate_engines::prompt::new_user_message(&ctx, None);
    ctx.recorder = state
        .dispatcher
        .first_run_recorder(session.id, run.id, user.clone());
    // The engine may begin the upstream call now, so that it overlaps the commit; it publishes
    // and stores nothing before it is dispatched below, and the call is dropped if the commit fails.
    // Work handed in (the gateway's whole upstream request) is the engine's to start early too.
    if let Some(g) = gateway {
        g.apply(&mut ctx);
    }
    if let Some(e) = state.dispatcher.get_engine(engine) {
        let early = e.head_start(&ctx);
        if early.is_set() {
            ctx.head_start = early;
        }
    }
    if let Err(e) = state
        .store
        .create_session(&session, &run, Some(&user))
        .await
    {
        state.dispatcher.hub().remove(session.id);
        return Err(e.into());
    }
    guard_by_lease(state, &bus);
    bus.publish(Some(run.id), EventPayload::SessionCreated {})
        .await;
    // Stored with the session, so announced with it too, whatever the run does next.
    bus.publish(Some(run.id), EventPayload::UserMessage { message: user })
        .await;
    match state.dispatcher.dispatch(ctx, OnBusy::Reject) {
        Ok(_) => Ok(CreateSessionResponse {
            session_id: session.id,
            run_id: run.id,
            events_url: format!("/v1/sessions/{}/events", session.id),
            duplicate: false,
        }),
        // The stored run never started; the next start ends it (daemon_restart). A new session
        // has no run to be busy with or queue behind.
        Err(e) => Err(e.into()),
    }
}

/// The session a later run is for, with the pass that a prompt holds until its run is admitted
/// or withdrawn, so that a DELETE either stops the run or is seen by the checks that follow (see
/// session_gate.rs).
async fn enter_session(
    state: &AppState,
    session_id: SessionId,
) -> Result<(crate::session_gate::PromptPass<'_>, Session), ApiError> {
    let pass =
        state.sessions.enter(session_id).await.ok_or_else(|| {
            ApiError::NotFound(format!("session '{session_id}' is being deleted"))
        })?;
    let session = state
        .store
        .get_session(session_id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("unknown session '{session_id}'")))?;
    Ok((pass, session))
}

/// Starts (or queues) a later run of a session; `gateway` when a front door's call does.
pub async fn send_message(
    state: &AppState,
    session_id: SessionId,
    req: SendMessageRequest,
    gateway: Option<GatewayCall>,
) -> Result<SendMessageResponse, ApiError> {
    send_message_running(state, session_id, req, gateway, None).await
}

/// A resumed run of a workflow's session (`workflow` says where it goes on).
pub async fn resume_workflow_run(
    state: &AppState,
    session_id: SessionId,
    req: SendMessageRequest,
    workflow: elfgate_core::WorkflowRef,
) -> Result<SendMessageResponse, ApiError> {
    send_message_running(state, session_id, req, None, Some(workflow)).await
}

/// A later run of a session; `workflow` is the resumed workflow run a `workflow` session's run
/// is (only the daemon names one).
async fn send_message_running(
    state: &AppState,
    session_id: SessionId,
    req: SendMessageRequest,
    gateway: Option<GatewayCall>,
    workflow: Option<elfgate_core::WorkflowRef>,
) -> Result<SendMessageResponse, ApiError> {
    check_serving(state)?;
    let (_pass, session) = enter_session(state, session_id).await?;
    if session.engine == EngineType::Workflow && workflow.is_none() {
        return Err(ApiError::Unprocessable(
            "a workflow's session takes no prompts: start another run with POST \
             /v1/workflows/{name}/runs"
                .into(),
        ));
    }
    check_prompt(&req.prompt)?;
    check_prompt_secrets(state, &req.prompt)?;
    check_system_prompt_secrets(state, &req.overrides)?;
    // The provider this run would use: the prompt's, else the session's.
    let provider_id = req
        .overrides
        .provider_id
        .clone()
        .or_else(|| session.provider_id.clone());
    let provider_id = provider_id.as_deref();
    let own = check_overrides(state, session.engine, &req.overrides)?;
    let mut req = req;
    // The session's channel permissions change only when a prompt sends new ones.
    let new_channel = own
        .engine_config
        .channel_permissions
        .filter(|p| stored_channel(&session) != Some(*p));
    let mut checked = own.over_session(&session)?;
    if workflow.is_some() {
        checked.engine_config.workflow = workflow;
    }
    check_engine(
        state,
        session.engine,
        session.cli_backend,
        &checked,
        provider_id,
    )?;
    check_attachments(
        state,
        session.engine,
        provider_id,
        req.overrides.attachments.as_deref().unwrap_or_default(),
    )?;
    check_native_search(state, session.engine, provider_id, &checked.engine_config)?;
    check_project_here(state, &session)?;
    // Held until the run is stored and dispatched (or withdrawn): a retry racing this request
    // waits, then finds the run, instead of being refused as busy because of it.
    let _key = match req.overrides.client_msg_id.as_deref() {
        Some(key) => Some(state.client_keys.acquire(Some(session_id), key).await),
        None => None,
    };
    if let Some(key) = req.overrides.client_msg_id.as_deref()
        && let Some(run) = state
            .store
            .run_by_client_msg_id(Some(session_id), key)
            .await?
    {
        return Ok(duplicate_of(run));
    }
    if req.on_busy == OnBusy::Reject
        && let Some(active) = state.dispatcher.active().get(session_id)
    {
        return Err(ApiError::Busy {
            active_run_id: active.run_id,
        });
    }
    // Refused before the run is stored; admission checks again, atomically, below.
    let active = state.dispatcher.active();
    if req.on_busy == OnBusy::Enqueue && active.queue_is_full(session_id) {
        return Err(ApiError::TooManyQueued(active.max_queued()));
    }
    if let Some(parent) = req.parent_id
        && state.store.get_message(session_id, parent).await?.is_none()
    {
        return Err(ApiError::NotFound(format!(
            "unknown parent message '{parent}' in this session"
        )));
    }
    // The prompt hooks last among the checks: a refused or repeated request runs none.
    let mut gateway = gateway;
    if let Some(p) = submit_prompt(
        state,
        &req.prompt,
        Some(session_id),
        session.engine,
        session.project_path.as_deref(),
        &req.overrides.channel(),
    )
    .await?
    {
        rewrite_gateway_prompt(&mut gateway, &p);
        req.prompt = p;
    }
    if let Some(p) = new_channel {
        let mut cfg = session.engine_config.clone();
        if let Some(obj) = cfg.as_object_mut() {
            obj.insert(
                "channelPermissions".into(),
                serde_json::to_value(p).map_err(|e| ApiError::Internal(e.to_string()))?,
            );
        }
        state
            .store
            .set_session_engine_config(session_id, &cfg)
            .await?;
    }
    let run = new_run(
        session_id,
        req.overrides.client_msg_id.clone(),
        req.overrides.channel(),
    );
    if let Err(e) = state.store.create_run(&run).await {
        // The same key may have been stored a moment ago by a concurrent retry.
        if let Some(key) = req.overrides.client_msg_id.as_deref()
            && let Some(earlier) = state
                .store
                .run_by_client_msg_id(Some(session_id), key)
                .await?
        {
            return Ok(duplicate_of(earlier));
        }
        return Err(e.into());
    }
    let bus = open_run_bus(state, session_id).await?;
    let prompt = Prompt {
        run_id: run.id,
        text: req.prompt,
        is_resume: true,
        parent_id: req.parent_id,
    };
    let mut ctx = build_ctx(state, &session, prompt, req.overrides, checked, bus);
    if let Some(g) = gateway {
        g.apply(&mut ctx);
    }
    match state.dispatcher.dispatch(ctx, req.on_busy) {
        Ok(status) => Ok(SendMessageResponse {
            session_id,
            run_id: run.id,
            status: status.into(),
            duplicate: false,
        }),
        Err(e) => {
            // Not admitted (lost a race with another prompt, a full queue, shutting down): the
            // run never started.
            state.store.delete_run(run.id).await?;
            Err(e.into())
        }
    }
}

fn duplicate_of(run: Run) -> SendMessageResponse {
    SendMessageResponse {
        session_id: run.session_id,
        run_id: run.id,
        status: run.status,
        duplicate: true,
    }
}

/// Interrupts a session's run; with `wait`, returns once it has ended (up to 30 s).
pub async fn interrupt(
    state: &AppState,
    session_id: SessionId,
    wait: bool,
) -> Result<InterruptResponse, ApiError> {
    if state.store.get_session(session_id).await?.is_none() {
        return Err(ApiError::NotFound(format!(
            "unknown session '{session_id}'"
        )));
    }
    let result = state.dispatcher.interrupt(session_id);
    let Some(run_id) = result.run_id else {
        return Ok(InterruptResponse {
            interrupted: false,
            run_id: None,
            status: InterruptStatus::Idle,
        });
    };
    let mut status = InterruptStatus::Interrupting;
    if wait
        && let Some(done) = result.done
        && tokio::time::timeout(Duration::from_secs(30), done.cancelled())
            .await
            .is_ok()
    {
        status = InterruptStatus::Interrupted;
    }
    Ok(InterruptResponse {
        interrupted: true,
        run_id: Some(run_id),
        status,
    })
}

/// One session with its live status.
pub async fn session_view(
    state: &AppState,
    session_id: SessionId,
) -> Result<SessionView, ApiError> {
    let session = state
        .store
        .get_session(session_id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("unknown session '{session_id}'")))?;
    Ok(view(state, session))
}

/// Adds the live status to a stored session.
pub fn view(state: &AppState, session: Session) -> SessionView {
    let active = state.dispatcher.active().get(session.id);
    SessionView {
        status: if active.is_some() {
            SessionStatus::Running
        } else {
            SessionStatus::Idle
        },
        active_run_id: active.as_ref().map(|a| a.run_id),
        queued_runs: active.map(|a| a.queued).unwrap_or(0),
        first_prompt: None,
        session,
    }
}

/// Deletes a session after stopping its run.
pub async fn delete_session(state: &AppState, session_id: SessionId) -> Result<(), ApiError> {
    if state.store.get_session(session_id).await?.is_none() {
        return Err(ApiError::NotFound(format!(
            "unknown session '{session_id}'"
        )));
    }
    let Some(_mark) = state.sessions.begin_delete(session_id).await else {
        return Err(ApiError::Conflict(format!(
            "session '{session_id}' is already being deleted"
        )));
    };
    delete_stopped_session(state, session_id).await
}

async fn delete_stopped_session(state: &AppState, session_id: SessionId) -> Result<(), ApiError> {
    state.dispatcher.interrupt(session_id);
    // Wait for the running run and every cancelled queued run behind it: each still publishes its
    // `result` and `complete`, which must reach the log before the log is deleted.
    let active = state.dispatcher.active().clone();
    let all_ended = async {
        while let Some(run) = active.get(session_id) {
            run.done.cancelled().await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(30), all_ended)
        .await
        .is_err()
    {
        // Deleting under a run that still writes would lose its writes silently: refuse instead.
        return Err(ApiError::Conflict(
            "the session's run did not stop within 30 s; nothing was deleted".into(),
        ));
    }
    // The run's last events must be in the log before the log is deleted.
    state.dispatcher.hub().flush().await;
    state.store.delete_session(session_id).await?;
    state.dispatcher.hub().remove(session_id);
    state.permissions.forget_session(session_id);
    state.dispatcher.forget_session(session_id).await;
    Ok(())
}

/// Runs a tool outside a turn (`POST /v1/sessions/{id}/tools/{name}`): checks the session (404,
/// 422 when it is not a tinyelf session), the tool (404) and its arguments (422), refuses a busy
/// session (409), then stores and dispatches the run and returns its id and answer once the run
/// has ended.
pub async fn run_tool(
    state: &AppState,
    session_id: SessionId,
    name: String,
    arguments: serde_json::Value,
) -> Result<(RunId, elfgate_engines::tinyelf::ToolRunAnswer), ApiError> {
    use elfgate_engines::tinyelf::ToolRunError;
    check_serving(state)?;
    let (_pass, session) = enter_session(state, session_id).await?;
    if session.engine != EngineType::TinyElf {
        return Err(ApiError::Unprocessable(format!(
            "tool runs need a tinyelf session; this one is {}",
            session.engine.as_str()
        )));
    }
    check_project_here(state, &session)?;
    let project = session
        .project_path
        .as_deref()
        .and_then(|p| std::fs::canonicalize(p).ok())
        .filter(|p| p.is_dir());
    let checked =
        check_overrides(state, session.engine, &RunOverrides::default())?.over_session(&session)?;
    state
        .tinyelf
        .check_tool_run(
            project.as_deref(),
            session_id,
            checked.engine_config.mcp_config.as_ref(),
            checked.engine_config.enabled_tools.as_deref(),
            &name,
            &arguments,
        )
        .await
        .map_err(|e| match e {
            ToolRunError::UnknownTool(_) => ApiError::NotFound(e.to_string()),
            ToolRunError::NotEnabled { .. } | ToolRunError::BadArguments { .. } => {
                ApiError::Unprocessable(e.to_string())
            }
        })?;
    if let Some(active) = state.dispatcher.active().get(session_id) {
        return Err(ApiError::Busy {
            active_run_id: active.run_id,
        });
    }
    let run = new_run(session_id, None, Default::default());
    state.store.create_run(&run).await?;
    let bus = open_run_bus(state, session_id).await?;
    let answer = state.tinyelf.await_tool_run(run.id);
    let prompt = Prompt {
        run_id: run.id,
        text: String::new(),
        is_resume: true,
        parent_id: None,
    };
    let mut ctx = build_ctx(
        state,
        &session,
        prompt,
        RunOverrides::default(),
        checked,
        bus,
    );
    ctx.tool_run = Some(elfgate_core::ToolRun { name, arguments });
    let refused: ApiError = match state.dispatcher.dispatch(ctx, OnBusy::Reject) {
        Ok(_) => {
            // Taken before the answer: once the run has ended there is no entry to take.
            let done = state
                .dispatcher
                .active()
                .get(session_id)
                .filter(|a| a.run_id == run.id)
                .map(|a| a.done);
            let answer = answer.await;
            // The answer waits for the run's end (`complete`, the session freed), so that a
            // client's next request after it never finds the session still busy with it.
            if let Some(done) = done {
                done.cancelled().await;
            }
            return match answer {
                Ok(a) => Ok((run.id, a)),
                // The run ended without an answer: it could not start or store its result. Its
                // error is on the run and in the event stream.
                Err(_) => {
                    let why = state
                        .store
                        .get_run(session_id, run.id)
                        .await?
                        .and_then(|r| r.error.map(|e| e.to_string()))
                        .unwrap_or_else(|| "the run ended without a result".into());
                    Err(ApiError::Unprocessable(format!(
                        "tool run {}: {why}",
                        run.id
                    )))
                }
            };
        }
        Err(e) => e.into(),
    };
    // Not admitted: the run never started.
    state.tinyelf.forget_tool_run(run.id);
    state.store.delete_run(run.id).await?;
    Err(refused)
}

/// Delivers a client's answer to a permission request a run of `session_id` is waiting on.
pub async fn answer_permission(
    state: &AppState,
    session_id: SessionId,
    request_id: String,
    body: PermissionBody,
) -> Result<PermissionAnswered, ApiError> {
    use elfgate_tools::{PermissionAnswer, ResolveError};
    if state.store.get_session(session_id).await?.is_none() {
        return Err(ApiError::NotFound(format!(
            "unknown session '{session_id}'"
        )));
    }
    // The run waiting here takes an answer only while this node holds the session's lease: a node
    // paused or cut off past it waits for its heartbeat's word, and a lost lease means another
    // node ended the run (this node's run stops, and the answer is not taken).
    if state.dispatcher.active().contains(session_id)
        && let Some(bus) = state.dispatcher.hub().get(session_id)
        && !bus.lease().settled().await
    {
        return Err(ApiError::Storage(elfgate_store::StoreError::Fenced(
            session_id.to_string(),
        )));
    }
    let PermissionBody {
        decision,
        scope,
        message,
    } = body;
    state
        .permissions
        .resolve(
            session_id,
            &request_id,
            PermissionAnswer {
                decision,
                scope,
                message,
            },
        )
        .map_err(|e| match e {
            ResolveError::NotFound(_) => ApiError::NotFound(e.to_string()),
            ResolveError::AlreadyDecided(_) => ApiError::Conflict(e.to_string()),
        })?;
    Ok(PermissionAnswered {
        request_id,
        decision,
        scope,
    })
}
