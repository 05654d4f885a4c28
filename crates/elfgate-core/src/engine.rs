//! The Engine trait and the context a run gets.

use crate::bus::EventEmitter;
use crate::engine_config::{ChannelPermissions, EngineConfig};
use crate::engine_type::EngineType;
use crate::ids::{MessageId, RunId, SessionId};
use crate::metrics::Metrics;
use crate::model::Session;
use crate::modes::{CliBackend, PermissionMode, ThinkingLevel};
use crate::outcome::RunOutcome;
use crate::recorder::RunRecorder;
use crate::sync::lock;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::any::Any;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// Work an engine began on a run before the run was admitted, while the request that creates the
/// run was still being committed — for the chat engines, the upstream call of a session's first
/// prompt. Only the engine that made it knows what it holds; it takes it once when the run starts.
/// Dropping the last handle drops the work (an upstream call is then closed).
#[derive(Clone, Default)]
pub struct HeadStart(Arc<Mutex<Option<Box<dyn Any + Send>>>>);

impl HeadStart {
    /// A head start holding `work`.
    pub fn new<T: Any + Send>(work: T) -> Self {
        HeadStart(Arc::new(Mutex::new(Some(Box::new(work)))))
    }

    /// Takes the work out if it is there and of type `T`.
    pub fn take<T: Any>(&self) -> Option<T> {
        let mut slot = lock(&self.0);
        match slot.take()?.downcast::<T>() {
            Ok(work) => Some(*work),
            Err(other) => {
                *slot = Some(other);
                None
            }
        }
    }

    /// Whether work is waiting to be taken.
    pub fn is_set(&self) -> bool {
        lock(&self.0).is_some()
    }
}

impl std::fmt::Debug for HeadStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("HeadStart").field(&self.is_set()).finish()
    }
}

/// A file or image sent with a prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Attachment {
    /// A display name.
    #[serde(default)]
    pub name: Option<String>,
    /// MIME type, e.g. image/png or text/plain.
    pub media_type: String,
    /// Base64 content (images).
    #[serde(default)]
    pub data: Option<String>,
    /// A URL to the content.
    #[serde(default)]
    pub url: Option<String>,
    /// Inline text content (text files).
    #[serde(default)]
    pub text: Option<String>,
}

/// Who can answer a run's permission requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PermissionAnswers {
    /// A client of the API: a request waits for its answer up to the permission timeout (the
    /// client may connect later and find it on the stream).
    #[default]
    Client,
    /// A caller that cannot answer (a gateway door): a request is asked only while some client
    /// follows the session's events, and denied at once, saying why, while none does.
    WatchersOnly,
    /// Nobody will answer (a workflow whose definition says `unattended: deny`): a request is
    /// announced and resolved as denied at once, without waiting.
    Nobody,
}

impl PermissionAnswers {
    /// How long a request waits for its answer, `configured` being the engine's permission
    /// timeout: none at all when nobody will answer.
    pub fn wait(self, configured: std::time::Duration) -> std::time::Duration {
        match self {
            PermissionAnswers::Client | PermissionAnswers::WatchersOnly => configured,
            PermissionAnswers::Nobody => std::time::Duration::ZERO,
        }
    }
}

