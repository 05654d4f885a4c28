#!/usr/bin/env bash
# Installs the schema fuzzer (schemathesis, pinned in tests/fuzz/requirements.txt) into
# tools/fuzz-venv, for the schema fuzz test (crates/elfgate-server/tests/suite/schema_fuzz.rs). Does
# nothing when the venv already holds exactly these requirements.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/install.sh

pinned_venv install-fuzz tools/fuzz-venv tests/fuzz/requirements.txt bin/schemathesis
