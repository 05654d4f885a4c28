#!/usr/bin/env bash
# Installs what the test suite needs besides the Rust toolchain: Chromium (Debian's package) for
# the browser tests; Python 3 (with its venv module) for the fake coding CLIs of the cli engine's
# tests (crates/elfgate-server/tests/fixtures/cli) and the gateway's SDK tests, whose official
# openai and anthropic SDKs go into tools/venv (scripts/install-sdk-venv.sh); Node.js with the
# real coding CLIs (codex, claude-code, gemini-cli, which scripts/install-cli-tools.sh puts into
# tools/cli/) for the tests with the real CLIs, and the pinned MCP server of the MCP tests
# (scripts/install-mcp-servers.sh puts it into tools/mcp/), the schema fuzzer (schemathesis,
# which scripts/install-fuzz.sh puts into tools/fuzz-venv/), and playwright-core, which drives
# Chromium in the web console's tests (scripts/install-browser-driver.sh puts it into
# tools/browser/), Arize Phoenix, the trace store of the telemetry tests
# (scripts/install-phoenix.sh puts it into tools/phoenix-venv/), and bubblewrap, which confines the commands the agents run (the sandbox's tests
# need it). Does nothing for what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
if ! command -v chromium >/dev/null 2>&1 && ! [[ -n "${CHROMIUM_BIN:-}" && -x "${CHROMIUM_BIN}" ]]; then
  missing+=(chromium)
fi
if ! command -v python3 >/dev/null 2>&1; then
  missing+=(python3 python3-venv)
elif ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  # Debian splits the venv module (and the pip it bootstraps) out of python3.
  missing+=(python3-venv)
fi
# The terminal client's tests drive `elfgate chat` in tmux.
if ! command -v tmux >/dev/null 2>&1; then
  missing+=(tmux)
fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi
# The sandbox confines agents' commands with bwrap.
if ! command -v bwrap >/dev/null 2>&1; then
  missing+=(bubblewrap)
fi
if [[ ${#missing[@]} -gt 0 ]]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-test-deps: missing ${missing[*]}: Chromium is needed for the browser tests (or set" \
      "CHROMIUM_BIN=/path/to/chromium), Python 3 with venv for the fake CLIs of the cli engine's" \
      "tests and the SDK tests, Node.js 20 or newer with npm for the real CLIs and the MCP server, bubblewrap for the sandbox" >&2
    exit 1
  fi
  SUDO=()
  if [[ "$(id -u)" != 0 ]]; then
    SUDO=(sudo -n)
  fi
  echo "install-test-deps: installing ${missing[*]} (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  if ! "${SUDO[@]}" apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null; then
    "${SUDO[@]}" apt-get update >/dev/null
    "${SUDO[@]}" apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

# gemini-cli needs Node.js 20 or newer (older Debian releases package an older one).
if ! node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)'; then
  echo "install-test-deps: Node.js $(node --version) is too old for the coding CLIs; 20 or newer is needed" >&2
  exit 1
fi
scripts/install-cli-tools.sh
scripts/install-mcp-servers.sh
scripts/install-sdk-venv.sh
scripts/install-fuzz.sh
scripts/install-browser-driver.sh
scripts/install-phoenix.sh
