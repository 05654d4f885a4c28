#!/usr/bin/env bash
# Installs what the test suite needs besides the Rust toolchain: the pinned MCP servers of the
# MCP tests (scripts/install-mcp-servers.sh) and Chromium (Debian's package) for the browser
# tests. Does nothing when they are already there.
set -euo pipefail

"$(dirname "$0")/install-mcp-servers.sh"

if command -v chromium >/dev/null 2>&1 || [[ -n "${CHROMIUM_BIN:-}" && -x "${CHROMIUM_BIN}" ]]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-test-deps: Chromium is needed for the browser tests; install it and set CHROMIUM_BIN=/path/to/chromium" >&2
  exit 1
fi
SUDO=()
if [[ "$(id -u)" != 0 ]]; then
  SUDO=(sudo -n)
fi
echo "install-test-deps: installing chromium (apt-get)"
export DEBIAN_FRONTEND=noninteractive
if ! "${SUDO[@]}" apt-get install -y --no-install-recommends chromium >/dev/null; then
  "${SUDO[@]}" apt-get update >/dev/null
  "${SUDO[@]}" apt-get install -y --no-install-recommends chromium >/dev/null
fi
