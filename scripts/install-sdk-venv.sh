#!/usr/bin/env bash
# Installs the official openai and anthropic Python SDKs (tests/sdk/requirements.txt) into
# tools/venv, for the gateway's SDK tests. Does nothing when the venv already holds exactly
# these requirements.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/install.sh

pinned_venv install-sdk-venv tools/venv tests/sdk/requirements.txt bin/python
