//! What every cli run sets up before its process (`begin`), and the daemon's door for a run that
//! goes through it (`proxy_for`).

// The run-setup part of the engine: it uses what the engine module imports.
use super::*;

impl CliEngine {
    /// Sets up a run through the daemon's door: its run token (scoped to this run, the door of
    /// the CLI's format and the route) and the door as the CLI's provider.
    /// What every run sets up before its process, in this order: its provider and model, the
    /// daemon's door when the run goes through it, the `init` event (`info` plus those), the
    /// user's message stored, a place among `limit`'s runs at once (queued runs told so), the
    /// backend's configuration files, and the CLI session to resume. A failure is the run's
    /// outcome, its error emitted.
    pub(super) async fn begin(
        &self,
        ctx: &EngineSessionContext,
        (b, limit): (CliBackend, CliBackend),
        route: Option<CliRoute>,
        info: Value,
    ) -> Result<Begun, Box<RunOutcome>> {
        let provider = route.as_ref().map(|r| (r.name.clone(), r.provider.clone()));
        let model = ctx
            .model
            .clone()
            .or_else(|| provider.as_ref().and_then(|(_, p)| p.default_model.clone()));
        // Through the daemon's own door: the CLI gets the door's address, a token for this run
        // only (revoked when `proxy` drops, at the end of the run) and the route as its model.
        let proxy = match route.as_ref().filter(|r| r.proxied) {
            Some(r) => match self.proxy_for(ctx, b, r, model.as_deref()) {
                Ok(p) => Some(p),
                Err(why) => return Err(Box::new(fail(ctx, ErrorCode::CliSetup, why).await)),
            },
            None => None,
        };
        let mut system_info = json!({
            "engine": "cli",
            "provider": provider.as_ref().map(|(n, _)| n),
            "model": model,
            "proxied": proxy.is_some(),
            "sandbox": elfgate_tools::sandbox::Sandbox::facts_of(self.shell.sandbox.as_ref()),
        });
        if let (Some(all), Value::Object(own)) = (system_info.as_object_mut(), info) {
            all.extend(own);
        }
        ctx.events
            .emit(EventPayload::Init {
                system_info: ctx.system_info(system_info),
            })
            .await;
        let (user, _) = match store_user_message(self.store.as_ref(), ctx).await {
            Ok(u) => u,
            Err(e) => return Err(Box::new(fail(ctx, ErrorCode::Storage, e).await)),
        };
        let slot = match self
            .limits
            .acquire(limit, &ctx.cancel, async |ahead| {
                let message = format!(
                    "queued behind {ahead} {} run{} (max_concurrent = {})",
                    limit.as_str(),
                    if ahead == 1 { "" } else { "s" },
                    self.limits.max(limit)
                );
                ctx.events.emit(EventPayload::Processing { message }).await;
            })
            .await
        {
            Slot::Granted(p) => p,
            Slot::Cancelled => return Err(Box::new(RunOutcome::new(FinishReason::Interrupted))),
        };
        if let Err(e) = self.write_files(b) {
            let why = format!("cannot write {}'s configuration: {e}", b.as_str());
            return Err(Box::new(fail(ctx, ErrorCode::CliSetup, why).await));
        }
        // A queued run's context was built before the run ahead of it stored its CLI session.
        let resume = match self.resume_id(ctx).await {
            Ok(r) => r,
            Err(e) => return Err(Box::new(fail(ctx, ErrorCode::Storage, e).await)),
        };
        Ok(Begun {
            provider,
            model,
            proxy,
            user,
            slot,
            resume,
        })
    }

    pub(super) fn proxy_for(
        &self,
        ctx: &EngineSessionContext,
        b: CliBackend,
        route: &CliRoute,
        model: Option<&str>,
    ) -> Result<Proxy, String> {
        let Some(url) = self.tokens.url() else {
            return Err("the daemon's own front door is not listening yet".to_string());
        };
        let Some(model) = model else {
            return Err(format!(
                "{} goes through the daemon's door to provider '{}' ({}), which needs a model: \
                 set the session's model or the provider's default_model",
                b.as_str(),
                route.name,
                route.provider.kind
            ));
        };
        let Some(door) = b.proxy_door() else {
            return Err(format!("{} has no door of its own", b.as_str()));
        };
        let route_name = format!("{}/{model}", route.name);
        let token = self.tokens.issue(RunGrant {
            session_id: ctx.session_id(),
            run_id: ctx.run_id,
            door,
            route: route_name.clone(),
        });
        Ok(Proxy {
            provider: b.proxy_provider(url),
            token,
            route: route_name,
            searches: route.provider.kind.searches_natively(),
        })
    }
}

/// A run that goes through the daemon's door.
/// What `begin` set up for a run.
pub(super) struct Begun {
    /// The provider's name and the provider, when the run has one.
    pub(super) provider: Option<(String, CliProvider)>,
    /// The session's model, else the provider's default.
    pub(super) model: Option<String>,
    /// The daemon's door, when the run goes through it.
    pub(super) proxy: Option<Proxy>,
    /// The user's message, stored.
    pub(super) user: Message,
    /// The run's place among the backend's runs at once, held until it ends.
    pub(super) slot: OwnedSemaphorePermit,
    /// The CLI session to resume.
    pub(super) resume: Option<String>,
}

pub(super) struct Proxy {
    /// The door as the CLI's provider.
    pub(super) provider: CliProvider,
    /// The run's token, revoked when this drops (the run's end).
    pub(super) token: RunToken,
    /// The route the CLI names as its model: `PROVIDER/MODEL`.
    pub(super) route: String,
    /// Whether the provider behind the door searches the web itself.
    pub(super) searches: bool,
}
