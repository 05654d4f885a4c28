//! Route modules; each exposes `fn routes() -> Router<AppState>`.

pub mod engines;
pub mod health;
pub mod mcp;
pub mod sessions;
