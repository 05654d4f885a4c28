#!/usr/bin/env bash
# Installs the schema fuzzer (schemathesis, pinned in tests/fuzz/requirements.txt) into
# tools/fuzz-venv, for the schema fuzz test (crates/elfgate-server/tests/schema_fuzz.rs). Does
# nothing when the venv already holds exactly these requirements.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=tools/fuzz-venv
req=tests/fuzz/requirements.txt
stamp="$venv/.requirements"
if [[ -x "$venv/bin/schemathesis" && -f "$stamp" ]] && cmp -s "$req" "$stamp"; then
  exit 0
fi
if ! command -v python3 >/dev/null 2>&1; then
  echo "install-fuzz: python3 is missing (scripts/install-test-deps.sh installs it)" >&2
  exit 1
fi
echo "install-fuzz: installing $req into $venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req"
cp "$req" "$stamp"
