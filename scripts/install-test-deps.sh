#!/usr/bin/env bash
# Installs what the test suite needs besides the Rust toolchain: Chromium (Debian's package) for
# the browser tests, and Python 3 for the fake coding CLIs of the cli engine's tests
# (crates/elfgate-server/tests/fixtures/cli) and the gateway's SDK tests, whose official openai
# and anthropic SDKs go into tools/venv (scripts/install-sdk-venv.sh). Does nothing for what is
# already there.
set -euo pipefail

missing=()
if ! command -v chromium >/dev/null 2>&1 && ! [[ -n "${CHROMIUM_BIN:-}" && -x "${CHROMIUM_BIN}" ]]; then
  missing+=(chromium)
fi
if ! command -v python3 >/dev/null 2>&1; then
  missing+=(python3)
fi
if [[ ${#missing[@]} -eq 0 ]]; then
  exec "$(dirname "$0")/install-sdk-venv.sh"
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-test-deps: missing ${missing[*]}: Chromium is needed for the browser tests (or set" \
    "CHROMIUM_BIN=/path/to/chromium), Python 3 for the fake CLIs of the cli engine's tests" >&2
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
exec "$(dirname "$0")/install-sdk-venv.sh"
