//! Route modules; each exposes `fn routes() -> Router<AppState>`.

pub mod access_audit;
pub mod budgets;
pub mod cluster;
pub mod engines;
pub mod gateway;
pub mod health;
pub mod hooks;
pub mod keys;
pub mod mcp;
pub mod sessions;
pub mod skills;
pub mod spend;
pub mod tool_runs;
pub mod webhooks;
pub mod workflows;
