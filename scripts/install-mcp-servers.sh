#!/usr/bin/env bash
# Installs the MCP servers the test suite runs, pinned, from the npm registry into tools/mcp (git
# ignores it). Does nothing when the pinned version is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGE="@modelcontextprotocol/server-everything"
VERSION="2026.8.31"
DIR="tools/mcp"
ENTRY="$DIR/node_modules/$PACKAGE/dist/index.js"

installed() {
  [[ -f "$ENTRY" ]] && node -e "process.exit(require('./$DIR/node_modules/$PACKAGE/package.json').version === '$VERSION' ? 0 : 1)" 2>/dev/null
}

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "install-mcp-servers: node and npm are needed for the MCP tests (Debian: apt-get install nodejs npm)" >&2
  exit 1
fi
if installed; then
  exit 0
fi
echo "install-mcp-servers: installing $PACKAGE@$VERSION into $DIR (npm)"
mkdir -p "$DIR"
npm install --prefix "$DIR" --no-audit --no-fund --save-exact "$PACKAGE@$VERSION" >/dev/null
if ! installed; then
  echo "install-mcp-servers: $ENTRY is missing after the install" >&2
  exit 1
fi
