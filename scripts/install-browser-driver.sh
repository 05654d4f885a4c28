#!/usr/bin/env bash
# Installs the browser driver of the web console's tests (crates/elfgate-server/tests/suite/console.rs):
# playwright-core, pinned, from the npm registry into tools/browser (git ignores it). It drives the
# system's Chromium (Debian's package, which scripts/install-test-deps.sh installs): no browser is
# downloaded. Does nothing when the pinned version is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/install.sh

pinned_npm install-browser-driver "the console's browser tests" \
  playwright-core 1.65.1 tools/browser tools/browser/node_modules/playwright-core/package.json \
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
