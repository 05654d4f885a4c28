#!/usr/bin/env bash
# Installs what the test suite needs besides the Rust toolchain: Chromium (Debian's package) for
# the browser tests, and the coding CLIs (codex, claude-code, gemini-cli, with Node.js) for the
# cli engine's end-to-end tests (scripts/install-cli-tools.sh puts them into tools/cli/). Does
# nothing for what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=()
if [[ "$(id -u)" != 0 ]]; then
  SUDO=(sudo -n)
fi

apt_install() { # Debian packages
  if ! command -v apt-get >/dev/null 2>&1; then
    return 1
  fi
  echo "install-test-deps: installing $* (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  if ! "${SUDO[@]}" apt-get install -y --no-install-recommends "$@" >/dev/null; then
    "${SUDO[@]}" apt-get update >/dev/null
    "${SUDO[@]}" apt-get install -y --no-install-recommends "$@" >/dev/null
  fi
}

if ! command -v chromium >/dev/null 2>&1 && ! [[ -n "${CHROMIUM_BIN:-}" && -x "${CHROMIUM_BIN}" ]]; then
  if ! apt_install chromium; then
    echo "install-test-deps: Chromium is needed for the browser tests; install it and set CHROMIUM_BIN=/path/to/chromium" >&2
    exit 1
  fi
fi

# The CLIs are npm packages; gemini-cli needs Node.js 20 or newer.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  if ! apt_install nodejs npm; then
    echo "install-test-deps: Node.js 20 or newer (with npm) is needed for the cli engine's tests" >&2
    exit 1
  fi
fi
if ! node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)'; then
  echo "install-test-deps: Node.js $(node --version) is too old for the coding CLIs; 20 or newer is needed" >&2
  exit 1
fi
scripts/install-cli-tools.sh
