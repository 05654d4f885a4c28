//! The mock provider's tests, as one test binary: each module of `suite/` drives the mock over
//! HTTP in one wire format.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a test fails loudly; the helpers outside #[test] functions too"
)]

mod common;
mod suite;
