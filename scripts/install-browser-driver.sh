#!/usr/bin/env bash
# Installs the browser driver of the web console's tests (crates/elfgate-server/tests/console.rs):
# playwright-core, pinned, from the npm registry into tools/browser (git ignores it). It drives the
# system's Chromium (Debian's package, which scripts/install-test-deps.sh installs): no browser is
# downloaded. Does nothing when the pinned version is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGE="playwright-core"
VERSION="1.65.1"
DIR="tools/browser"
ENTRY="$DIR/node_modules/$PACKAGE/package.json"

installed() {
  [[ -f "$ENTRY" ]] && node -e "process.exit(require('./$ENTRY').version === '$VERSION' ? 0 : 1)" 2>/dev/null
}

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "install-browser-driver: node and npm are needed for the console's browser tests (Debian: apt-get install nodejs npm)" >&2
  exit 1
fi
if installed; then
  exit 0
fi
echo "install-browser-driver: installing $PACKAGE@$VERSION into $DIR (npm)"
mkdir -p "$DIR"
PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --prefix "$DIR" --no-audit --no-fund --save-exact \
  "$PACKAGE@$VERSION" >/dev/null
if ! installed; then
  echo "install-browser-driver: $ENTRY is missing after the install" >&2
  exit 1
fi
