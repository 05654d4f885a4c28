#!/usr/bin/env bash
# Installs the MCP servers the test suite runs, pinned, from the npm registry into tools/mcp (git
# ignores it). Does nothing when the pinned version is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/install.sh

pinned_npm install-mcp-servers "the MCP tests" \
  @modelcontextprotocol/server-everything 2026.8.31 tools/mcp \
  tools/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js
