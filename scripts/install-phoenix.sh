#!/usr/bin/env bash
# Installs the trace store of the telemetry tests (Arize Phoenix, pinned in
# tests/phoenix/requirements.txt) into tools/phoenix-venv: it receives OTLP over HTTP at
# /v1/traces and answers queries for the spans it stored (its own SQLite, no network needed), for
# crates/elfgate-server/tests/suite/traces.rs. Does nothing when the venv already holds exactly
# these requirements.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/install.sh

pinned_venv install-phoenix tools/phoenix-venv tests/phoenix/requirements.txt bin/phoenix
