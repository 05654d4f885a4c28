//! The checks of a command that need the daemon's state (its configuration, providers, engines
//! and project firewall), made after the body's own (spec.rs) and before anything is stored.

use super::spec::{RunSpec, SessionSpec};
use crate::error::ApiError;
use crate::state::AppState;
use elfgate_core::{CliBackend, EngineConfig, EngineType, Session, StartRequest};

/// 503 while the daemon shuts down.
pub(crate) fn check_serving(state: &AppState) -> Result<(), ApiError> {
    if state.is_shutting_down() {
        return Err(ApiError::shutting_down());
    }
    Ok(())
}

/// 422 for an engine this build does not have.
pub(crate) fn check_engine_available(state: &AppState, engine: EngineType) -> Result<(), ApiError> {
    if !state.dispatcher.has_engine(engine) {
        return Err(ApiError::Unprocessable(format!(
            "engine '{engine}' is not available in this build"
        )));
    }
    Ok(())
}

/// The run's settings against the daemon's: a notifyUrl needs a secret to sign with and an
/// http(s) URL, searchOrchestration a search backend, and an engine that calls a provider
/// itself a provider it knows.
pub(crate) fn check_settings(
    state: &AppState,
    engine: EngineType,
    run: &RunSpec,
) -> Result<(), ApiError> {
    let cfg = &run.engine_config;
    if let Some(url) = &cfg.notify_url {
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
    if cfg.search_orchestration == Some(true) && state.config.tools.web_search.is_none() {
        return Err(ApiError::Unprocessable(
            "engineConfig.searchOrchestration: no search backend is configured (the daemon's \
             [tools.web_search])"
                .into(),
        ));
    }
    if !engine.runs_a_cli() {
        state
            .providers
            .resolve(run.provider_id.as_deref())
            .map_err(|e| ApiError::Unprocessable(e.to_string()))?;
    }
    Ok(())
}

/// The engine's own checks of a run (the cli engine's backend, arguments and provider).
pub(crate) fn check_engine(
    state: &AppState,
    engine: EngineType,
    cli_backend: Option<CliBackend>,
    cfg: &EngineConfig,
    provider_id: Option<&str>,
) -> Result<(), ApiError> {
    let Some(e) = state.dispatcher.get_engine(engine) else {
        return Ok(());
    };
    e.check_start(&StartRequest {
        cli_backend,
        cli_args: cfg.cli_args.as_deref(),
        provider_id,
        channel_permissions: cfg.channel_permissions,
        provider_env: cfg.provider_env.as_ref(),
        acp_agent: cfg.acp_agent.as_deref(),
        use_extended_context: cfg.use_extended_context == Some(true),
    })
    .map_err(|e| ApiError::Unprocessable(e.to_string()))
}

/// One projectPath check for every engine (see `ExecutionFirewall::check_project`): 422 naming
/// `field` (as the caller gave it), before anything is stored. An empty string is no project.
pub(crate) fn check_project_path(
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
pub(crate) fn check_project_here(state: &AppState, session: &Session) -> Result<(), ApiError> {
    if state.fleet.is_none() {
        return Ok(());
    }
    check_project_path(
        state,
        session.project_path.as_deref(),
        "the session's projectPath",
    )
}

/// The agent profile a new session names (`agentId`, `[agents.NAME]`), applied wherever the
/// spec is silent: its system prompt, provider, model and permission mode, and its engineConfig
/// keys (tools and skills among them) under the spec's own keys. An unknown id is 422 naming the
/// profiles there are.
pub(crate) fn apply_agent_profile(
    state: &AppState,
    spec: &mut SessionSpec,
) -> Result<(), ApiError> {
    let Some(id) = spec.agent_id.as_deref() else {
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
    let run = &mut spec.run;
    if run.system_prompt.is_none() {
        run.system_prompt.clone_from(&profile.system_prompt);
    }
    if run.provider_id.is_none() {
        run.provider_id.clone_from(&profile.provider);
    }
    if run.model.is_none() {
        run.model.clone_from(&profile.model);
    }
    if run.permission_mode.is_none() {
        run.permission_mode = profile.permission_mode;
    }
    // Parsed, so that older key names (maxTurns, tools...) meet their current ones, and the
    // spec's keys go over the profile's one by one (EngineConfig::over).
    let Ok(base) = EngineConfig::from_json(&serde_json::Value::Object(profile.engine_config()))
    else {
        // Checked at start; a profile that no longer parses adds nothing.
        return Ok(());
    };
    run.engine_config = std::mem::take(&mut run.engine_config).over(&base);
    Ok(())
}

/// A prompt's attachments, checked before anything is stored: each has content (base64 data, an
/// http(s) URL or text) within `server.attachment_max_bytes` (413 past it), and a file that is
/// neither an image nor text is a type the run's provider kind takes as a document (422 naming
/// the attachment and the provider). The cli engine passes none to its CLI: any is 422.
pub(crate) fn check_attachments(
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
pub(crate) fn check_native_search(
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
pub(crate) fn base64_len(text: &str) -> Option<usize> {
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