/// Everything a run needs: the session, the prompt and overrides, the event emitter and the
/// cancellation token that an interrupt fires.
#[derive(Debug, Clone)]
pub struct EngineSessionContext {
    /// The stored session.
    pub session: Session,
    /// This run.
    pub run_id: RunId,
    /// The user's prompt.
    pub prompt: String,
    /// false for the first run of a session, true for a resume.
    pub is_resume: bool,
    /// The id the user message will be stored under.
    pub user_message_id: MessageId,
    /// The run's writer: engines report the messages they store to it, and the dispatcher the
    /// run's start and end. It knows what is already stored (a session's first prompt, stored and
    /// announced with the session: the engine then neither stores nor announces it again).
    pub recorder: Arc<RunRecorder>,
    /// Work the engine began before the run was admitted (see [`Engine::head_start`]).
    pub head_start: HeadStart,
    /// A client's idempotency key for the prompt.
    pub client_msg_id: Option<String>,
    /// The message this prompt follows (branching); None follows the latest.
    pub parent_id: Option<MessageId>,
    /// Provider name from the config.
    pub provider_id: Option<String>,
    /// Model name.
    pub model: Option<String>,
    /// System prompt.
    pub system_prompt: Option<String>,
    /// The prompt's top-level thinkingLevel (engineConfig's applies when None).
    pub thinking_level: Option<ThinkingLevel>,
    /// Directory the tools act in.
    pub project_path: Option<String>,
    /// Agent profile.
    pub agent_id: Option<String>,
    /// Engine settings (session's, with this run's overrides merged in).
    pub engine_config: EngineConfig,
    /// The prompt's permission mode, else the session's (None: default).
    pub permission_mode: Option<PermissionMode>,
    /// The CLI to run (cli engine).
    pub cli_backend: Option<crate::CliBackend>,
    /// Files and images sent with the prompt.
    pub attachments: Vec<Attachment>,
    /// The blocks stored as the run's user message instead of the prompt's text and attachments
    /// (a gateway door whose call's new input is more than text: the Responses API's
    /// function_call_output items continuing a stored response).
    pub stored_input: Option<Vec<crate::ContentBlock>>,
    /// Who can answer the run's permission requests.
    pub permission_answers: PermissionAnswers,
    /// Where the run reports.
    pub events: EventEmitter,
    /// Fired by an interrupt.
    pub cancel: CancellationToken,
    /// Daemon metrics.
    pub metrics: Arc<Metrics>,
    /// Set when the run is one tool call without a model call (`POST
    /// /v1/sessions/{id}/tools/{name}`); the prompt is empty then.
    pub tool_run: Option<ToolRun>,
    /// The fleet node that runs it (None on a single node).
    pub node: Option<Arc<str>>,
    /// The sandbox the daemon confines agents' processes with (`mode`, `mechanism`, `reason`),
    /// said in every run's `init`; None: not known (tests).
    pub sandbox: Option<serde_json::Value>,
    /// The chat channel the prompt came from.
    pub channel: crate::ChannelOrigin,
    /// What the run's trace takes from its request (None: runs are not traced).
    pub trace: Option<crate::telemetry::RunTrace>,
    /// Who pays for the run's model calls: the principal that sent the prompt.
    pub payer: Arc<crate::meter::Payer>,
    /// The meters every model call of the run goes through (see [`crate::meter`]).
    pub meters: crate::meter::Meters,
}

/// One tool to run in a session outside a turn.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolRun {
    /// The tool's name.
    pub name: String,
    /// Its arguments (a JSON object).
    pub arguments: serde_json::Value,
}

impl EngineSessionContext {
    /// The session id.
    pub fn session_id(&self) -> SessionId {
        self.session.id
    }

    /// An `init` event's facts: the engine's `facts` (a JSON object) and the daemon's own, its
    /// version, its sandbox (unless the engine says its own), in a fleet the node that runs the
    /// run and, when runs are traced, the run's trace id.
    pub fn system_info(&self, mut facts: serde_json::Value) -> serde_json::Value {
        if let Some(map) = facts.as_object_mut() {
            map.insert(
                "daemonVersion".into(),
                serde_json::Value::from(env!("CARGO_PKG_VERSION")),
            );
            if let Some(sandbox) = &self.sandbox {
                map.entry("sandbox").or_insert_with(|| sandbox.clone());
            }
            if let Some(node) = &self.node {
                map.insert("node".into(), serde_json::Value::from(node.as_ref()));
            }
            // The run's trace, to join its events with its spans (runs are traced).
            if let Some(trace_id) = crate::telemetry::current_trace_id() {
                map.insert("traceId".into(), serde_json::Value::from(trace_id));
            }
        }
        facts
    }
}

/// What GET /v1/engines shows of an engine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EngineInfo {
    /// Wire name.
    #[serde(rename = "type")]
    pub engine_type: EngineType,
    /// What it is.
    pub description: String,
    /// What it can do (e.g. streaming, history, tools).
    pub capabilities: Vec<String>,
    /// Sessions running on it now.
    pub active_sessions: usize,
    /// The backends it can run and whether each is usable here (cli engine only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backends: Option<Vec<BackendInfo>>,
}

