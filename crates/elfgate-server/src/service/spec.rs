//! The typed contents of the commands that start runs: a new session ([`SessionSpec`]) and a
//! later prompt ([`PromptSpec`]), with the settings every prompt may carry ([`RunSpec`]). An API
//! body becomes one by `TryFrom`, which makes every check the body alone allows, in one order,
//! each error naming its field; the daemon's own callers (gateway doors, workflows) build them
//! as typed values. The checks that need the daemon's state come after, in checks.rs.

use crate::error::ApiError;
use elfgate_api::{CreateSessionRequest, RunOverrides, SendMessageRequest};
use elfgate_core::{
    Attachment, ChannelOrigin, CliBackend, EngineConfig, EngineType, MessageId, OnBusy, Ownership,
    PermissionAnswers, PermissionMode, Session, ThinkingLevel, UnknownName, Visibility,
};
use std::str::FromStr;

/// The settings a prompt carries, on a new session or a later prompt.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunSpec {
    /// The provider (a configured name); None: the session's, else the default.
    pub provider_id: Option<String>,
    /// The model; None: the session's, else the provider's.
    pub model: Option<String>,
    /// The system prompt; None: the session's.
    pub system_prompt: Option<String>,
    /// The top-level thinkingLevel (engineConfig's applies when None).
    pub thinking_level: Option<ThinkingLevel>,
    /// The permission mode; None: the session's.
    pub permission_mode: Option<PermissionMode>,
    /// engineConfig, with the body's top-level settings that are stored in it (cliArgs,
    /// channelPermissions; on a new session mcpConfig, acpAgent and useExtendedContext).
    pub engine_config: EngineConfig,
    /// Files and images sent with the prompt.
    pub attachments: Vec<Attachment>,
    /// The client's idempotency key.
    pub client_msg_id: Option<String>,
    /// The chat channel the prompt came from.
    pub channel: ChannelOrigin,
    /// Who answers the run's permission requests.
    pub answers: PermissionAnswers,
}

/// A new session and its first prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSpec {
    /// The engine.
    pub engine: EngineType,
    /// The first prompt (not empty).
    pub prompt: String,
    /// A title for lists.
    pub title: Option<String>,
    /// The project directory the tools act in.
    pub project_path: Option<String>,
    /// The CLI to run (cli engine).
    pub cli_backend: Option<CliBackend>,
    /// The agent profile (`[agents.NAME]`) applied wherever the spec is silent.
    pub agent_id: Option<String>,
    /// The first run's settings.
    pub run: RunSpec,
    /// Who besides its owner sees it (None: `[auth] default_visibility`).
    pub visibility: Option<Visibility>,
    /// Whom it belongs to when the daemon's caller decides (a workflow's run: the workflow's
    /// team); None: the actor.
    pub owner: Option<Ownership>,
}

/// A later prompt of a session.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptSpec {
    /// The prompt (not empty).
    pub prompt: String,
    /// What to do when a run is going on.
    pub on_busy: OnBusy,
    /// The message this prompt follows (branching); None follows the latest.
    pub parent_id: Option<MessageId>,
    /// The run's settings, over the session's.
    pub run: RunSpec,
}

/// An optional wire name parsed into its enum.
fn parse_name<T: FromStr<Err = UnknownName>>(name: Option<&str>) -> Result<Option<T>, UnknownName> {
    name.map(str::parse).transpose()
}

/// 400 for an empty prompt.
pub(crate) fn check_prompt(prompt: &str) -> Result<(), ApiError> {
    if prompt.trim().is_empty() {
        return Err(ApiError::BadRequest("prompt must not be empty".into()));
    }
    Ok(())
}

/// A value given twice, at the top level and in engineConfig: the same value, or a 422 naming
/// both.
fn one_of<T: PartialEq + std::fmt::Display>(
    top: Option<T>,
    in_config: &mut Option<T>,
    differs: impl FnOnce(&T, &T) -> String,
) -> Result<(), ApiError> {
    let Some(top) = top else {
        return Ok(());
    };
    match in_config {
        Some(other) if *other != top => Err(ApiError::Unprocessable(differs(&top, other))),
        _ => {
            *in_config = Some(top);
            Ok(())
        }
    }
}

impl TryFrom<RunOverrides> for RunSpec {
    type Error = ApiError;

