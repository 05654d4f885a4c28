//! Elfgate's MCP client side (see docs/mcp.md): the [`McpManager`] keeps one connection per
//! server configuration, shared by the sessions that use it, and gives each session the servers'
//! tools as `mcp__<server>__<tool>`.

#![warn(missing_docs)]

mod connection;
mod manager;
mod notify;
pub mod result;
mod stdio;
pub mod tool;
mod unavailable;

pub use connection::ServerState;
pub use manager::{McpManager, ReloadReport, ServerStatus, SessionTools};
pub use tool::{McpTool, tool_name};
pub use unavailable::{Down, Unavailable};
