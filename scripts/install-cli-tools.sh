#!/usr/bin/env bash
# Installs the coding CLIs that the `cli` engine supervises (OpenAI Codex, Claude Code, Gemini CLI)
# at pinned versions into tools/cli/ of the repository, for local runs and the end-to-end tests,
# and Zed's Claude Code ACP adapter (an ACP agent that runs its commands through the client's
# terminals, which the tests of the acp backend's terminal/* use).
# Does nothing when the pinned versions are already there. Prints each binary's path and version.
#
# Install scripts are skipped (--ignore-scripts): the only one the CLIs need is Claude Code's
# postinstall, which replaces the bin/claude.exe placeholder with the platform's native binary, and
# it is run explicitly below. Skipping the rest avoids compiling node-pty from source (Gemini CLI
# falls back to the prebuilt @lydell/node-pty).
set -euo pipefail

CODEX_VERSION=0.169.0
CLAUDE_VERSION=2.1.328
GEMINI_VERSION=0.61.0
CLAUDE_ACP_VERSION=0.16.2

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PREFIX="${ROOT}/tools/cli"
MODULES="${PREFIX}/node_modules"
BIN="${MODULES}/.bin"

installed_version() { # package name -> version in node_modules, empty when absent
  local manifest="${MODULES}/$1/package.json"
  [[ -f "${manifest}" ]] || return 0
  node -e 'process.stdout.write(String(require(process.argv[1]).version || ""))' "${manifest}"
}

claude_is_native() { # the placeholder is a 500-byte shell script, the native binary is hundreds of MB
  local exe="${MODULES}/@anthropic-ai/claude-code/bin/claude.exe"
  [[ -f "${exe}" ]] && (("$(stat -c %s "${exe}")" > 1000000))
}

up_to_date() {
  [[ "$(installed_version @openai/codex)" == "${CODEX_VERSION}" ]] &&
    [[ "$(installed_version @anthropic-ai/claude-code)" == "${CLAUDE_VERSION}" ]] &&
    [[ "$(installed_version @google/gemini-cli)" == "${GEMINI_VERSION}" ]] &&
    [[ "$(installed_version @zed-industries/claude-code-acp)" == "${CLAUDE_ACP_VERSION}" ]] &&
    [[ -x "${BIN}/codex" && -x "${BIN}/claude" && -x "${BIN}/gemini" ]] &&
    [[ -x "${BIN}/claude-code-acp" ]] &&
    claude_is_native
}

for tool in node npm; do
  if ! command -v "${tool}" >/dev/null 2>&1; then
    echo "install-cli-tools: ${tool} is needed (Node.js 20 or newer)" >&2
    exit 1
  fi
done

if ! up_to_date; then
  echo "install-cli-tools: installing into ${PREFIX} (npm)"
  mkdir -p "${PREFIX}"
  # Claude Code declares engines node>=22 but ships a native binary that does not use Node; npm
  # only warns about it.
  npm install --prefix "${PREFIX}" --no-audit --no-fund --ignore-scripts --save-exact \
    --loglevel=error \
    "@openai/codex@${CODEX_VERSION}" \
    "@anthropic-ai/claude-code@${CLAUDE_VERSION}" \
    "@google/gemini-cli@${GEMINI_VERSION}" \
    "@zed-industries/claude-code-acp@${CLAUDE_ACP_VERSION}"
  (cd "${MODULES}/@anthropic-ai/claude-code" && node install.cjs)
  if ! up_to_date; then
    echo "install-cli-tools: the installed versions do not match the pinned ones" >&2
    exit 1
  fi
fi

for tool in codex claude gemini; do
  printf '%s\t%s\n' "${BIN}/${tool}" "$("${BIN}/${tool}" --version 2>&1 | head -n 1)"
done
