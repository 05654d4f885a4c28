//! A key's scopes ([`Scopes`]) against what a command resolves to: the engine, provider, model,
//! project and permission mode a run will really use once the agent profile, the session's
//! settings and the daemon's defaults are applied, so that no agentId, alias or default slips a
//! request past a scope. A refusal is 403 naming the scope ([`ApiError::OutOfScope`]); a scope
//! that cannot be checked (a glob that does not compile, a path that cannot be resolved, a
//! provider the run does not name) refuses too.

use super::command::Actor;
use crate::error::ApiError;
use crate::state::AppState;
use elfgate_core::{EngineConfig, EngineType, PermissionMode, Scopes};
use std::path::{Path, PathBuf};

/// What a run resolves to, as far as the scopes look at it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RunTarget<'a> {
    /// The session's engine.
    pub engine: EngineType,
    /// The provider the run calls; None when the daemon cannot tell before the run (a CLI that
    /// picks its own, a workflow whose steps pick theirs).
    pub provider: Option<String>,
    /// The model the run asks for; None when the daemon cannot tell before the run.
    pub model: Option<String>,
    /// engineConfig's subAgentModel, the other model a run may call.
    pub sub_agent_model: Option<&'a str>,
    /// The session's project directory, as given.
    pub project_path: Option<&'a str>,
    /// How the caller named the project path (`projectPath`, a door's header).
    pub project_field: &'static str,
    /// The permission mode the run goes with.
    pub permission_mode: PermissionMode,
}

impl<'a> RunTarget<'a> {
    /// The target of a run of `engine` given these settings (each already laid over the
    /// session's and the agent profile's): the provider and model fall back to the daemon's
    /// defaults as the engines do, the permission mode to `default`.
    pub(crate) fn resolve(
        state: &AppState,
        engine: EngineType,
        settings: RunSettings<'a>,
        project_field: &'static str,
    ) -> RunTarget<'a> {
        let provider = match (engine, settings.provider_id) {
            // A workflow's steps choose their own providers and models.
            (EngineType::Workflow, _) => None,
            (_, Some(name)) => Some(name.to_string()),
            // A CLI's provider without a providerId is its own business (its login, the
            // backend's configured provider): not known here.
            (e, None) if e.runs_a_cli() => None,
            (_, None) => state.providers.resolve(None).ok().map(|(name, _)| name),
        };
        let model = match (engine, settings.model) {
            (EngineType::Workflow, _) => None,
            (_, Some(m)) => Some(m.to_string()),
            (_, None) => provider
                .as_deref()
                .and_then(|p| state.config.providers.get(p))
                .and_then(|p| p.default_model.clone()),
        };
        RunTarget {
            engine,
            provider,
            model,
            sub_agent_model: settings.engine_config.sub_agent_model.as_deref(),
            project_path: settings.project_path.filter(|p| !p.is_empty()),
            project_field,
            permission_mode: settings.permission_mode.unwrap_or_default(),
        }
    }
}

/// A run's own settings, before the daemon's defaults.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunSettings<'a> {
    /// The provider named (the prompt's, else the session's or the agent profile's).
    pub provider_id: Option<&'a str>,
    /// The model named (likewise).
    pub model: Option<&'a str>,
    /// The session's project directory.
    pub project_path: Option<&'a str>,
    /// The permission mode named (the prompt's, else the session's or the profile's).
    pub permission_mode: Option<PermissionMode>,
    /// The run's engineConfig over the session's.
    pub engine_config: &'a EngineConfig,
}

/// The scopes of the key an actor acts with; the daemon acting on its own has none.
fn scopes_of(actor: &Actor) -> Option<&Scopes> {
    match actor {
        Actor::Principal(p) => Some(&p.scopes),
        Actor::Daemon => None,
    }
}

fn refused(scope: &'static str, message: String) -> ApiError {
    ApiError::OutOfScope { scope, message }
}

