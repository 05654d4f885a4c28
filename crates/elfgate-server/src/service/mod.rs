//! The business layer under the handlers: commands (create a session, prompt it, interrupt it,
//! answer a permission request, run a tool, read or delete it, list sessions), each given by an
//! [`Actor`].
//! A command that starts a run takes a typed spec ([`SessionSpec`], [`PromptSpec`]), built once
//! from an API body by `TryFrom` (spec.rs: the body's checks) or directly by the daemon's own
//! callers, and the [`Origin`] it comes through; the checks that need the daemon's state follow
//! (checks.rs), then the run's context is built (run_context.rs) and dispatched to its engine.

mod access;
mod bus;
mod checks;
mod command;
mod control;
mod create;
mod prompt;
mod reads;
mod run_context;
pub(crate) mod scopes;
mod secrets;
mod spec;
mod tool_run;

pub use access::{WorkflowAct, authorize_session, authorize_workflow, check_workflow_act};
pub use bus::{open_bus, open_follow_bus};
pub use command::{Actor, GatewayCall, Origin};
pub use control::{answer_permission, delete_session, interrupt, session_view, view};
pub use create::create_session;
pub use prompt::send_message;
pub use reads::{get_run, list_audit, list_messages, list_sessions};
pub use secrets::SecretScan;
pub use spec::{PromptSpec, RunSpec, SessionSpec};
pub use tool_run::run_tool;

use crate::error::ApiError;
use elfgate_core::SessionId;

/// Parses a session id from a path; a malformed id is an unknown session.
pub fn parse_session_id(s: &str) -> Result<SessionId, ApiError> {
    s.parse()
        .map_err(|_| ApiError::NotFound(format!("unknown session '{s}'")))
}
