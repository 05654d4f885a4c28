#!/usr/bin/env bash
# Fails when a crate of the workspace declares a dependency it does not use. Runs cargo-machete,
# installing the pinned version from crates.io first when it is missing or another version.
# An unused dependency that is really needed (used only by a macro's expansion, say) goes into
# that crate's `[package.metadata.cargo-machete] ignored = [...]`, with a comment saying why.
set -euo pipefail
cd "$(dirname "$0")/.."

MACHETE_VERSION=0.9.2

if [[ "$(cargo machete --version 2>/dev/null || true)" != "$MACHETE_VERSION" ]]; then
    echo "installing cargo-machete $MACHETE_VERSION"
    cargo install --locked "cargo-machete@$MACHETE_VERSION"
fi
cargo machete
