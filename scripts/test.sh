#!/usr/bin/env bash
# Runs the whole test suite: unit tests and the end-to-end tests that start the daemon on a
# loopback port against the mock provider, the browser tests in headless Chromium, and the cli
# engine's tests with the real coding CLIs (both installed by scripts/install-test-deps.sh), and
# the tests that need PostgreSQL and NATS with JetStream: scripts/test-services.sh starts private
# instances of both (installing Debian's packages when missing) unless ELFGATE_TEST_POSTGRES_URL
# and ELFGATE_TEST_NATS_URL name running ones, and stops them when this script ends. No key.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-test-deps.sh
# The browser tests and the real-CLI tests fail instead of skipping when Chromium or the CLIs are
# missing. (Not ELFGATE_ names: the daemon reads ELFGATE_* variables as configuration, all but
# ELFGATE_TEST_*, the test services' URLs.)
export REQUIRE_BROWSER_TESTS=require
export REQUIRE_CLI_TESTS=require
# Likewise the gateway's SDK tests when the venv of the official SDKs is missing.
export REQUIRE_SDK_TESTS=require
# Likewise the schema fuzz test when the fuzzer's venv is missing.
export REQUIRE_FUZZ_TESTS=require
# Likewise the telemetry tests when the trace store's venv is missing.
export REQUIRE_TRACE_TESTS=require
# Sourced: its EXIT trap stops the services once cargo has exited, so cargo must not be exec'd.
# It also sets REQUIRE_CLUSTER_TESTS=require.
source scripts/test-services.sh
# No two files of a crate use each other (see the script).
scripts/module-cycles.py
cargo test --workspace --locked "$@"
