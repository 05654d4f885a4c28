//! Who gives a command ([`Actor`]) and through which door it comes ([`Origin`]): a parameter of
//! every command, so that a command can be scoped to its caller without changing its signature.

use crate::auth::Principal;
use crate::error::ApiError;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use elfgate_core::{EngineSessionContext, HeadStart};

/// Who a command acts for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actor {
    /// A request's principal, as auth found it (a client of the API or of a gateway door).
    Principal(std::sync::Arc<Principal>),
    /// The daemon acting on its own: a workflow's run started by its schedule, an inbound
    /// webhook or another run's end.
    Daemon,
}

impl std::fmt::Display for Actor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Actor::Principal(p) => write!(f, "{}", p.user),
            Actor::Daemon => f.write_str("the daemon"),
        }
    }
}

/// A handler's actor: the principal auth put on the request. A request without one (which auth
/// never lets through to these routes) is refused rather than acted on for nobody.
impl<S: Send + Sync> FromRequestParts<S> for Actor {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Actor, ApiError> {
        parts
            .extensions
            .get::<Principal>()
            .cloned()
            .map(|p| Actor::Principal(std::sync::Arc::new(p)))
            .ok_or(ApiError::Unauthorized)
    }
}

/// Through which door a command that starts a run comes.
#[derive(Debug, Default)]
pub enum Origin {
    /// The sessions API (`POST /v1/sessions`, `POST /v1/sessions/{id}/messages`).
    #[default]
    Api,
    /// A gateway door's call, with what it hands to the run.
    Gateway(GatewayCall),
    /// A workflow's run (its start, or the resume of one that failed): the only way a run of
    /// the `workflow` engine starts.
    Workflow(elfgate_core::WorkflowRef),
}

impl Origin {
    /// How the caller named the project path, for a refusal to name it the same way.
    pub(crate) fn project_field(&self) -> &'static str {
        match self {
            Origin::Gateway(call) => call.project_field,
            Origin::Api | Origin::Workflow(_) => "projectPath",
        }
    }
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
    /// Applies the call to the run's context: its head start and the input it stores.
    pub(crate) fn apply(self, ctx: &mut EngineSessionContext) {
        if let Some(work) = self.head_start {
            ctx.head_start = work;
        }
        if self.stored_input.is_some() {
            ctx.stored_input = self.stored_input;
        }
    }

    /// A prompt rewritten by a UserPromptSubmit hook, in the upstream request the door built
    /// before the hooks ran: the last user turn's text becomes the rewritten prompt (its images
    /// and files stay), and the caller's own wire-format copy of the messages is dropped so that
    /// the rewritten request is the one sent.
    pub(crate) fn rewrite_prompt(&mut self, prompt: &str) {
        let Some(work) = &self.head_start else {
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
        self.head_start = Some(HeadStart::new(turn));
    }
}
