//! What Elfgate's end-to-end tests share: [`common`] starts the real daemon (`elfgate serve` on
//! a loopback port, against the mock provider) and reads its event stream as a client would;
//! [`scripted`] drives the tinyelf engine with scripted model turns; [`router`] serves requests
//! in-process through the daemon's router, for the tests that need no process; [`services`] gives
//! each test that needs PostgreSQL a database of its own; [`phoenix`] starts a real trace store.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    dead_code,
    clippy::panic,
    clippy::print_stderr,
    reason = "test helpers fail loudly; each suite uses its own part of them"
)]

pub mod common;
pub mod keys;
pub mod phoenix;
pub mod router;
pub mod scripted;
pub mod services;
