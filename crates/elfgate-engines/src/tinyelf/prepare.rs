//! What a tinyelf run resolves before its loop: the provider, the model, the project directory
//! and the run's settings, its system prompt, and the guardian that reviews its tool calls.

use super::settings::RunSettings;
use super::{Flavor, Prepared, TinyElfEngine, context};
use crate::streaming::fail;
use elfgate_core::{EngineSessionContext, ErrorCode, EventPayload, RunOutcome};
use elfgate_tools::Guardian;
use std::sync::Arc;

impl TinyElfEngine {
    /// What every run resolves first: the provider, the model, the project directory and the
    /// run's settings; a run that cannot have them ends with the error (already reported).
    pub(super) async fn prepare(
        &self,
        ctx: &EngineSessionContext,
        flavor: Flavor,
    ) -> Result<Prepared, RunOutcome> {
        let inner = &self.inner;
        let (provider_name, provider) = match inner.providers.resolve(ctx.provider_id.as_deref()) {
            Ok(p) => p,
            Err(e) => return Err(fail(ctx, ErrorCode::UnknownProvider, e.to_string()).await),
        };
        let Some(model) = ctx
            .model
            .clone()
            .or_else(|| provider.default_model().map(str::to_string))
        else {
            return Err(fail(
                ctx,
                ErrorCode::NoModel,
                format!("no model given and provider '{provider_name}' has no default model"),
            )
            .await);
        };
        let project = match (flavor, ctx.project_path.clone().filter(|p| !p.is_empty())) {
            (_, Some(p)) => Some(p),
            // A chat session needs no project: path arguments are confined to the daemon's
            // working directory, where hooks run too.
            (Flavor::Chat, None) => match std::env::current_dir() {
                Ok(d) => Some(d.display().to_string()),
                Err(e) => {
                    return Err(fail(
                        ctx,
                        ErrorCode::BadProjectPath,
                        format!("no working directory: {e}"),
                    )
                    .await);
                }
            },
            // An agent without a project runs, but its file and shell tools refuse (the
            // pipeline says why): a gateway caller may want only the web and MCP tools.
            (Flavor::Agent, None) => None,
        };
        let project = match project {
            None => None,
            Some(project) => match std::fs::canonicalize(&project) {
                Ok(p) if p.is_dir() => Some(p),
                Ok(p) => {
                    return Err(fail(
                        ctx,
                        ErrorCode::BadProjectPath,
                        format!("projectPath {} is not a directory", p.display()),
                    )
                    .await);
                }
                Err(e) => {
                    return Err(fail(
                        ctx,
                        ErrorCode::BadProjectPath,
                        format!("projectPath {project}: {e}"),
                    )
                    .await);
                }
            },
        };
        let rs = RunSettings::resolve(
            &inner.config,
            &inner.child_env,
            &ctx.engine_config,
            ctx.thinking_level,
        )
        .with_limits(&inner.providers.limits(&provider_name, &model));
        let mut rs = rs;
        rs.provider_name = provider_name.clone();
        if rs.max_session_tokens.is_some() {
            match inner.store.session_usage(ctx.session_id()).await {
                Ok(u) => rs.session_tokens_before = u.input_tokens + u.output_tokens,
                Err(e) => return Err(fail(ctx, ErrorCode::Storage, e.report()).await),
            }
        }
        Ok(Prepared {
            provider_name,
            provider,
            model,
            project,
            rs,
        })
    }

    /// The run's system prompt (docs/context.md); skill folders left out and project files that
    /// were cut or refused become `processing` events.
    pub(super) async fn system_prompt(
        &self,
        ctx: &EngineSessionContext,
        project: Option<&std::path::Path>,
        skills: &context::skills::SkillSet,
        routing: &context::router::Routing,
    ) -> context::blocks::SystemPrompt {
        for p in &skills.problems {
            ctx.events
                .emit(EventPayload::Processing {
                    message: format!("skill folder {} left out: {}", p.path.display(), p.reason),
                })
                .await;
        }
        if let Some(message) = routing.note() {
            ctx.events.emit(EventPayload::Processing { message }).await;
        }
        let active_skills = routing
            .active
            .iter()
            .filter_map(|a| skills.get(&a.name))
            .map(context::skill_tools::skill_note)
            .collect();
        let build = context::system_prompt(
            &self.inner.firewall,
            context::PromptParts {
                identity: ctx.system_prompt.as_deref(),
                skills: skills.catalogue(),
                project,
                project_context_max_bytes: self.inner.config.project_context_max_bytes,
                date: chrono::Utc::now().format("%Y-%m-%d").to_string(),
                active_skills,
            },
        );
        // The project's files are opened non-blocking and only when regular, but a file system
        // can still stall (a hung network mount): an interrupt does not wait for it. The loop
        // then ends the run before its first call, so the prompt's text no longer matters.
        let (system, notes) = tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => (context::blocks::SystemPrompt::whole(String::new()), Vec::new()),
            built = build => built,
        };
        for message in notes {
            ctx.events.emit(EventPayload::Processing { message }).await;
        }
        system
    }

    pub(super) async fn guardian(
        &self,
        ctx: &EngineSessionContext,
        provider: &Arc<dyn elfgate_llm::LlmProvider>,
        model: &str,
    ) -> Option<Guardian> {
        let g = &self.inner.config.guardian;
        if !g.enabled {
            return None;
        }
        let provider = match &g.provider {
            Some(name) => match self.inner.providers.resolve(Some(name)) {
                Ok((_, p)) => p,
                Err(e) => {
                    // A guardian provider missing from the configuration does not turn the review
                    // off: the session's provider reviews instead, and the client is told.
                    tracing::warn!(error = %e, "guardian provider unavailable");
                    ctx.events
                        .emit(EventPayload::Processing {
                            message: format!("guardian provider unavailable: {e}"),
                        })
                        .await;
                    provider.clone()
                }
            },
            None => provider.clone(),
        };
        let model = g
            .model
            .clone()
            .or_else(|| provider.default_model().map(str::to_string))
            .unwrap_or_else(|| model.to_string());
        Some(Guardian::new(
            provider,
            model,
            elfgate_tools::clamped_secs(g.timeout_secs, 0.001, 3600.0),
        ))
    }
}