/// A key's scopes as an admin gives them (`POST /v1/admin/keys`, `PATCH`): every engine known,
/// every glob compiling, every project root an absolute path; else 422 naming the entry (e.g.
/// `scopes.engines[1]`), so that a typo is told at once rather than refusing every request.
pub(crate) fn check_given(scopes: &Scopes) -> Result<(), ApiError> {
    let bad = |field: &str, i: usize, why: String| {
        ApiError::Unprocessable(format!("scopes.{field}[{i}]: {why}"))
    };
    for (i, e) in scopes.engines.iter().flatten().enumerate() {
        e.parse::<EngineType>()
            .map_err(|err: elfgate_core::engine_type::UnknownEngine| {
                bad("engines", i, err.to_string())
            })?;
    }
    for (field, globs) in [("providers", &scopes.providers), ("models", &scopes.models)] {
        for (i, g) in globs.iter().flatten().enumerate() {
            globset::Glob::new(g).map_err(|err| bad(field, i, format!("glob '{g}': {err}")))?;
        }
    }
    for (i, root) in scopes.project_roots.iter().flatten().enumerate() {
        if !Path::new(root).is_absolute() {
            return Err(bad(
                "projectRoots",
                i,
                format!("'{root}' is not an absolute path"),
            ));
        }
    }
    Ok(())
}

/// Every scope a run passes through: 403 naming the first it is past.
pub(crate) fn check_run(actor: &Actor, target: &RunTarget<'_>) -> Result<(), ApiError> {
    let Some(scopes) = scopes_of(actor) else {
        return Ok(());
    };
    check_engine(scopes, target.engine)?;
    check_provider(scopes, target.provider.as_deref(), target.engine)?;
    check_model(scopes, target.model.as_deref(), "model", target.engine)?;
    if let Some(sub) = target.sub_agent_model {
        check_model(
            scopes,
            Some(sub),
            "engineConfig.subAgentModel",
            target.engine,
        )?;
    }
    check_project(scopes, target)?;
    check_permission_mode(scopes, target.permission_mode)
}

/// A gateway route's provider and model (an alias's fallbacks among them): 403 naming the
/// scope when the key may not call it.
pub(crate) fn check_route(actor: &Actor, provider: &str, model: &str) -> Result<(), ApiError> {
    let Some(scopes) = scopes_of(actor) else {
        return Ok(());
    };
    check_provider(scopes, Some(provider), EngineType::Chat)?;
    check_model(scopes, Some(model), "model", EngineType::Chat)
}

/// Whether the key may use `engine`, as a gateway door's model list asks: no refusal, a yes/no.
pub(crate) fn allows_engine(actor: &Actor, engine: EngineType) -> bool {
    scopes_of(actor).is_none_or(|s| check_engine(s, engine).is_ok())
}

/// Whether the key may call `model` of `provider`, as a gateway door's model list asks.
pub(crate) fn allows_route(actor: &Actor, provider: &str, model: &str) -> bool {
    check_route(actor, provider, model).is_ok()
}

/// `answerPermissions: false`: the key may watch a permission request, not answer it.
pub(crate) fn check_answer(actor: &Actor) -> Result<(), ApiError> {
    match scopes_of(actor).and_then(|s| s.answer_permissions) {
        Some(false) => Err(refused(
            "answerPermissions",
            "key scope 'answerPermissions' does not allow answering permission requests (it \
             may watch them)"
                .into(),
        )),
        _ => Ok(()),
    }
}

fn check_engine(scopes: &Scopes, engine: EngineType) -> Result<(), ApiError> {
    match &scopes.engines {
        Some(allowed) if !allowed.iter().any(|e| e == engine.as_str()) => Err(refused(
            "engines",
            format!(
                "key scope 'engines' does not allow engine '{engine}' (it allows: {})",
                list(allowed)
            ),
        )),
        _ => Ok(()),
    }
}

fn check_provider(
    scopes: &Scopes,
    provider: Option<&str>,
    engine: EngineType,
) -> Result<(), ApiError> {
    let Some(globs) = &scopes.providers else {
        return Ok(());
    };
    let Some(provider) = provider else {
        return Err(refused(
            "providers",
            unknown_before_run("providers", engine),
        ));
    };
    if matches_any("providers", globs, provider)? {
        return Ok(());
    }
    Err(refused(
        "providers",
        format!("key scope 'providers' does not allow provider '{provider}'"),
    ))
}

