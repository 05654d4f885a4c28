//! The daemon's end-to-end tests, as one test binary (one link, one binary in target/): each
//! module of `suite/` starts the real daemon on loopback ports and talks HTTP/SSE to it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr,
    clippy::large_futures,
    reason = "a test fails loudly; the helpers outside #[test] functions too"
)]

use elfgate_test_support::{common, scripted};
mod suite;