/// One backend of an engine that runs external programs (the cli engine's codex, claude-code,
/// gemini-cli), as GET /v1/engines shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackendInfo {
    /// Its name, as `cliBackend` takes it.
    pub name: CliBackend,
    /// Whether sessions can be started on it.
    pub available: bool,
    /// The program that runs, as found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary: Option<String>,
    /// What the program says its version is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Why it is not available, and what to install.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Runs it executes at once; more wait in line.
    pub max_concurrent: usize,
    /// The configured agents a session can name (the acp backend's `acpAgent`), each usable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<Vec<String>>,
}

/// What a request to start a session (or send a prompt) asks of an engine, checked before
/// anything is stored.
#[derive(Debug, Clone, Copy, Default)]
pub struct StartRequest<'a> {
    /// `cliBackend`.
    pub cli_backend: Option<crate::CliBackend>,
    /// Extra CLI arguments (`cliArgs`), with the session's when it is a later prompt.
    pub cli_args: Option<&'a [String]>,
    /// `providerId`, the prompt's or the session's.
    pub provider_id: Option<&'a str>,
    /// The channel permissions the run would have (the prompt's, else the session's).
    pub channel_permissions: Option<ChannelPermissions>,
    /// `engineConfig.providerEnv` the run would have.
    pub provider_env: Option<&'a std::collections::BTreeMap<String, String>>,
    /// The ACP agent the run would talk to (`acpAgent`).
    pub acp_agent: Option<&'a str>,
    /// Whether the run asks for the model's long context (`useExtendedContext`).
    pub use_extended_context: bool,
}

/// Why an engine refuses a request before anything is stored ([`Engine::check_start`]): the
/// engine's own error, whatever its type, told to the client as a 422.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct StartRefused(pub Box<dyn std::error::Error + Send + Sync>);

/// An engine: turns one prompt into events and stored messages.
///
/// Engines report only through `ctx.events`, store only through `ctx.recorder` (they may read the
/// store) and stop promptly when `ctx.cancel` fires. They do not emit
/// `result` or `complete`: the dispatcher does, exactly once per run, from the returned outcome.
#[async_trait]
pub trait Engine: Send + Sync {
    /// Its wire name.
    fn engine_type(&self) -> EngineType;

    /// A one-line description.
    fn description(&self) -> &'static str;

    /// What it can do.
    fn capabilities(&self) -> Vec<&'static str> {
        Vec::new()
    }

    /// Runs one prompt of a session, its first or a later one (`ctx.is_resume`): every run of
    /// every engine goes through here.
    async fn run_prompt(&self, ctx: EngineSessionContext) -> RunOutcome;

    /// Begins, before the run is admitted, the part of a session's first run that does not depend
    /// on the commit the run waits for — for the chat engines, the upstream call — so that the
    /// commit and the provider's time to first token overlap. Nothing is published or stored
    /// here; the run takes the work from `ctx.head_start` when it starts. Default: nothing.
    fn head_start(&self, _ctx: &EngineSessionContext) -> HeadStart {
        HeadStart::default()
    }

    /// Engine-specific interrupt work beyond firing the run's token (which the dispatcher does).
    /// Returns whether the engine had something of this session to stop.
    fn interrupt(&self, _session_id: SessionId) -> bool {
        false
    }

    /// Lets go of what the engine keeps for a session between its runs (an ACP agent's process)
    /// once the session is deleted. Default: nothing is kept.
    async fn forget_session(&self, _session_id: SessionId) {}

    /// The engine's backends and their availability, for GET /v1/engines (None: it has none).
    fn backends(&self) -> Option<Vec<BackendInfo>> {
        None
    }

    /// Refuses, with a message for the client, a request this engine cannot serve (an unknown
    /// or unavailable backend, an argument not allowed). Default: everything is accepted.
    fn check_start(&self, _req: &StartRequest<'_>) -> Result<(), StartRefused> {
        Ok(())
    }

    /// Reloads MCP tools of every active session; returns how many were reloaded.
    async fn reload_mcp_for_all_active(&self) -> usize {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::PermissionAnswers;
    use std::time::Duration;

    #[test]
    fn only_a_run_nobody_will_answer_skips_the_wait() {
        let configured = Duration::from_secs(300);
        assert_eq!(PermissionAnswers::Client.wait(configured), configured);
        assert_eq!(PermissionAnswers::WatchersOnly.wait(configured), configured);
        assert_eq!(PermissionAnswers::Nobody.wait(configured), Duration::ZERO);
    }
}
