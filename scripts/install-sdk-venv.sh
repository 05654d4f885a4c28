#!/usr/bin/env bash
# Installs the official openai and anthropic Python SDKs (tests/sdk/requirements.txt) into
# tools/venv, for the gateway's SDK tests. Does nothing when the venv already holds exactly
# these requirements.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=tools/venv
req=tests/sdk/requirements.txt
stamp="$venv/.requirements"
if [[ -x "$venv/bin/python" && -f "$stamp" ]] && cmp -s "$req" "$stamp"; then
  exit 0
fi
if ! command -v python3 >/dev/null 2>&1; then
  echo "install-sdk-venv: python3 is missing (scripts/install-test-deps.sh installs it)" >&2
  exit 1
fi
echo "install-sdk-venv: installing $req into $venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req"
cp "$req" "$stamp"