fn check_model(
    scopes: &Scopes,
    model: Option<&str>,
    field: &str,
    engine: EngineType,
) -> Result<(), ApiError> {
    let Some(globs) = &scopes.models else {
        return Ok(());
    };
    let Some(model) = model else {
        return Err(refused("models", unknown_before_run("models", engine)));
    };
    if matches_any("models", globs, model)? {
        return Ok(());
    }
    Err(refused(
        "models",
        format!("key scope 'models' does not allow {field} '{model}'"),
    ))
}

/// Why a provider or model scope cannot be checked for a run of `engine`.
fn unknown_before_run(scope: &str, engine: EngineType) -> String {
    let why = match engine {
        EngineType::Workflow => "a workflow's steps choose their own providers and models",
        e if e.runs_a_cli() => {
            "the CLI would choose its own; name providerId (and model, or a provider with a \
             default_model)"
        }
        _ => "the request names none and the daemon has no default for it",
    };
    format!("key scope '{scope}' cannot be checked for this run of engine '{engine}': {why}")
}

/// Whether `name` matches one of `globs`; a glob that does not compile refuses the request.
fn matches_any(scope: &'static str, globs: &[String], name: &str) -> Result<bool, ApiError> {
    for glob in globs {
        let matcher = globset::Glob::new(glob)
            .map_err(|e| {
                refused(
                    scope,
                    format!("key scope '{scope}' cannot be checked: glob '{glob}': {e}"),
                )
            })?
            .compile_matcher();
        if matcher.is_match(name) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// `projectRoots`: the project, symlinks resolved, is under one of the roots, symlinks resolved.
/// A project that cannot be resolved is refused; a run without one is refused where the engine
/// would still work in a directory (a CLI runs in the daemon's own, a workflow's steps in
/// theirs), and let through where it touches no files (chat engines; tinyelf without a project
/// runs no file or shell tool).
fn check_project(scopes: &Scopes, target: &RunTarget<'_>) -> Result<(), ApiError> {
    let Some(roots) = &scopes.project_roots else {
        return Ok(());
    };
    let field = target.project_field;
    let Some(project) = target.project_path else {
        if target.engine.runs_a_cli() || target.engine == EngineType::Workflow {
            return Err(refused(
                "projectRoots",
                format!(
                    "key scope 'projectRoots' needs a {field} under one of its roots for engine \
                     '{}'",
                    target.engine
                ),
            ));
        }
        return Ok(());
    };
    let resolved = std::fs::canonicalize(project).map_err(|e| {
        refused(
            "projectRoots",
            format!("key scope 'projectRoots' cannot check {field} '{project}': {e}"),
        )
    })?;
    if under_a_root(&resolved, roots) {
        return Ok(());
    }
    Err(refused(
        "projectRoots",
        format!(
            "key scope 'projectRoots' does not allow {field} '{project}' (resolved: {}): it is \
             under none of the key's roots",
            resolved.display()
        ),
    ))
}

/// Whether `resolved` is a root or beneath one, each root with its symlinks resolved; a root
/// that cannot be resolved holds nothing.
fn under_a_root(resolved: &Path, roots: &[String]) -> bool {
    roots
        .iter()
        .filter_map(|r| std::fs::canonicalize(r).ok())
        .any(|root: PathBuf| resolved.starts_with(root))
}

fn check_permission_mode(scopes: &Scopes, mode: PermissionMode) -> Result<(), ApiError> {
    match &scopes.permission_modes {
        Some(allowed) if !allowed.contains(&mode) => Err(refused(
            "permissionModes",
            format!(
                "key scope 'permissionModes' does not allow permission mode '{mode}' (it \
                 allows: {})",
                list(allowed)
            ),
        )),
        _ => Ok(()),
    }
}

fn list<T: std::fmt::Display>(items: &[T]) -> String {
    if items.is_empty() {
        return "none".into();
    }
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
#[path = "scopes_tests.rs"]
mod tests;
