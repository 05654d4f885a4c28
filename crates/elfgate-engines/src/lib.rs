//! Elfgate's engines. Each module is one engine; they share the provider registry and the
//! streaming helpers.

#![warn(missing_docs)]

pub mod chat;
pub mod cli;
mod metering;
pub mod prompt;
pub mod providers;
mod streaming;
mod think;
pub mod tinyelf;
pub mod workflow;
pub mod workflow_templates;

pub use chat::{ChatEngine, ChatMode, ChatSettings, GatewayTurn};
pub use cli::{CliConfig, CliEngine};
pub use providers::{ContextLimits, ModelLimits, ProviderRegistry, ResolveError};
pub use tinyelf::{TinyElfConfig, TinyElfEngine, TinyElfError};
