//! Elfgate's HTTP/SSE API: routes, the SSE stream, auth, configuration, and the daemon's assembly.

pub mod access_audit;
pub mod app;
pub mod auth;
pub mod config;
pub mod console;
pub mod error;
pub(crate) mod event_frame;
pub mod event_schema;
pub mod extract;
pub mod fdlimit;
pub mod fleet;
pub(crate) mod follower;
pub mod gateway;
pub mod idempotency;
pub mod keyed_lock;
pub mod keys;
pub mod listener;
pub mod log_node;
pub mod openapi;
pub mod origin;
pub mod panic_guard;
pub mod request_guard;
pub mod request_id;
pub mod route_rules;
pub mod routes;
pub mod run_end_triggers;
pub mod service;
pub mod session_gate;
pub mod sse;
pub mod state;
pub mod token_file;
pub mod webhooks;
pub mod workflow_runs;
pub mod workflow_schedule;

pub use app::{Daemon, StartError};
pub use config::Config;
