#!/usr/bin/env bash
# Runs the whole test suite: unit tests and the end-to-end tests that start the daemon on a
# loopback port against the mock provider, and the browser tests in headless Chromium (installed
# by scripts/install-test-deps.sh). No service, no key.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-test-deps.sh
# The browser tests fail instead of skipping when Chromium is missing. (Not an ELFGATE_ name:
# the daemon reads every ELFGATE_* variable as configuration.)
export REQUIRE_BROWSER_TESTS=require
# Likewise the gateway's SDK tests when the venv of the official SDKs is missing.
export REQUIRE_SDK_TESTS=require
cargo test --workspace --locked "$@"
