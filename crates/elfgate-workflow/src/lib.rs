//! Workflows: named, versioned sequences of steps (a registry tool, one model call, an agent
//! run, a condition) whose arguments and prompts are templates over the workflow's inputs and
//! earlier steps' outputs. This crate holds the definition, as clients send it and the store
//! keeps it, and the checks a definition passes before it is stored; see docs/workflows.md.

pub mod definition;
pub mod template;
pub mod template_check;
pub mod validate;

/// A parsed cron expression, as [`validate::check_cron`] gives it.
pub use croner::Cron;
pub use definition::{
    AgentStep, InputSpec, InputType, Missed, ModelStep, Otherwise, Retries, RunEndTrigger,
    Schedule, Step, StepKind, Unattended, WorkflowDefinition,
};
pub use validate::{DefinitionError, validate};