    /// The checks, in order: the channel fields (422), permissionMode and thinkingLevel (400
    /// naming the accepted ones), engineConfig (400 when not an object, 422 naming a wrong key
    /// or value, 422 for the daemon's own workflow key), then channelPermissions given twice
    /// with different values (422).
    fn try_from(o: RunOverrides) -> Result<RunSpec, ApiError> {
        let channel = o.channel();
        if let Some(why) = channel.problem() {
            return Err(ApiError::Unprocessable(why));
        }
        let bad = |e: UnknownName| ApiError::BadRequest(e.to_string());
        let permission_mode = parse_name(o.permission_mode.as_deref()).map_err(bad)?;
        let thinking_level = parse_name(o.thinking_level.as_deref()).map_err(bad)?;
        let mut engine_config = match &o.engine_config {
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
        if engine_config.workflow.is_some() {
            return Err(ApiError::Unprocessable(
                "engineConfig.workflow: set by the daemon; a workflow's run is started with POST \
                 /v1/workflows/{name}/runs"
                    .into(),
            ));
        }
        if let Some(args) = o.cli_args {
            engine_config.cli_args = Some(args);
        }
        if let Some(p) = o.channel_permissions {
            if engine_config.channel_permissions.is_some_and(|c| c != p) {
                return Err(ApiError::Unprocessable(
                    "channelPermissions and engineConfig.channelPermissions differ: send one"
                        .into(),
                ));
            }
            engine_config.channel_permissions = Some(p);
        }
        Ok(RunSpec {
            provider_id: o.provider_id,
            model: o.model,
            system_prompt: o.system_prompt,
            thinking_level,
            permission_mode,
            engine_config,
            attachments: o.attachments.unwrap_or_default(),
            client_msg_id: o.client_msg_id,
            channel,
            answers: PermissionAnswers::Client,
        })
    }
}

impl TryFrom<CreateSessionRequest> for SessionSpec {
    type Error = ApiError;

    /// The checks, in order: the engine's name (422), the prompt (400), the run's settings (see
    /// [`RunSpec`]'s), then the session's own fields: mcpConfig (422), acpAgent and
    /// useExtendedContext each against engineConfig's (422 when they differ), cliBackend (422),
    /// visibility (422).
    fn try_from(req: CreateSessionRequest) -> Result<SessionSpec, ApiError> {
        let engine: EngineType =
            req.engine
                .parse()
                .map_err(|e: elfgate_core::engine_type::UnknownEngine| {
                    ApiError::Unprocessable(e.to_string())
                })?;
        check_prompt(&req.prompt)?;
        let mut run = RunSpec::try_from(req.overrides)?;
        let cfg = &mut run.engine_config;
        if let Some(mcp) = &req.mcp_config {
            cfg.mcp_config = Some(
                elfgate_core::McpSessionConfig::from_json(mcp)
                    .map_err(|e| ApiError::Unprocessable(e.to_string()))?,
            );
        }
        one_of(req.acp_agent, &mut cfg.acp_agent, |agent, other| {
            format!("acpAgent: '{agent}' differs from engineConfig.acpAgent '{other}'; give one")
        })?;
        one_of(
            req.use_extended_context,
            &mut cfg.use_extended_context,
            |extended, other| {
                format!(
                    "useExtendedContext: {extended} differs from engineConfig.useExtendedContext \
                     {other}; give one"
                )
            },
        )?;
        let cli_backend = parse_name(req.cli_backend.as_deref())
            .map_err(|e| ApiError::Unprocessable(e.to_string()))?;
        let visibility = parse_name(req.visibility.as_deref())
            .map_err(|e| ApiError::Unprocessable(e.to_string()))?;
        Ok(SessionSpec {
            engine,
            prompt: req.prompt,
            title: req.title,
            project_path: req.project_path,
            cli_backend,
            agent_id: req.agent_id,
            run,
            visibility,
            owner: None,
        })
    }
}

impl TryFrom<SendMessageRequest> for PromptSpec {
    type Error = ApiError;

    /// The checks, in order: the prompt (400), then the run's settings (see [`RunSpec`]'s).
    fn try_from(req: SendMessageRequest) -> Result<PromptSpec, ApiError> {
        check_prompt(&req.prompt)?;
        Ok(PromptSpec {
            prompt: req.prompt,
            on_busy: req.on_busy,
            parent_id: req.parent_id,
            run: RunSpec::try_from(req.overrides)?,
        })
    }
}

/// The engineConfig stored with `session`. Checked when the session was created; only a row
/// written by an older daemon, which took any keys, can fail here.
pub(crate) fn stored_engine_config(session: &Session) -> Result<EngineConfig, ApiError> {
    EngineConfig::from_json(&session.engine_config)
        .map_err(|e| ApiError::Unprocessable(format!("the session's stored {e}")))
}

impl RunSpec {
    /// These settings over those stored with `session`, for a later prompt of it.
    pub(crate) fn over_session(self, session: &Session) -> Result<RunSpec, ApiError> {
        let base = stored_engine_config(session)?;
        Ok(RunSpec {
            permission_mode: self.permission_mode.or(session.permission_mode),
            engine_config: self.engine_config.over(&base),
            ..self
        })
    }
}

#[cfg(test)]
#[path = "spec_tests.rs"]
mod tests;
