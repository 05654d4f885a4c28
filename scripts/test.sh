#!/usr/bin/env bash
# Runs the whole test suite: unit tests and the end-to-end tests that start the daemon on a
# loopback port against the mock provider. Needs only a Rust toolchain; no service, no key.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --locked "$@"
